package host

import (
	"context"
	"errors"
	"io/fs"
	"strings"
)

// netClassDir lists the network interfaces (Documentation/ABI/testing/sysfs-class-net).
const netClassDir = "/sys/class/net"

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

// addrCommand lists every interface address as getifaddrs(3) does (netlink): what
// NVSHMEM's bootstrap reads, where /sys/class/net has no addresses.
var addrCommand = []string{"ip", "-o", "addr", "show"}

// bootstrapInterface says whether an interface NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME names
// has an address of the bootstrap's socket family (NVSHMEM_BOOTSTRAP_UID_SOCK_FAMILY,
// AF_INET by default; for AF_INET6 the loopback ::1 does not count, as in NVSHMEM's
// findInterfaces): "address" when one has, "no-address" when none has, "absent" when no
// interface matches, "" when the variable is unset or the interfaces or their addresses
// cannot be read. NVSHMEM does not look at whether the interface is up, and takes a named
// interface as given: it does not fall back to another one.
func (r *Node) bootstrapInterface(ctx context.Context) string {
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
	var matched []string
	for _, n := range names {
		if sp.matches(n) {
			matched = append(matched, n)
		}
	}
	if len(matched) == 0 {
		return "absent"
	}
	out, err := r.sys.Output(ctx, addrCommand...)
	if err != nil {
		return ""
	}
	family := "inet"
	if r.cfg.Env["NVSHMEM_BOOTSTRAP_UID_SOCK_FAMILY"] == "AF_INET6" {
		family = "inet6"
	}
	has := addressedInterfaces(out, family)
	for _, n := range matched {
		if has[n] {
			return "address"
		}
	}
	return "no-address"
}

// addressedInterfaces reads `ip -o addr show` ("2: eth0    inet 10.0.0.5/24 brd ... scope
// global eth0\ ...", one address a line; a VLAN shows as eth0.100@eth0) and gives the
// interfaces with an address of family (inet or inet6), the IPv6 loopback left out.
func addressedInterfaces(out []byte, family string) map[string]bool {
	has := map[string]bool{}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 4 || !strings.HasSuffix(f[0], ":") || f[2] != family {
			continue
		}
		name, _, _ := strings.Cut(f[1], "@")
		addr, _, _ := strings.Cut(f[3], "/")
		if family == "inet6" && addr == "::1" {
			continue
		}
		has[name] = true
	}
	return has
}
