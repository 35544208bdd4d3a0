package host

import (
	"bufio"
	"bytes"
	"errors"
	"io/fs"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Facts are what the compatibility rules may ask of a node (the host: conditions of
// compat/rules.yaml), read through the sysroot so that a capture holds them too. A fact
// that cannot be read is left out: the rules then say they could not decide.
//
//	kernel           X.Y.Z of /proc/sys/kernel/osrelease
//	doca-ofed        X.Y.Z of the doca-ofed package in /var/lib/dpkg/status; none when
//	                 the database holds no installed doca-ofed
//	ib.link-layer    the link layer of the RDMA ports NVSHMEM would open (Ethernet,
//	                 InfiniBand), "mixed" when they differ
//	ib.driver        their kernel driver (mlx5_core, efa, ...), or "mixed"
//	ib.name-prefix   the leading letters of their names (mlx5, rocep), or "mixed"
//	gdrdrv           loaded (/dev/gdrdrv exists) or absent
//	peermem          memory_peers, nvidia_peermem or none
//	regkey.K         K's value in /proc/driver/nvidia/params (RegistryDwords or its own line)
//
// The devices are those whose names start with NVSHMEM_HCA_PREFIX when it is set, else
// every device under /sys/class/infiniband. The process facts (nccl.version,
// nvshmem.host-libs-mapped) come from the process checks, not from here.
func (r *Node) Facts() map[string]string {
	f := map[string]string{}
	if v, err := r.sys.ReadString("/proc/sys/kernel/osrelease"); err == nil {
		if core := leadingVersion(v); core != "" {
			f["kernel"] = core
		}
	}
	if v, ok := r.dpkgVersion("doca-ofed"); ok {
		f["doca-ofed"] = v
	}
	r.ibFacts(f)
	if _, err := r.sys.Stat(gdrdrvPath); err == nil {
		f["gdrdrv"] = "loaded"
	} else if errors.Is(err, fs.ErrNotExist) {
		f["gdrdrv"] = "absent"
	}
	f["peermem"] = r.peermemFact()
	if p, err := r.readNVParams(); err == nil {
		for k, v := range p.values {
			if k != "RegistryDwords" {
				f["regkey."+k] = regkeyValue(v)
			}
		}
		for k, v := range p.dwords {
			f["regkey."+k] = regkeyValue(v)
		}
	}
	return f
}

var versionPrefix = regexp.MustCompile(`^\d+\.\d+(\.\d+)?`)

// leadingVersion is the X.Y.Z a version string starts with ("6.14.0-1007-gcp" → 6.14.0).
func leadingVersion(s string) string { return versionPrefix.FindString(strings.TrimSpace(s)) }

// regkeyValue writes a registry value as the driver reads it (decimal or 0x hex) in
// decimal, so that a rule asking for "1" matches "0x1" too.
func regkeyValue(v string) string {
	if n, err := strconv.ParseUint(strings.TrimSpace(v), 0, 64); err == nil {
		return strconv.FormatUint(n, 10)
	}
	return strings.TrimSpace(v)
}

// dpkgStatus is the Debian package database: stanzas of "Field: value" lines separated by
// blank lines (dpkg-query(1), deb-control(5)).
const dpkgStatus = "/var/lib/dpkg/status"

// dpkgVersion is the X.Y.Z of an installed package's Version ("3.2.1-044000" → 3.2.1),
// "none" when the database lists no installed pkg; ok is false when there is no
// database to read (not a Debian system). The database holds every package
// (megabytes); a capture keeps only pkg's stanza.
func (r *Node) dpkgVersion(pkg string) (string, bool) {
	b, err := r.sys.ReadFileKeeping(dpkgStatus, func(b []byte) []byte { return dpkgStanza(b, pkg) })
	if err != nil {
		return "", false
	}
	if v := stanzaVersion(dpkgStanza(b, pkg)); v != "" {
		return v, true
	}
	return "none", true
}

// dpkgStanza is pkg's stanza of a dpkg status file, with its closing blank line, or nil.
func dpkgStanza(b []byte, pkg string) []byte {
	for _, st := range bytes.Split(b, []byte("\n\n")) {
		st = bytes.Trim(st, "\n")
		for _, line := range bytes.Split(st, []byte("\n")) {
			if k, v, ok := bytes.Cut(line, []byte(":")); ok && string(k) == "Package" && strings.TrimSpace(string(v)) == pkg {
				return append(st, '\n', '\n')
			}
		}
	}
	return nil
}

// stanzaVersion is the X.Y.Z of a stanza's Version when its Status says installed.
func stanzaVersion(b []byte) string {
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var version, status string
	for sc.Scan() {
		line := sc.Text()
		k, v, ok := strings.Cut(line, ":")
		if !ok || strings.HasPrefix(line, " ") {
			continue
		}
		switch k {
		case "Version":
			version = strings.TrimSpace(v)
		case "Status":
			status = strings.TrimSpace(v)
		}
	}
	if !strings.HasSuffix(status, " installed") {
		return ""
	}
	return leadingVersion(version)
}

// ibFacts describes the RDMA devices NVSHMEM would consider.
func (r *Node) ibFacts(f map[string]string) {
	if r.devErr != nil {
		return
	}
	var layers, drivers, prefixes []string
	add := func(list *[]string, v string) {
		if v != "" && !slices.Contains(*list, v) {
			*list = append(*list, v)
		}
	}
	for _, d := range r.devs {
		if r.cfg.HCAPrefix != "" && !strings.HasPrefix(d.Name, r.cfg.HCAPrefix) {
			continue
		}
		add(&drivers, d.Driver)
		add(&prefixes, hcaPrefixOf(d.Name))
		for _, p := range d.Ports {
			add(&layers, p.LinkLayer)
		}
	}
	one := func(key string, vals []string) {
		switch len(vals) {
		case 0:
		case 1:
			f[key] = vals[0]
		default:
			f[key] = "mixed"
		}
	}
	one("ib.link-layer", layers)
	one("ib.driver", drivers)
	one("ib.name-prefix", prefixes)
}

// hcaPrefixOf is the prefix NVSHMEM_HCA_PREFIX would need to select a device: what
// precedes the index of a renamed device (mlx5_3 → mlx5), else its leading letters
// (rocep145s0 → rocep).
func hcaPrefixOf(name string) string {
	if i := strings.LastIndexByte(name, '_'); i > 0 {
		return name[:i]
	}
	return namePrefix(name)
}

// peermemFact says how GPU peer memory is registered: memory_peers (what NVSHMEM 3.2.5
// can see), else the nvidia_peermem module, else none.
func (r *Node) peermemFact() string {
	if names, err := r.sys.Names(memoryPeers); err == nil {
		for _, n := range names {
			if strings.HasPrefix(n, "nv_mem") {
				if _, err := r.sys.ReadString(memoryPeers + "/" + n + "/version"); err == nil {
					return "memory_peers"
				}
			}
		}
	}
	if ok, _ := r.sys.exists(peermemModule); ok {
		return "nvidia_peermem"
	}
	return "none"
}
