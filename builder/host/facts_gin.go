package host

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
)

// libmlx5Dirs are where the loader finds libmlx5.so.1 when the job's LD_LIBRARY_PATH
// does not name it: the multiarch and lib64 directories rdma-core and DOCA-OFED install
// into, in the order ld.so.conf lists them on the distributions that ship them.
var libmlx5Dirs = []string{"/usr/lib64", "/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/lib64", "/usr/lib"}

// ginSymbolVersion is the symbol version NCCL's GIN over mlx5 resolves with dlvsym
// (DeepEP #628: "dlvsym failed ... MLX5_1.25").
const ginSymbolVersion = "MLX5_1.25"

// libmlx5Version says whether the libmlx5.so.1 the loader would resolve defines the
// symbol version MLX5_1.25: "yes", "no", "absent" (no libmlx5.so.1 in the directories
// searched), "" when the library is there but cannot be read as ELF.
func (r *Node) libmlx5Version() string {
	var dirs []string
	for _, d := range strings.Split(r.cfg.Env["LD_LIBRARY_PATH"], ":") {
		if path.IsAbs(d) {
			dirs = append(dirs, path.Clean(d))
		}
	}
	for _, d := range append(dirs, libmlx5Dirs...) {
		b, err := r.sys.ReadFile(d + "/libmlx5.so.1")
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return ""
		}
		defs, err := symbolVersionDefs(b)
		if err != nil {
			return ""
		}
		if slices.Contains(defs, ginSymbolVersion) {
			return "yes"
		}
		return "no"
	}
	return "absent"
}

// symbolVersionDefs lists the version names an ELF shared object defines in its
// .gnu.version_d section (what objdump -T shows beside each symbol): the library's own
// soname entry and each version node of its version script.
func symbolVersionDefs(b []byte) ([]string, error) {
	f, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("read ELF: %w", err)
	}
	defer f.Close()
	vs, err := f.DynamicVersions()
	if err != nil {
		return nil, fmt.Errorf("read the version definitions: %w", err)
	}
	var out []string
	for _, v := range vs {
		out = append(out, v.Name)
	}
	return out, nil
}

// moduleVersion is a loaded kernel module's version (/sys/module/<name>/version, which
// modules with MODULE_VERSION have): "none" when the module is not loaded, "" when it is
// loaded without a version file or the file cannot be read.
func (r *Node) moduleVersion(name string) string {
	if _, err := r.sys.Stat("/sys/module/" + name); errors.Is(err, fs.ErrNotExist) {
		return "none"
	} else if err != nil {
		return ""
	}
	v, err := r.sys.ReadString("/sys/module/" + name + "/version")
	if err != nil {
		return ""
	}
	return leadingVersion(v)
}

// fullMemberDefault is the default partition key with the full-membership bit, as the
// kernel prints /sys/class/infiniband/<dev>/ports/<port>/pkeys/<index>.
const fullMemberDefault = 0xffff

// partitionFacts reads, on the devices NVSHMEM would open, whether pkey index 0 of each
// ACTIVE port holds the full-member default key (ib.pkey0: IBRC before NVSHMEM 3.7.0
// uses index 0) and whether a device is an SR-IOV virtual function (ib.vf: its PCI
// function has a physfn link).
func (r *Node) partitionFacts(f map[string]string) {
	if r.devErr != nil {
		return
	}
	devs := r.considered()
	if len(devs) == 0 {
		return
	}
	vf := "no"
	var read, other, unread bool
	for _, d := range devs {
		switch _, err := r.sys.Stat("/sys/class/infiniband/" + d.Name + "/device/physfn"); {
		case err == nil:
			vf = "yes"
		case !errors.Is(err, fs.ErrNotExist) && vf == "no":
			vf = ""
		}
		for _, p := range d.Ports {
			if !p.active() {
				continue
			}
			v, err := r.sys.ReadString(fmt.Sprintf("/sys/class/infiniband/%s/ports/%d/pkeys/0", d.Name, p.Num))
			n, perr := strconv.ParseUint(strings.TrimPrefix(v, "0x"), 16, 16)
			if err != nil || perr != nil {
				unread = true
				continue
			}
			read = true
			other = other || n != fullMemberDefault
		}
	}
	// one port off the default decides; otherwise every active port must have been read
	pkey := ""
	switch {
	case other:
		pkey = "other"
	case read && !unread:
		pkey = "default"
	}
	if pkey != "" {
		f["ib.pkey0"] = pkey
	}
	if vf != "" {
		f["ib.vf"] = vf
	}
}
