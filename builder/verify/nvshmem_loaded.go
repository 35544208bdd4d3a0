package verify

import (
	"context"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"time"
)

// The version of an NVSHMEM host library as the library itself says it: the loaded side
// of R24. Both RC-QP layouts have the same size, so the library is judged by its version
// (a release's version stands for its layout); its file name (libnvshmem_host.so.3 in a
// wheel) or the wheel that installed it are labels, read only when the library cannot
// be asked.

// nvshmemVersionProgram loads the library given as its argument and prints what
// nvshmemx_vendor_get_version_info (NVSHMEM's host API: the NVSHMEM_VENDOR_* version it
// was built as; it needs no nvshmem_init) answers.
const nvshmemVersionProgram = `import ctypes, sys
lib = ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_LOCAL)
v = [ctypes.c_int(-1) for _ in range(3)]
lib.nvshmemx_vendor_get_version_info(*[ctypes.byref(x) for x in v])
print("%d.%d.%d" % tuple(x.value for x in v))
`

var calledVersionRe = regexp.MustCompile(`^([0-9]{1,4})\.([0-9]{1,4})\.([0-9]{1,4})\n?$`)

// nvshmemCalledVersion asks the library at lib for its version with python's ctypes,
// within a few seconds; "" when it cannot be loaded or has no such function.
func nvshmemCalledVersion(ctx context.Context, python string, env []string, lib string) string {
	if python == "" {
		python = "python3"
	}
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, "-I", "-c", nvshmemVersionProgram, lib)
	cmd.Env = env
	if env == nil {
		cmd.Env = os.Environ()
	}
	out, err := cmd.Output()
	if err != nil {
		return ""
	}
	m := calledVersionRe.FindStringSubmatch(string(out))
	if m == nil {
		return ""
	}
	return strings.Join(m[1:], ".")
}

// loadedNVSHMEMVersion is the version of a mapped libnvshmem_host: what the library
// says, asked in env (the job's: where the library's dependencies are found), else what
// its file name or wheel says (nvshmemLibVersion).
func loadedNVSHMEMVersion(ctx context.Context, python string, env []string) func(lib string) string {
	return func(lib string) string {
		if v := nvshmemCalledVersion(ctx, python, env, lib); v != "" {
			return v
		}
		return nvshmemLibVersion(lib)
	}
}
