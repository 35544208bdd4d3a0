package host

import (
	"errors"
	"io/fs"
	"strconv"
	"strings"
)

// netClassDir lists the network interfaces, each with operstate (RFC 2863: "up", "down",
// "unknown" for drivers that do not say, ...) and flags (the IFF_* bits in hex)
// (Documentation/ABI/testing/sysfs-class-net).
const netClassDir = "/sys/class/net"

// iffUp is IFF_UP in /sys/class/net/<if>/flags (include/uapi/linux/if.h).
const iffUp = 0x1

// ifSpec is an interface list as NVSHMEM's bootstrap reads NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME
// (findInterfaces and matchIfList in src/modules/bootstrap/uid/ncclSocket, taken from
// NCCL): comma-separated name prefixes, each with an optional :port; a leading '^'
// excludes the names listed, a leading '=' asks for exact names.
type ifSpec struct {
	not, exact bool
	names      []string
}

func parseIfSpec(s string) ifSpec {
	var sp ifSpec
	if rest, ok := strings.CutPrefix(s, "^"); ok {
		sp.not, s = true, rest
	}
	if rest, ok := strings.CutPrefix(s, "="); ok {
		sp.exact, s = true, rest
	}
	for _, item := range strings.Split(s, ",") {
		name, _, _ := strings.Cut(item, ":")
		if name != "" {
			sp.names = append(sp.names, name)
		}
	}
	return sp
}

func (sp ifSpec) matches(name string) bool {
	in := len(sp.names) == 0 // no names: every interface
	for _, n := range sp.names {
		if sp.exact && name == n || !sp.exact && strings.HasPrefix(name, n) {
			in = true
		}
	}
	return in != sp.not
}

// bootstrapInterface says whether an interface NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME names is
// up: "up" when one of them is (operstate up, or unknown with IFF_UP set), "down" when
// none is, "absent" when no interface matches, "" when the variable is unset or the
// interfaces cannot be listed. NVSHMEM takes a named interface as given and does not
// fall back to another one.
func (r *Node) bootstrapInterface() string {
	spec := r.cfg.Env["NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME"]
	if spec == "" {
		return ""
	}
	names, err := r.sys.Names(netClassDir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "absent"
	case err != nil:
		return ""
	}
	sp := parseIfSpec(spec)
	matched := false
	for _, n := range names {
		if !sp.matches(n) {
			continue
		}
		matched = true
		if r.interfaceUp(n) {
			return "up"
		}
	}
	if matched {
		return "down"
	}
	return "absent"
}

func (r *Node) interfaceUp(name string) bool {
	state, err := r.sys.ReadString(netClassDir + "/" + name + "/operstate")
	if err != nil {
		return false
	}
	switch state {
	case "up":
		return true
	case "unknown":
		flags, err := r.sys.ReadString(netClassDir + "/" + name + "/flags")
		if err != nil {
			return false
		}
		n, err := strconv.ParseUint(strings.TrimPrefix(flags, "0x"), 16, 32)
		return err == nil && n&iffUp != 0
	}
	return false
}
