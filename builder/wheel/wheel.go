// Package wheel writes Python wheels (the binary distribution format of the Python
// Packaging Authority's specifications) without the wheel or build modules: a .dist-info
// made from what `setup.py egg_info` wrote next to `setup.py build`'s output, and a
// reproducible wheel of an installed tree (sorted entries, fixed times and modes, a
// sorted RECORD).
//
// The build writes the installed form (the package files and NAME-VERSION.dist-info with
// METADATA, WHEEL and INSTALLER, no RECORD: pip may show the package, but not uninstall
// what epbuild installed); the package stage packs that tree into a wheel.
package wheel

import (
	"archive/zip"
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Installer is written into INSTALLER of the installed form.
const Installer = "epbuild"

// Tags are the interpreter's wheel tags, as bdist_wheel computes them.
type Tags struct {
	// Python is the major version's tag of a pure package: py3.
	Python string `json:"python"`
	// Interpreter, ABI and Platform tag a package with extension modules: cp312, cp312,
	// linux_x86_64.
	Interpreter string `json:"interpreter"`
	ABI         string `json:"abi"`
	Platform    string `json:"platform"`
	// ExtensionSuffixes are the file endings of extension modules (.cpython-312-x86_64-linux-gnu.so, .abi3.so, .so).
	ExtensionSuffixes []string `json:"extension_suffixes"`
}

// TagScript prints the interpreter's Tags as JSON (python3 -c TagScript).
const TagScript = `
import json, sys, sysconfig, importlib.machinery as m
impl = {"cpython": "cp", "pypy": "pp"}.get(sys.implementation.name, sys.implementation.name)
soabi = sysconfig.get_config_var("SOABI") or ""
parts = soabi.split("-")
if soabi.startswith("cpython-") and len(parts) > 1:
    abi = "cp" + parts[1]
elif len(parts) > 1:
    abi = "_".join(parts[:2]).replace(".", "_")
else:
    abi = "none"
print(json.dumps({
    "python": "py%d" % sys.version_info[0],
    "interpreter": impl + "%d%d" % sys.version_info[:2],
    "abi": abi,
    "platform": sysconfig.get_platform().replace("-", "_").replace(".", "_"),
    "extension_suffixes": list(m.EXTENSION_SUFFIXES),
}))
`

// Tag is the wheel's compatibility tag for a tree: py3-none-any without extension
// modules, else interpreter-abi-platform.
func (t Tags) Tag(root string) (tag string, pure bool, err error) {
	var ext string
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || ext != "" {
			return err
		}
		for _, s := range t.ExtensionSuffixes {
			if strings.HasSuffix(d.Name(), s) {
				ext = p
			}
		}
		return nil
	})
	if err != nil {
		return "", false, fmt.Errorf("look for extension modules in %s: %w", root, err)
	}
	if ext == "" {
		tag, pure = t.Python+"-none-any", true
	} else if t.Interpreter == "" || t.ABI == "" || t.Platform == "" {
		return "", false, fmt.Errorf("%s is an extension module, and the interpreter gave no platform tag", ext)
	} else {
		tag = t.Interpreter + "-" + t.ABI + "-" + t.Platform
	}
	// the tag is written into WHEEL and the wheel's file name
	if !tagRe.MatchString(tag) {
		return "", false, fmt.Errorf("the interpreter's wheel tag %q is not three tags of letters, digits, _ and . (PEP 425)", tag)
	}
	return tag, pure, nil
}

var (
	nameNormRe = regexp.MustCompile(`[-_.]+`)
	extraRe    = regexp.MustCompile(`[^A-Za-z0-9.-]+`)
	reqRe      = regexp.MustCompile(`^([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)\s*(?:\[([^\]]*)\])?\s*(.*)$`)
	tagRe      = regexp.MustCompile(`^[A-Za-z0-9_.]+-[A-Za-z0-9_.]+-[A-Za-z0-9_.]+$`)
	// nameRe is a valid distribution name (the core metadata's Name).
	nameRe = regexp.MustCompile(`^(?i:[A-Z0-9]|[A-Z0-9][A-Z0-9._-]*[A-Z0-9])$`)
	// versionRe is a version as PEP 440 writes it (packaging's VERSION_PATTERN).
	versionRe = regexp.MustCompile(`^(?i:v?(?:[0-9]+!)?[0-9]+(?:\.[0-9]+)*` +
		`(?:[-_.]?(?:a|b|c|rc|alpha|beta|pre|preview)[-_.]?[0-9]*)?` +
		`(?:-[0-9]+|[-_.]?(?:post|rev|r)[-_.]?[0-9]*)?` +
		`(?:[-_.]?dev[-_.]?[0-9]*)?` +
		`(?:\+[a-z0-9]+(?:[-_.][a-z0-9]+)*)?)$`)
	fieldRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9-]*$`)
)

// EscapeName is a distribution name as wheel file and .dist-info names spell it:
// normalized (runs of -_. become one), lowercase, with _ for -.
func EscapeName(name string) string {
	return strings.ReplaceAll(strings.ToLower(nameNormRe.ReplaceAllString(name, "-")), "-", "_")
}

// EscapeVersion is a version as wheel file names spell it.
func EscapeVersion(v string) string { return strings.ReplaceAll(v, "-", "_") }

// DistInfoName is NAME-VERSION.dist-info.
func DistInfoName(name, version string) string {
	return EscapeName(name) + "-" + EscapeVersion(version) + ".dist-info"
}

// FileName is NAME-VERSION-TAG.whl.
func FileName(name, version, tag string) string {
	return EscapeName(name) + "-" + EscapeVersion(version) + "-" + tag + ".whl"
}

// header is one field of a PKG-INFO or METADATA file; Value keeps folded lines.
type header struct{ Key, Value string }

// metadata is a parsed PKG-INFO / METADATA: headers in order, and the body.
type metadata struct {
	Headers []header
	Body    string
}

func (m *metadata) get(key string) string {
	for _, h := range m.Headers {
		if strings.EqualFold(h.Key, key) {
			return h.Value
		}
	}
	return ""
}

func (m *metadata) all(key string) []string {
	var out []string
	for _, h := range m.Headers {
		if strings.EqualFold(h.Key, key) {
			out = append(out, h.Value)
		}
	}
	return out
}

func (m *metadata) drop(key string) {
	m.Headers = slices.DeleteFunc(m.Headers, func(h header) bool { return strings.EqualFold(h.Key, key) })
}

// parseMetadata reads the email-header format of PKG-INFO and METADATA.
func parseMetadata(b []byte, file string) (*metadata, error) {
	m := &metadata{}
	text := strings.ReplaceAll(string(b), "\r\n", "\n")
	lines := strings.SplitAfter(text, "\n")
	for i, l := range lines {
		if strings.TrimRight(l, "\n") == "" {
			m.Body = strings.Join(lines[i+1:], "")
			break
		}
		if l[0] == ' ' || l[0] == '\t' {
			if len(m.Headers) == 0 {
				return nil, fmt.Errorf("%s line %d: a continuation line before any field", file, i+1)
			}
			m.Headers[len(m.Headers)-1].Value += "\n" + strings.TrimRight(l, "\n")
			continue
		}
		k, v, ok := strings.Cut(strings.TrimRight(l, "\n"), ":")
		if !ok || k == "" || strings.ContainsAny(k, " \t") {
			return nil, fmt.Errorf("%s line %d: %q is not a field", file, i+1, strings.TrimRight(l, "\n"))
		}
		m.Headers = append(m.Headers, header{k, strings.TrimSpace(v)})
	}
	if m.get("Name") == "" || m.get("Version") == "" {
		return nil, fmt.Errorf("%s: no Name or Version", file)
	}
	return m, nil
}

// check refuses metadata whose writing would forge a field or leave the .dist-info:
// Name and Version as the core metadata spec allows them (they name the .dist-info and
// the wheel), and no field value holding a line break (Python's email parser breaks
// lines at \r too) other than a folded line's, nor a control character. Multi-line
// text belongs in the body (the description).
func (m *metadata) check(file string) error {
	for _, h := range m.Headers {
		if !fieldRe.MatchString(h.Key) {
			return fmt.Errorf("%s: %q is not a field name", file, h.Key)
		}
		for i := 0; i < len(h.Value); i++ {
			c := h.Value[i]
			folded := c == '\n' && i+1 < len(h.Value) && (h.Value[i+1] == ' ' || h.Value[i+1] == '\t')
			if (c < 0x20 && c != '\t' && !folded) || c == 0x7f {
				return fmt.Errorf("%s: field %s holds a line break or control character (%q): it would be read as another field", file, h.Key, h.Value)
			}
		}
	}
	if n := m.get("Name"); !nameRe.MatchString(n) {
		return fmt.Errorf("%s: Name %q is not a valid distribution name (letters and digits, with . _ - between them)", file, n)
	}
	if v := m.get("Version"); !versionRe.MatchString(v) {
		return fmt.Errorf("%s: Version %q is not a valid version (PEP 440)", file, v)
	}
	return nil
}

func (m *metadata) bytes() []byte {
	var b bytes.Buffer
	for _, h := range m.Headers {
		fmt.Fprintf(&b, "%s: %s\n", h.Key, h.Value)
	}
	if m.Body != "" {
		b.WriteString("\n")
		b.WriteString(m.Body)
	}
	return b.Bytes()
}

// metadataFromEgg turns an egg-info's PKG-INFO and requires.txt into METADATA, as
// bdist_wheel does: at least Metadata-Version 2.1, Requires-Dist and Provides-Extra
// from requires.txt, an old Description field moved into the body.
func metadataFromEgg(pkgInfo, requires []byte) (*metadata, error) {
	m, err := parseMetadata(pkgInfo, "PKG-INFO")
	if err != nil {
		return nil, err
	}
	if v := m.get("Metadata-Version"); v == "" || versionLess(v, "2.1") {
		m.drop("Metadata-Version")
		m.Headers = append([]header{{"Metadata-Version", "2.1"}}, m.Headers...)
	}
	m.drop("Requires-Dist")
	m.drop("Provides-Extra")
	if requires != nil {
		gen, err := requiresDist(string(requires))
		if err != nil {
			return nil, err
		}
		for _, h := range gen {
			if !slices.Contains(m.Headers, h) {
				m.Headers = append(m.Headers, h)
			}
		}
	}
	if d := m.get("Description"); d != "" {
		lines := strings.Split(d, "\n")
		m.Body = strings.TrimLeft(lines[0], " \t") + "\n" + dedent(lines[1:]) + "\n"
		m.drop("Description")
	}
	if err := m.check("PKG-INFO"); err != nil {
		return nil, err
	}
	return m, nil
}

func versionLess(a, b string) bool {
	pa, pb := strings.Split(a, "."), strings.Split(b, ".")
	for i := range max(len(pa), len(pb)) {
		var x, y int
		if i < len(pa) {
			x, _ = strconv.Atoi(pa[i])
		}
		if i < len(pb) {
			y, _ = strconv.Atoi(pb[i])
		}
		if x != y {
			return x < y
		}
	}
	return false
}

func dedent(lines []string) string {
	indent := -1
	for _, l := range lines {
		if strings.TrimSpace(l) == "" {
			continue
		}
		n := len(l) - len(strings.TrimLeft(l, " \t"))
		if indent < 0 || n < indent {
			indent = n
		}
	}
	out := make([]string, len(lines))
	for i, l := range lines {
		if len(l) >= indent && indent > 0 {
			out[i] = l[indent:]
		} else {
			out[i] = strings.TrimLeft(l, " \t")
		}
	}
	return strings.Join(out, "\n")
}

// requiresDist converts setuptools' requires.txt (sections [extra], [:marker],
// [extra:marker]) into Provides-Extra and Requires-Dist fields, sections in name order.
func requiresDist(text string) ([]header, error) {
	type section struct {
		name string
		reqs []string
	}
	var secs []*section
	cur := &section{}
	secs = append(secs, cur)
	for i, l := range strings.Split(text, "\n") {
		l = strings.TrimSpace(l)
		switch {
		case l == "" || strings.HasPrefix(l, "#"):
		case strings.HasPrefix(l, "["):
			if !strings.HasSuffix(l, "]") {
				return nil, fmt.Errorf("requires.txt line %d: %q is not a section", i+1, l)
			}
			cur = &section{name: strings.TrimSpace(l[1 : len(l)-1])}
			secs = append(secs, cur)
		default:
			cur.reqs = append(cur.reqs, l)
		}
	}
	sort.SliceStable(secs, func(i, j int) bool { return secs[i].name < secs[j].name })
	var out []header
	for _, s := range secs {
		extra, cond, _ := strings.Cut(s.name, ":")
		extra = strings.ToLower(extraRe.ReplaceAllString(extra, "_"))
		if extra != "" {
			out = append(out, header{"Provides-Extra", extra})
			if cond != "" {
				cond = "(" + cond + ") and "
			}
			cond += "extra == '" + extra + "'"
		}
		if cond != "" {
			cond = " ; " + cond
		}
		for _, r := range s.reqs {
			d, err := requirement(r)
			if err != nil {
				return nil, fmt.Errorf("requires.txt: %w", err)
			}
			out = append(out, header{"Requires-Dist", d + cond})
		}
	}
	return out, nil
}

// requirement renders one requires.txt line as bdist_wheel does: name[extras] (specs),
// specs sorted, or name @ url.
func requirement(r string) (string, error) {
	m := reqRe.FindStringSubmatch(r)
	if m == nil || strings.Contains(m[3], ";") {
		return "", fmt.Errorf("%q is not a requirement this converter reads (name[extras] specs, no marker)", r)
	}
	out := m[1]
	if m[2] != "" {
		var ex []string
		for _, e := range strings.Split(m[2], ",") {
			if e = strings.TrimSpace(e); e != "" {
				ex = append(ex, e)
			}
		}
		sort.Strings(ex)
		out += "[" + strings.Join(ex, ",") + "]"
	}
	rest := strings.TrimSpace(m[3])
	if url, ok := strings.CutPrefix(rest, "@"); ok {
		return out + " @ " + strings.TrimSpace(url), nil
	}
	rest = strings.TrimSuffix(strings.TrimPrefix(rest, "("), ")")
	var specs []string
	for _, s := range strings.Split(rest, ",") {
		if s = strings.Join(strings.Fields(s), ""); s != "" {
			specs = append(specs, s)
		}
	}
	if len(specs) == 0 {
		return out, nil
	}
	sort.Strings(specs)
	return out + " (" + strings.Join(specs, ",") + ")", nil
}

// Written is what WriteDistInfo made.
type Written struct {
	Name, Version, Tag string
	Pure               bool
	// Dir is the .dist-info directory's name.
	Dir string
}

// WriteDistInfo writes the installed form's NAME-VERSION.dist-info into root (a copy of
// `setup.py build`'s build_lib) from the one *.egg-info in eggBase; license files named
// by License-File are read from src (the directory of setup.py).
func WriteDistInfo(root, eggBase, src string, tags Tags) (Written, error) {
	eggs, err := filepath.Glob(filepath.Join(eggBase, "*.egg-info"))
	if err != nil || len(eggs) != 1 {
		return Written{}, fmt.Errorf("setup.py egg_info wrote %d .egg-info directories in %s, want one", len(eggs), eggBase)
	}
	egg := eggs[0]
	pkgInfo, err := os.ReadFile(filepath.Join(egg, "PKG-INFO"))
	if err != nil {
		return Written{}, fmt.Errorf("read the package metadata: %w", err)
	}
	requires, err := os.ReadFile(filepath.Join(egg, "requires.txt"))
	if errors.Is(err, fs.ErrNotExist) {
		requires, err = nil, nil
	}
	if err != nil {
		return Written{}, fmt.Errorf("read the package requirements: %w", err)
	}
	m, err := metadataFromEgg(pkgInfo, requires)
	if err != nil {
		return Written{}, fmt.Errorf("%s: %w", egg, err)
	}
	w := Written{Name: m.get("Name"), Version: m.get("Version")}
	if w.Tag, w.Pure, err = tags.Tag(root); err != nil {
		return w, err
	}
	w.Dir = DistInfoName(w.Name, w.Version)
	di := filepath.Join(root, w.Dir)
	if _, err := os.Lstat(di); err == nil {
		return w, fmt.Errorf("%s already exists in the build output", w.Dir)
	}
	if err := os.MkdirAll(di, 0o755); err != nil {
		return w, err
	}
	files := map[string][]byte{
		"METADATA":  m.bytes(),
		"WHEEL":     []byte(fmt.Sprintf("Wheel-Version: 1.0\nGenerator: epbuild\nRoot-Is-Purelib: %t\nTag: %s\n", w.Pure, w.Tag)),
		"INSTALLER": []byte(Installer + "\n"),
	}
	for _, extra := range []string{"top_level.txt", "entry_points.txt"} {
		if b, err := os.ReadFile(filepath.Join(egg, extra)); err == nil {
			files[extra] = b
		}
	}
	// PEP 639 (Metadata 2.4) puts license files under licenses/; older metadata beside METADATA
	under := ""
	if !versionLess(m.get("Metadata-Version"), "2.4") {
		under = "licenses/"
	}
	for _, lf := range m.all("License-File") {
		if !filepath.IsLocal(filepath.FromSlash(lf)) {
			return w, fmt.Errorf("License-File %q is not a path inside the source tree", lf)
		}
		b, err := os.ReadFile(filepath.Join(src, filepath.FromSlash(lf)))
		if err != nil {
			return w, fmt.Errorf("License-File %s: %w", lf, err)
		}
		files[under+lf] = b
	}
	for name, b := range files {
		p := filepath.Join(di, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return w, err
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			return w, fmt.Errorf("write %s: %w", name, err)
		}
	}
	return w, nil
}

// Info describes a packed wheel.
type Info struct {
	File    string `json:"file"`
	Name    string `json:"name"`
	Version string `json:"version"`
	Tag     string `json:"tag"`
	SHA256  string `json:"sha256"`
	Size    int64  `json:"size"`
}

// zipEpoch is the earliest time a zip entry can hold.
var zipEpoch = time.Date(1980, 1, 1, 0, 0, 0, 0, time.UTC)

// Pack writes the wheel of an installed tree (root holds the package files and one
// .dist-info) into dir, reproducibly: entries sorted with the .dist-info last and RECORD
// the very last, every time mtime (clamped to 1980, zip's first year), modes 0644 or
// 0755 (executables), deflate at a fixed level; RECORD lists every file with its
// sha256 in that order. INSTALLER and an installed RECORD are left out: they belong to
// an installation, not to a wheel.
func Pack(root, dir string, mtime time.Time) (Info, error) {
	return PackRequiring(root, dir, mtime, nil)
}

// PackRequiring is Pack with reqs added to the wheel's METADATA (see withRequirements);
// the installed form in root is left as it is.
func PackRequiring(root, dir string, mtime time.Time, reqs []Requirement) (Info, error) {
	dis, err := filepath.Glob(filepath.Join(root, "*.dist-info"))
	if err != nil || len(dis) != 1 {
		return Info{}, fmt.Errorf("%s holds %d .dist-info directories, want one (one wheel per component)", root, len(dis))
	}
	distInfo := filepath.Base(dis[0])
	mb, err := os.ReadFile(filepath.Join(dis[0], "METADATA"))
	if err != nil {
		return Info{}, fmt.Errorf("pack a wheel of %s: %w", root, err)
	}
	m, err := parseMetadata(mb, distInfo+"/METADATA")
	if err == nil {
		err = m.check(distInfo + "/METADATA")
	}
	if err != nil {
		return Info{}, err
	}
	wb, err := os.ReadFile(filepath.Join(dis[0], "WHEEL"))
	if err != nil {
		return Info{}, fmt.Errorf("pack a wheel of %s: %w", root, err)
	}
	wm, err := parseWheelFile(wb)
	if err != nil {
		return Info{}, fmt.Errorf("%s/WHEEL: %w", distInfo, err)
	}
	info := Info{Name: m.get("Name"), Version: m.get("Version"), Tag: wm}
	if want := DistInfoName(info.Name, info.Version); want != distInfo {
		return info, fmt.Errorf("%s does not match its METADATA (%s %s): want %s", distInfo, info.Name, info.Version, want)
	}
	info.File = FileName(info.Name, info.Version, info.Tag)
	var metaBytes []byte // the METADATA the wheel holds when reqs change it
	if len(reqs) > 0 {
		if err := withRequirements(m, reqs); err != nil {
			return info, fmt.Errorf("%s/METADATA: %w", distInfo, err)
		}
		metaBytes = m.bytes()
	}

	var files []entry
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		switch {
		case d.IsDir() && (d.Name() == "__pycache__"):
			return fs.SkipDir
		case d.IsDir():
			return nil
		case rel == distInfo+"/INSTALLER" || rel == distInfo+"/RECORD" || strings.HasSuffix(rel, ".pyc"):
			return nil
		case !d.Type().IsRegular():
			return fmt.Errorf("%s: a %s; a wheel holds regular files only", rel, d.Type())
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		mode := fs.FileMode(0o644)
		if fi.Mode()&0o111 != 0 {
			mode = 0o755
		}
		e := entry{name: rel, path: p, mode: mode}
		if rel == distInfo+"/METADATA" && metaBytes != nil {
			e.data = metaBytes
		}
		files = append(files, e)
		return nil
	})
	if err != nil {
		return info, fmt.Errorf("pack a wheel of %s: %w", root, err)
	}
	return info, write(dir, &info, distInfo, files, mtime)
}

// entry is one file of a wheel: read from path, or data when set.
type entry struct {
	name string
	path string
	data []byte
	mode fs.FileMode
}

// write writes the wheel info.File into dir from files (distInfo's among them), sorted
// with the .dist-info last, and its RECORD the very last; it sets info's SHA256 and Size.
func write(dir string, info *Info, distInfo string, files []entry, mtime time.Time) error {
	inDist := func(n string) bool { return strings.HasPrefix(n, distInfo+"/") }
	sort.Slice(files, func(i, j int) bool {
		a, b := files[i], files[j]
		if inDist(a.name) != inDist(b.name) {
			return !inDist(a.name)
		}
		return a.name < b.name
	})

	out := filepath.Join(dir, info.File)
	tmp, err := os.CreateTemp(dir, ".tmp-"+info.File+"-")
	if err != nil {
		return fmt.Errorf("pack %s: %w", info.File, err)
	}
	defer os.Remove(tmp.Name())
	if mtime.Before(zipEpoch) {
		mtime = zipEpoch
	}
	mtime = mtime.UTC().Truncate(2 * time.Second) // DOS times count in 2-second steps
	bw := bufio.NewWriterSize(tmp, 1<<20)
	zw := zip.NewWriter(bw)
	// RECORD is CSV: a path with a comma, a quote or a line break is quoted as such
	var record bytes.Buffer
	rw := csv.NewWriter(&record)
	add := func(name string, mode fs.FileMode, r io.Reader) error {
		h := &zip.FileHeader{Name: name, Method: zip.Deflate, Modified: mtime}
		h.SetMode(mode)
		w, err := zw.CreateHeader(h)
		if err != nil {
			return err
		}
		sum := sha256.New()
		n, err := io.Copy(io.MultiWriter(w, sum), r)
		if err != nil {
			return err
		}
		if name != distInfo+"/RECORD" {
			return rw.Write([]string{name, "sha256=" + base64.RawURLEncoding.EncodeToString(sum.Sum(nil)), strconv.FormatInt(n, 10)})
		}
		return nil
	}
	for _, f := range files {
		if f.data != nil {
			if err := add(f.name, f.mode, bytes.NewReader(f.data)); err != nil {
				return fmt.Errorf("pack %s: %s: %w", info.File, f.name, err)
			}
			continue
		}
		r, err := os.Open(f.path)
		if err != nil {
			return fmt.Errorf("pack %s: %w", info.File, err)
		}
		err = add(f.name, f.mode, r)
		r.Close()
		if err != nil {
			return fmt.Errorf("pack %s: %s: %w", info.File, f.name, err)
		}
	}
	if err := rw.Write([]string{distInfo + "/RECORD", "", ""}); err != nil {
		return fmt.Errorf("pack %s: RECORD: %w", info.File, err)
	}
	if rw.Flush(); rw.Error() != nil {
		return fmt.Errorf("pack %s: RECORD: %w", info.File, rw.Error())
	}
	if err := add(distInfo+"/RECORD", 0o644, &record); err != nil {
		return fmt.Errorf("pack %s: RECORD: %w", info.File, err)
	}
	if err := zw.Close(); err != nil {
		return fmt.Errorf("pack %s: %w", info.File, err)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("pack %s: %w", info.File, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("pack %s: %w", info.File, err)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return err
	}
	if info.SHA256, info.Size, err = HashFile(tmp.Name()); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), out); err != nil {
		return fmt.Errorf("pack %s: %w", info.File, err)
	}
	return nil
}

// Requirement is a distribution at exactly one version: a package of the Python
// environment that a component was built against (its ABI, e.g. NVSHMEM's wheel).
type Requirement struct {
	Name, Version string
}

var (
	// distName is a PEP 508 distribution name.
	distName = regexp.MustCompile(`^(?i)[a-z0-9]([a-z0-9._-]*[a-z0-9])?$`)
	// exactVersion is what may follow == (PEP 440: release, pre/post/dev, local label).
	exactVersion = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9.+!_-]*$`)
	nameSeps     = regexp.MustCompile(`[-_.]+`)
)

// normalizeName is the PEP 503 form of a distribution name, for comparing names.
func normalizeName(n string) string { return nameSeps.ReplaceAllString(strings.ToLower(n), "-") }

// withRequirements adds "Requires-Dist: NAME==VERSION" for each of reqs to m, after its
// own Requires-Dist fields; a Requires-Dist of m that names the same distribution
// without a marker goes (the exact pin says more). A name or version that is not one
// (a newline, a space, a marker) is refused rather than written into the headers.
func withRequirements(m *metadata, reqs []Requirement) error {
	pinned := map[string]bool{}
	var add []header
	for _, r := range reqs {
		if !distName.MatchString(r.Name) {
			return fmt.Errorf("requirement %q: not a distribution name (PEP 508)", r.Name)
		}
		if !exactVersion.MatchString(r.Version) {
			return fmt.Errorf("requirement %s: version %q is not a version (PEP 440)", r.Name, r.Version)
		}
		if n := normalizeName(r.Name); !pinned[n] {
			pinned[n] = true
			add = append(add, header{"Requires-Dist", r.Name + "==" + r.Version})
		}
	}
	last := -1 // the new fields go after the last Requires-Dist, or at the end
	for i, h := range m.Headers {
		if strings.EqualFold(h.Key, "Requires-Dist") {
			last = i
		}
	}
	var out []header
	for i, h := range m.Headers {
		if !strings.EqualFold(h.Key, "Requires-Dist") || strings.Contains(h.Value, ";") || !pinned[normalizeName(reqName(h.Value))] {
			out = append(out, h)
		}
		if i == last {
			out = append(out, add...)
		}
	}
	if last < 0 {
		out = append(out, add...)
	}
	m.Headers = out
	return nil
}

// reqName is the distribution name a Requires-Dist value starts with.
func reqName(v string) string {
	if i := strings.IndexAny(v, " ([<>=!~;"); i >= 0 {
		return v[:i]
	}
	return v
}

// parseWheelFile reads WHEEL: version 1.x and exactly one Tag.
func parseWheelFile(b []byte) (string, error) {
	var tags []string
	version := ""
	for _, l := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(l, ":")
		if !ok {
			continue
		}
		switch strings.TrimSpace(k) {
		case "Wheel-Version":
			version = strings.TrimSpace(v)
		case "Tag":
			tags = append(tags, strings.TrimSpace(v))
		}
	}
	if !strings.HasPrefix(version, "1.") {
		return "", fmt.Errorf("Wheel-Version %q: this writer makes 1.x wheels", version)
	}
	if len(tags) != 1 {
		return "", fmt.Errorf("%d Tag fields, want one", len(tags))
	}
	return tags[0], nil
}

// HashFile is the sha256 (hex) and size of the file at p.
func HashFile(p string) (string, int64, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, fmt.Errorf("hash %s: %w", p, err)
	}
	return fmt.Sprintf("%x", h.Sum(nil)), n, nil
}

// Check is a light reading of a wheel file: the names a .whl must hold, every RECORD
// hash matching its entry. Tests and the package stage use it on what Pack wrote.
func Check(file string) error {
	zr, err := zip.OpenReader(file)
	if err != nil {
		return fmt.Errorf("open wheel %s: %w", file, err)
	}
	defer zr.Close()
	var record *zip.File
	entries := map[string]*zip.File{}
	for _, f := range zr.File {
		entries[f.Name] = f
		if path.Base(f.Name) == "RECORD" && strings.HasSuffix(path.Dir(f.Name), ".dist-info") {
			record = f
		}
	}
	if record == nil {
		return fmt.Errorf("wheel %s: no .dist-info/RECORD", file)
	}
	rc, err := record.Open()
	if err != nil {
		return err
	}
	rb, err := io.ReadAll(rc)
	rc.Close()
	if err != nil {
		return err
	}
	rr := csv.NewReader(bytes.NewReader(rb))
	rr.FieldsPerRecord = 3
	rows, err := rr.ReadAll()
	if err != nil {
		return fmt.Errorf("wheel %s: RECORD: %w", file, err)
	}
	listed := 0
	for _, row := range rows {
		name, digest := row[0], row[1]
		f, ok := entries[name]
		if !ok {
			return fmt.Errorf("wheel %s: RECORD lists %s, which it does not hold", file, name)
		}
		listed++
		if f == record {
			continue
		}
		r, err := f.Open()
		if err != nil {
			return err
		}
		h := sha256.New()
		_, err = io.Copy(h, r)
		r.Close()
		if err != nil {
			return err
		}
		if want := "sha256=" + base64.RawURLEncoding.EncodeToString(h.Sum(nil)); digest != want {
			return fmt.Errorf("wheel %s: %s: RECORD says %s, the entry hashes to %s", file, name, digest, want)
		}
	}
	if listed != len(zr.File) {
		return fmt.Errorf("wheel %s: RECORD lists %d of its %d entries", file, listed, len(zr.File))
	}
	return nil
}

// Layout is a wheel laid out from files on disk rather than from an installed tree: a
// component built here, packed as the Python package it takes the place of.
type Layout struct {
	Name, Version, Summary string
	// Tag is the wheel's compatibility tag (py3-none-linux_x86_64).
	Tag string
	// Files maps each path in the wheel (slash-separated, outside any .dist-info) to the
	// regular file it is read from.
	Files map[string]string
}

// PackLayout writes the wheel of l into dir as reproducibly as Pack: its .dist-info
// holds METADATA (Name, Version, Summary), WHEEL (Root-Is-Purelib false: the files are
// a platform's) and RECORD, with every file's sha256.
func PackLayout(l Layout, dir string, mtime time.Time) (Info, error) {
	m := &metadata{Headers: []header{{"Metadata-Version", "2.1"}, {"Name", l.Name}, {"Version", l.Version}}}
	if l.Summary != "" {
		m.Headers = append(m.Headers, header{"Summary", l.Summary})
	}
	if err := m.check("the METADATA of " + l.Name); err != nil {
		return Info{}, err
	}
	if !tagRe.MatchString(l.Tag) {
		return Info{}, fmt.Errorf("the wheel tag %q of %s is not three tags of letters, digits, _ and . (PEP 425)", l.Tag, l.Name)
	}
	info := Info{Name: l.Name, Version: l.Version, Tag: l.Tag, File: FileName(l.Name, l.Version, l.Tag)}
	distInfo := DistInfoName(l.Name, l.Version)
	if len(l.Files) == 0 {
		return info, fmt.Errorf("pack %s: no files", info.File)
	}
	var files []entry
	for name, from := range l.Files {
		first, _, _ := strings.Cut(name, "/")
		if !filepath.IsLocal(filepath.FromSlash(name)) || strings.HasSuffix(first, ".dist-info") || strings.ContainsRune(name, '\\') {
			return info, fmt.Errorf("pack %s: %q is not a path of the wheel outside its .dist-info", info.File, name)
		}
		fi, err := os.Lstat(from)
		if err != nil {
			return info, fmt.Errorf("pack %s: %w", info.File, err)
		}
		if !fi.Mode().IsRegular() {
			return info, fmt.Errorf("pack %s: %s (for %s) is a %s; a wheel holds regular files only", info.File, from, name, fi.Mode().Type())
		}
		mode := fs.FileMode(0o644)
		if fi.Mode()&0o111 != 0 {
			mode = 0o755
		}
		files = append(files, entry{name: name, path: from, mode: mode})
	}
	files = append(files,
		entry{name: distInfo + "/METADATA", data: m.bytes(), mode: 0o644},
		entry{name: distInfo + "/WHEEL", data: []byte("Wheel-Version: 1.0\nGenerator: epbuild\nRoot-Is-Purelib: false\nTag: " + l.Tag + "\n"), mode: 0o644})
	return info, write(dir, &info, distInfo, files, mtime)
}
