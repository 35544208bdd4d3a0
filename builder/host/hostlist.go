package host

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/epbuild/epbuild/builder/check"
	"github.com/epbuild/epbuild/builder/host/sysroot"
)

// maxHosts and maxHostname bound an expanded host list: a typo like node[0-99999999]
// must not allocate gigabytes. A DNS name has at most 253 characters.
const (
	maxHosts    = 1 << 16
	maxHostname = 255
)

// ExpandHostlist expands Slurm's compressed host list, as SLURM_JOB_NODELIST holds it and
// `scontrol show hostnames` prints it one name a line: comma-separated items, each a name
// with bracketed groups of comma-separated numbers and ranges ("node[01-04,07]",
// "rack[1-2]-gpu[1,3]"); a range keeps the width of its first number ("[08-10]" is
// 08, 09, 10), and several groups in one item multiply, the first varying slowest.
func ExpandHostlist(s string) ([]string, error) {
	var out []string
	for _, item := range splitTop(s) {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		names, err := expandItem(item)
		if err != nil {
			return nil, fmt.Errorf("host list %q: %w", s, err)
		}
		out = append(out, names...)
		if len(out) > maxHosts {
			return nil, fmt.Errorf("host list %q: more than %d hosts", s, maxHosts)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("host list %q names no host", s)
	}
	return out, nil
}

// splitTop splits at the commas outside brackets.
func splitTop(s string) []string {
	var out []string
	depth, start := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '[':
			depth++
		case ']':
			depth--
		case ',':
			if depth == 0 {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	return append(out, s[start:])
}

func expandItem(item string) ([]string, error) {
	names := []string{""}
	for rest := item; rest != ""; {
		open := strings.IndexAny(rest, "[]")
		if open < 0 {
			for i := range names {
				names[i] += rest
			}
			break
		}
		if rest[open] == ']' {
			return nil, fmt.Errorf("%q: ']' without '['", item)
		}
		end := strings.IndexAny(rest[open+1:], "[]")
		if end < 0 || rest[open+1+end] != ']' {
			return nil, fmt.Errorf("%q: '[' without its ']'", item)
		}
		group := rest[open+1 : open+1+end]
		vals, err := expandGroup(group)
		if err != nil {
			return nil, fmt.Errorf("%q: [%s]: %w", item, group, err)
		}
		if len(names)*len(vals) > maxHosts {
			return nil, fmt.Errorf("%q: more than %d hosts", item, maxHosts)
		}
		if len(names[0])+open+len(vals[len(vals)-1]) > maxHostname {
			return nil, fmt.Errorf("%q: a host name longer than %d characters", item, maxHostname)
		}
		var next []string
		for _, n := range names {
			for _, v := range vals {
				next = append(next, n+rest[:open]+v)
			}
		}
		names, rest = next, rest[open+end+2:]
	}
	return names, nil
}

func expandGroup(g string) ([]string, error) {
	var out []string
	for _, part := range strings.Split(g, ",") {
		lo, hi, isRange := strings.Cut(strings.TrimSpace(part), "-")
		if !isRange {
			hi = lo
		}
		a, err1 := strconv.ParseUint(lo, 10, 32)
		b, err2 := strconv.ParseUint(hi, 10, 32)
		switch {
		case err1 != nil || err2 != nil:
			return nil, fmt.Errorf("%q is not a number or a range of numbers (01-04)", part)
		case b < a:
			return nil, fmt.Errorf("range %q runs backwards", part)
		case b-a >= maxHosts:
			return nil, fmt.Errorf("range %q: more than %d hosts", part, maxHosts)
		}
		for n := a; n <= b; n++ {
			out = append(out, fmt.Sprintf("%0*d", len(lo), n))
		}
	}
	return out, nil
}

// ReadHostsFile reads a job's host list: one host a line, the first word of each (an MPI
// hostfile's "node01 slots=8" is node01), '#' starting a comment; a line may use Slurm's
// bracket syntax (node[01-04]).
func ReadHostsFile(file string) ([]string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("read the host list: %w", err)
	}
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line, _, _ := strings.Cut(sc.Text(), "#")
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if !strings.Contains(f[0], "[") {
			out = append(out, f[0])
			continue
		}
		names, err := ExpandHostlist(f[0])
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", file, n, err)
		}
		out = append(out, names...)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read the host list %s: %w", file, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no host listed (one host a line)", file)
	}
	if len(out) > maxHosts {
		return nil, fmt.Errorf("%s: more than %d hosts", file, maxHosts)
	}
	return out, nil
}

// JobHosts is the list of a job's nodes and where it was read: the file given (--hosts),
// else the Slurm allocation (SLURM_JOB_NODELIST, or SLURM_NODELIST of older Slurm)
// expanded by `scontrol show hostnames` where scontrol runs, by ExpandHostlist otherwise.
// No file and no allocation: no hosts, no error.
func JobHosts(ctx context.Context, sys sysroot.Root, file string, env map[string]string) (hosts []string, from string, err error) {
	if file != "" {
		hosts, err := ReadHostsFile(file)
		return hosts, file, err
	}
	for _, k := range []string{"SLURM_JOB_NODELIST", "SLURM_NODELIST"} {
		list := strings.TrimSpace(env[k])
		if list == "" {
			continue
		}
		if out, err := sys.Output(ctx, "scontrol", "show", "hostnames", list); err == nil {
			if hosts := strings.Fields(string(out)); len(hosts) > 0 {
				return hosts, k + " (scontrol show hostnames)", nil
			}
		}
		hosts, err := ExpandHostlist(list)
		if err != nil {
			return nil, k, fmt.Errorf("%s: %w", k, err)
		}
		return hosts, k, nil
	}
	return nil, "", nil
}

// hostnamePath is this node's name, as gethostname() returns it (uts_namespace).
const hostnamePath = "/proc/sys/kernel/hostname"

// sameHost compares host names the way a reader does: without regard to case, and a
// short name matches the full one it starts (node01 is node01.cluster).
func sameHost(a, b string) bool {
	if strings.EqualFold(a, b) {
		return true
	}
	sa, _, _ := strings.Cut(a, ".")
	sb, _, _ := strings.Cut(b, ".")
	return (sa == a || sb == b) && strings.EqualFold(sa, sb)
}

// checkHostnames: the job's nodes must have distinct names, and this node's own name
// (what NVSHMEM hashes) should be one of them.
func (r *Node) checkHostnames() check.Result {
	c := check.Result{ID: "host.hostnames", Why: "NVSHMEM tells nodes apart by the hash of gethostname() alone: PEs on " +
		"nodes with the same hostname are taken for one node (P2P between them, the PE count per node wrong), and the " +
		"job fails or hangs at initialisation. A host listed twice starts twice the ranks on one node"}
	hosts := r.cfg.Hosts
	if len(hosts) == 0 {
		return skip(c, "no host list: give --hosts FILE, or run inside a Slurm allocation (SLURM_JOB_NODELIST)")
	}
	from := r.cfg.HostsFrom
	seen := map[string]string{}
	var dups []string
	for _, h := range hosts {
		k := strings.ToLower(h)
		if first, ok := seen[k]; ok {
			dups = append(dups, fmt.Sprintf("%s (and %s)", h, first))
			continue
		}
		seen[k] = h
	}
	read := fmt.Sprintf("%s: %d hosts", from, len(hosts))
	if len(dups) > 0 {
		return fail(c, read+"; listed more than once: "+strings.Join(dups, ", "), "list each node once ("+from+")")
	}
	me, err := r.sys.ReadString(hostnamePath)
	if err != nil {
		return warn(c, read+", all different; this node's hostname: "+err.Error(), "")
	}
	read += fmt.Sprintf(", all different; this node's hostname is %s", me)
	for _, h := range hosts {
		if sameHost(me, h) {
			return pass(c, read)
		}
	}
	for _, h := range hosts {
		if net.ParseIP(h) == nil {
			return warn(c, read+", which the list does not name",
				"give every node its own hostname (hostnamectl set-hostname <the name the list gives it>): nodes that "+
					"keep a cloned image's hostname ("+me+") are one node to NVSHMEM")
		}
	}
	return pass(c, read+" (the list gives addresses, not names)")
}
