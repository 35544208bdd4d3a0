package inspect

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strconv"
)

// NCCLLib is what an NCCL library says of itself: ncclGetVersion's code and the version
// it stands for.
type NCCLLib struct {
	Path    string `json:"path"`
	Code    int    `json:"code"`
	Version string `json:"version"`
}

// ncclLibProgram loads the library given in argv and calls ncclGetVersion, which only
// stores a constant: no GPU, no driver, no communicator. The path comes in argv, never
// spliced into the program text.
const ncclLibProgram = `import ctypes, json, sys
lib = ctypes.CDLL(sys.argv[1])
v = ctypes.c_int(0)
rc = lib.ncclGetVersion(ctypes.byref(v))
print("` + reportMarker + `" + json.dumps({"rc": rc, "code": v.value}))
`

// NCCLLibraryVersion loads an NCCL library with python (ctypes) in a clean environment
// and asks it ncclGetVersion, as torch.cuda.nccl.version() asks the copy torch loaded.
func NCCLLibraryVersion(ctx context.Context, python, path string) (NCCLLib, error) {
	r := NCCLLib{Path: path}
	out, _, err := runPython(ctx, python, []string{"PATH=" + os.Getenv("PATH")}, "", ncclLibProgram, path)
	if err != nil {
		return r, fmt.Errorf("load %s and call ncclGetVersion: %w", path, err)
	}
	var rep struct{ RC, Code int }
	if err := decodeReport(out, &rep); err != nil {
		return r, fmt.Errorf("load %s and call ncclGetVersion: %w", path, err)
	}
	if rep.RC != 0 {
		return r, fmt.Errorf("%s: ncclGetVersion returned %d", path, rep.RC)
	}
	r.Code, r.Version = rep.Code, NCCLCodeVersion(rep.Code)
	return r, nil
}

// NCCLCodeVersion turns NCCL_VERSION_CODE into MAJOR.MINOR.PATCH: X*10000+Y*100+Z from
// 2.9 on (nccl.h's NCCL_VERSION), X*1000+Y*100+Z before.
func NCCLCodeVersion(code int) string {
	if code >= 10000 {
		return fmt.Sprintf("%d.%d.%d", code/10000, code/100%100, code%100)
	}
	return fmt.Sprintf("%d.%d.%d", code/1000, code/100%10, code%100)
}

var ncclHeaderDefine = regexp.MustCompile(`(?m)^#define NCCL_(MAJOR|MINOR|PATCH)\s+(\d+)`)

// NCCLHeaderVersion reads NCCL_MAJOR.NCCL_MINOR.NCCL_PATCH from an nccl.h ("" when it
// does not say).
func NCCLHeaderVersion(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	v := map[string]int{}
	for _, m := range ncclHeaderDefine.FindAllStringSubmatch(string(b), -1) {
		v[m[1]], _ = strconv.Atoi(m[2])
	}
	for _, k := range []string{"MAJOR", "MINOR", "PATCH"} {
		if _, ok := v[k]; !ok {
			return ""
		}
	}
	return fmt.Sprintf("%d.%d.%d", v["MAJOR"], v["MINOR"], v["PATCH"])
}
