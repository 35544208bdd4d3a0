package patches

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"net/url"
	"path"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"

	"github.com/epbuild/epbuild/patches/effect"
	"github.com/epbuild/epbuild/recipes/strictyaml"
)

// Component names the source tree a set patches.
type Component string

// The components a set may patch.
const (
	DeepEP  Component = "deepep"
	NVSHMEM Component = "nvshmem"
)

// componentRe is the recipe component name pattern.
var componentRe = regexp.MustCompile(`^[a-z][a-z0-9-]*$`)

// Kind names where a patch comes from.
type Kind string

// The patch source kinds.
const (
	// KindFile: a patch file in the set directory, our own work.
	KindFile Kind = "file"
	// KindUpstreamDiff: the diff base..head of an upstream repository, computed at run time.
	KindUpstreamDiff Kind = "upstream-diff"
	// KindUpstreamFile: a patch file stored upstream at repo+commit+path.
	KindUpstreamFile Kind = "upstream-file"
	// KindReplace: a file of the tree replaced by an upstream file.
	KindReplace Kind = "replace"
)

// Set is one patch set: an ordered list of patches for one component and the
// effects the patched tree must show.
type Set struct {
	Name        string    `yaml:"name" json:"name"`
	Description string    `yaml:"description" json:"description"`
	Component   Component `yaml:"component" json:"component"`
	// AppliesTo says which sources the set was made for; informational (the
	// apply itself is the proof).
	AppliesTo []Target `yaml:"applies-to,omitempty" json:"applies-to,omitempty"`
	// MaxOffset bounds the offset search: a hunk may be applied at most this many
	// lines away from where the patch says. 0: strict.
	MaxOffset int             `yaml:"max-offset,omitempty" json:"max-offset,omitempty"`
	Patches   []Patch         `yaml:"patches" json:"patches"`
	Effects   []effect.Effect `yaml:"effects,omitempty" json:"effects,omitempty"`

	// fsys holds the set's own files (KindFile patches), rooted at the set directory.
	fsys fs.FS
	// where names the set directory in messages: patches/<name> for a shipped
	// set, the directory itself for a local one (local is then true).
	where string
	local bool
	// checked holds the patch files whose pins loading verified, as they were then: Apply
	// reads them again but hashes only one that changed since (openOwnFile).
	checked map[string]fileStamp
	// limits bound the reads of the set's files.
	limits Limits
	// warnings are what loading found questionable but not wrong.
	warnings []string
}

// Warnings says what loading found questionable but not wrong (a set that states no
// effects), each naming the set.yaml and the fix.
func (s *Set) Warnings() []string { return s.warnings }

// Origin says where the set was read from: "embedded" for a set shipped in
// epbuild, else its directory.
func (s *Set) Origin() string {
	if s.local {
		return s.where
	}
	return "embedded"
}

// Target is one source a set applies to: a full commit or a version constraint.
type Target struct {
	Commit  string `yaml:"commit,omitempty" json:"commit,omitempty"`
	Version string `yaml:"version,omitempty" json:"version,omitempty"`
}

// Patch is one patch of a set. Exactly one source (File, UpstreamDiff,
// UpstreamFile, Replace) is set.
type Patch struct {
	Name string `yaml:"name" json:"name"`
	// File is a patch file in the set directory (git diff or format-patch output).
	File string `yaml:"file,omitempty" json:"file,omitempty"`
	// SHA256 pins File.
	SHA256       string        `yaml:"sha256,omitempty" json:"sha256,omitempty"`
	UpstreamDiff *DiffSpec     `yaml:"upstream-diff,omitempty" json:"upstream-diff,omitempty"`
	UpstreamFile *UpstreamFile `yaml:"upstream-file,omitempty" json:"upstream-file,omitempty"`
	Replace      *Replace      `yaml:"replace,omitempty" json:"replace,omitempty"`
}

// UpstreamFile is a patch file stored upstream, pinned by commit and sha256.
type UpstreamFile struct {
	Repo   string `yaml:"repo" json:"repo"`
	Commit string `yaml:"commit" json:"commit"`
	Path   string `yaml:"path" json:"path"`
	SHA256 string `yaml:"sha256" json:"sha256"`
}

// Spec says where to fetch the file.
func (u UpstreamFile) Spec() FileSpec { return FileSpec{Repo: u.Repo, Commit: u.Commit, Path: u.Path} }

// Replace replaces Target in the tree by an upstream file, pinned by commit and sha256.
type Replace struct {
	Target string `yaml:"target" json:"target"`
	Repo   string `yaml:"repo" json:"repo"`
	Commit string `yaml:"commit" json:"commit"`
	Path   string `yaml:"path" json:"path"`
	SHA256 string `yaml:"sha256" json:"sha256"`
}

// Spec says where to fetch the replacement.
func (r Replace) Spec() FileSpec { return FileSpec{Repo: r.Repo, Commit: r.Commit, Path: r.Path} }

// Kind says where the patch comes from ("" when the patch is invalid).
func (p Patch) Kind() Kind {
	kinds := p.kinds()
	if len(kinds) != 1 {
		return ""
	}
	return kinds[0]
}

func (p Patch) kinds() []Kind {
	var k []Kind
	if p.File != "" {
		k = append(k, KindFile)
	}
	if p.UpstreamDiff != nil {
		k = append(k, KindUpstreamDiff)
	}
	if p.UpstreamFile != nil {
		k = append(k, KindUpstreamFile)
	}
	if p.Replace != nil {
		k = append(k, KindReplace)
	}
	return k
}

// Catalog holds the patch sets by name.
type Catalog struct {
	sets map[string]*Set
}

// Get returns the named set.
func (c *Catalog) Get(name string) (*Set, bool) {
	s, ok := c.sets[name]
	return s, ok
}

// Names lists the sets, sorted.
func (c *Catalog) Names() []string {
	names := make([]string, 0, len(c.sets))
	for n := range c.sets {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// LoadFS reads every <name>/set.yaml of fsys. Errors name the file as
// patches/<name>/set.yaml:line:col; every set's errors are reported together.
func LoadFS(fsys fs.FS) (*Catalog, error) {
	files, err := fs.Glob(fsys, "*/set.yaml")
	if err != nil {
		return nil, fmt.Errorf("list patch sets: %w", err)
	}
	return loadFiles(shippedFiles(fsys, files))
}

// setFileRef is one set.yaml to read: its path in fsys, and the directory of
// fsys as messages name it (see Set.where).
type setFileRef struct {
	fsys   fs.FS
	file   string
	root   string
	local  bool
	limits Limits
}

func shippedFiles(fsys fs.FS, files []string) []setFileRef {
	refs := make([]setFileRef, len(files))
	for i, f := range files {
		refs[i] = setFileRef{fsys: fsys, file: f, root: "patches", limits: DefaultLimits()}
	}
	return refs
}

// loadFiles reads the given set.yaml files into a catalog, reporting every set's
// errors together.
func loadFiles(refs []setFileRef) (*Catalog, error) {
	c := &Catalog{sets: make(map[string]*Set, len(refs))}
	var errs []error
	for _, r := range refs {
		s, err := loadSet(r)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		c.sets[s.Name] = s
	}
	if len(errs) > 0 {
		return nil, &LoadError{Err: errors.Join(errs...)}
	}
	return c, nil
}

// LoadError is a patch set that cannot be read or is not valid: bad input.
type LoadError struct{ Err error }

func (e *LoadError) Error() string { return e.Err.Error() }
func (e *LoadError) Unwrap() error { return e.Err }

// ExitCode marks a bad patch set as bad input (exit 2).
func (e *LoadError) ExitCode() int { return 2 }

var (
	hex40    = regexp.MustCompile(`^[0-9a-f]{40}$`)
	hex64    = regexp.MustCompile(`^[0-9a-f]{64}$`)
	hexShort = regexp.MustCompile(`^[0-9a-fA-F]{4,39}$`)
	nameRe   = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)
)

// setFile is one set.yaml being loaded: its shown name and syntax tree (for the
// line:col of errors found after decoding), and the errors found so far.
type setFile struct {
	name string
	y    *strictyaml.Doc
	errs []error
}

// at records an error at the node reached by path (map keys and sequence
// indexes); when that node is absent, at the nearest ancestor present.
func (f *setFile) at(msg string, path ...any) {
	yp := "$"
	for _, s := range path {
		switch s := s.(type) {
		case string:
			yp += "." + s
		case int:
			yp += fmt.Sprintf("[%d]", s)
		}
	}
	f.errs = append(f.errs, f.y.ErrorAt(yp, pathString(path)+": "+msg))
}

func pathString(p []any) string {
	var b strings.Builder
	for _, s := range p {
		switch s := s.(type) {
		case string:
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(s)
		case int:
			fmt.Fprintf(&b, "[%d]", s)
		}
	}
	if b.Len() == 0 {
		return "set"
	}
	return b.String()
}

func loadSet(r setFileRef) (*Set, error) {
	fsys, file := r.fsys, r.file
	shown := joinShown(r.root, file)
	lim := r.limits.orDefault()
	l := strictyaml.Loader{Limits: strictyaml.DefaultLimits()}
	l.Limits.MaxBytes = lim.SetBytes
	src, err := l.ReadFS(fsys, file, shown)
	if err != nil {
		var ye *strictyaml.Error
		if errors.As(err, &ye) {
			return nil, ye
		}
		return nil, fmt.Errorf("read %s: %w", shown, err)
	}
	var s Set
	y, err := l.Decode(shown, src, &s)
	if err != nil {
		return nil, err
	}
	// name: 0001 would be the patch "1"
	if errs := strictyaml.NumberStrings(shown, y.Root(), reflect.TypeFor[Set]()); len(errs) > 0 {
		joined := make([]error, len(errs))
		for i, e := range errs {
			joined[i] = e
		}
		return nil, errors.Join(joined...)
	}
	f := &setFile{name: shown, y: y}
	dir := path.Dir(file)
	s.where, s.local, s.limits = joinShown(r.root, dir), r.local, lim
	s.fsys, err = fs.Sub(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", s.where, err)
	}
	s.validate(f, dir)
	if len(f.errs) > 0 {
		return nil, errors.Join(f.errs...)
	}
	if len(s.Effects) == 0 {
		s.warnings = append(s.warnings, fmt.Sprintf("%s states no effects: nothing checks that the patched tree, and the install, hold what the set is for; add effects (see docs/patch-sets.md; epbuild patch new suggests some)", shown))
	}
	return &s, nil
}

func (s *Set) validate(f *setFile, dir string) {
	if s.Name == "" {
		f.at("is required", "name")
	} else if s.Name != dir {
		f.at(fmt.Sprintf("%q differs from its directory %q", s.Name, dir), "name")
	}
	if strings.TrimSpace(s.Description) == "" {
		f.at("is required", "description")
	}
	// any component name a recipe may declare: deepep and nvshmem, and the demo's own
	switch {
	case s.Component == "":
		f.at("is required (the recipe component it patches: deepep, nvshmem, ...)", "component")
	case !componentRe.MatchString(string(s.Component)):
		f.at(fmt.Sprintf("%q is not a component name (lower-case letters, digits, '-')", s.Component), "component")
	}
	for i, t := range s.AppliesTo {
		switch {
		case t.Commit != "" && t.Version != "":
			f.at("give commit or version, not both", "applies-to", i)
		case t.Commit != "":
			checkCommit(f, t.Commit, "applies-to", i, "commit")
		case strings.TrimSpace(t.Version) == "":
			f.at("give a commit or a version", "applies-to", i)
		}
	}
	if s.MaxOffset < 0 {
		f.at("must not be negative", "max-offset")
	}
	if len(s.Patches) == 0 {
		f.at("a set needs at least one patch", "patches")
	}
	seen := map[string]bool{}
	files := map[string]int{}
	for i, p := range s.Patches {
		switch {
		case p.Name == "":
			f.at("is required", "patches", i, "name")
		case !nameRe.MatchString(p.Name):
			f.at(fmt.Sprintf("%q: use letters, digits, '.', '_' and '-'", p.Name), "patches", i, "name")
		case seen[p.Name]:
			f.at(fmt.Sprintf("%q is used twice", p.Name), "patches", i, "name")
		}
		seen[p.Name] = true
		if p.File != "" {
			// one file named twice would be read and hashed twice, and applied twice
			if j, ok := files[path.Clean(p.File)]; ok {
				line, _ := f.y.Pos(fmt.Sprintf("$.patches[%d].file", j))
				f.at(fmt.Sprintf("%q is also the file of patches[%d] (line %d): a file is one patch of a set; remove one of them", p.File, j, line), "patches", i, "file")
				continue
			}
			files[path.Clean(p.File)] = i
		}
		s.validatePatch(f, i, p)
	}
	for i, e := range s.Effects {
		switch {
		case e.Kind == "":
			f.at("is required (one of "+effect.KindList()+")", "effects", i, "kind")
		case !slices.Contains(effect.Kinds(), e.Kind):
			f.at(effect.UnknownKind(e.Kind), "effects", i, "kind")
		case e.File == "" && len(e.Files) == 0:
			f.at("an effect needs file or files", "effects", i)
		default:
			if err := e.Validate(); err != nil {
				f.at(err.Error(), "effects", i)
			}
		}
	}
}

func (s *Set) validatePatch(f *setFile, i int, p Patch) {
	kinds := p.kinds()
	switch len(kinds) {
	case 0:
		f.at("give exactly one of file, upstream-diff, upstream-file, replace", "patches", i)
		return
	case 1:
	default:
		f.at(fmt.Sprintf("give exactly one of file, upstream-diff, upstream-file, replace (found %s)", joinKinds(kinds)), "patches", i)
		return
	}
	if p.SHA256 != "" && kinds[0] != KindFile {
		f.at("sha256 belongs to a file patch; pin upstream files inside their block", "patches", i, "sha256")
	}
	switch kinds[0] {
	case KindFile:
		if !fs.ValidPath(p.File) || p.File == "." {
			f.at(fmt.Sprintf("%q is not a path inside the set directory", p.File), "patches", i, "file")
			return
		}
		if !checkSHA(f, p.SHA256, "patches", i, "sha256") {
			return
		}
		got, stamp, err := hashFile(s.fsys, p.File, s.limits.PatchBytes, joinShown(s.where, p.File))
		if err != nil {
			f.at(err.Error(), "patches", i, "file")
			return
		}
		if got != p.SHA256 {
			f.at(fmt.Sprintf("%s has sha256 %s, pinned %s (pin the new sha256 only if you changed the patch yourself)",
				joinShown(s.where, p.File), got, p.SHA256), "patches", i, "sha256")
			return
		}
		if s.checked == nil {
			s.checked = map[string]fileStamp{}
		}
		s.checked[p.File] = stamp
	case KindUpstreamDiff:
		d := p.UpstreamDiff
		checkRepo(f, d.Repo, "patches", i, "upstream-diff", "repo")
		checkCommit(f, d.Base, "patches", i, "upstream-diff", "base")
		checkCommit(f, d.Head, "patches", i, "upstream-diff", "head")
		if d.Ref != "" && !strings.HasPrefix(d.Ref, "refs/") {
			f.at(fmt.Sprintf("%q is not a full ref (refs/...)", d.Ref), "patches", i, "upstream-diff", "ref")
		}
	case KindUpstreamFile:
		u := p.UpstreamFile
		checkRepo(f, u.Repo, "patches", i, "upstream-file", "repo")
		checkCommit(f, u.Commit, "patches", i, "upstream-file", "commit")
		checkRepoPath(f, u.Path, "patches", i, "upstream-file", "path")
		checkSHA(f, u.SHA256, "patches", i, "upstream-file", "sha256")
	case KindReplace:
		r := p.Replace
		checkRepoPath(f, r.Target, "patches", i, "replace", "target")
		checkRepo(f, r.Repo, "patches", i, "replace", "repo")
		checkCommit(f, r.Commit, "patches", i, "replace", "commit")
		checkRepoPath(f, r.Path, "patches", i, "replace", "path")
		checkSHA(f, r.SHA256, "patches", i, "replace", "sha256")
	}
}

func joinKinds(k []Kind) string {
	s := make([]string, len(k))
	for i := range k {
		s[i] = string(k[i])
	}
	return strings.Join(s, ", ")
}

func checkCommit(f *setFile, c string, path ...any) {
	switch {
	case c == "":
		f.at("is required (a full 40-hex commit)", path...)
	case hexShort.MatchString(c):
		f.at(fmt.Sprintf("%q is a short commit; a full 40-hex commit is required", c), path...)
	case !hex40.MatchString(c):
		f.at(fmt.Sprintf("%q is not a commit; a full 40-hex commit (lower case) is required", c), path...)
	}
}

func checkSHA(f *setFile, h string, path ...any) bool {
	switch {
	case h == "":
		f.at("is required (64 hex digits)", path...)
	case !hex64.MatchString(h):
		f.at(fmt.Sprintf("%q is not a sha256 (64 lower-case hex digits)", h), path...)
	default:
		return true
	}
	return false
}

func checkRepo(f *setFile, r string, path ...any) {
	u, err := url.Parse(r)
	if r == "" || err != nil || u.Scheme == "" || (u.Host == "" && u.Scheme != "file") {
		f.at(fmt.Sprintf("%q is not a repository URL", r), path...)
	}
}

func checkRepoPath(f *setFile, p string, path ...any) {
	if !fs.ValidPath(p) || p == "." {
		f.at(fmt.Sprintf("%q is not a relative path inside a tree", p), path...)
	}
}

func sha256Hex(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// openOwnFile opens a KindFile patch of the set directory for reading. The pin is
// checked as it is read, when done is called after the last read; unless loading checked
// it and the file has not changed since: a patch is hashed once a run.
func (s *Set) openOwnFile(ctx context.Context, p Patch) (r io.Reader, done func() error, err error) {
	if s.fsys == nil {
		return nil, nil, fmt.Errorf("patch %s: read %s: the set has no directory (load it with LoadFS)", p.Name, p.File)
	}
	f, err := s.fsys.Open(p.File)
	if err != nil {
		return nil, nil, fmt.Errorf("patch %s: read %s: %w", p.Name, p.File, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("patch %s: read %s: %w", p.Name, p.File, err)
	}
	shown := joinShown(s.where, p.File)
	if err := checkSize(fi, s.limits.orDefault().PatchBytes, shown); err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("patch %s: %w", p.Name, err)
	}
	want, checked := s.checked[p.File]
	pr := &pinReader{f: newBoundedReader(ctx, f, s.limits.orDefault().PatchBytes, shown), size: fi.Size()}
	if !checked || want != stampOf(fi) {
		pr.h = sha256.New()
	}
	done = func() error {
		f.Close()
		if pr.err != nil {
			var tl *TooLargeError
			if errors.As(pr.err, &tl) || ctx.Err() != nil {
				return fmt.Errorf("patch %s: %w", p.Name, pr.err)
			}
			return fmt.Errorf("patch %s: read %s: %w", p.Name, p.File, pr.err)
		}
		if pr.h == nil && pr.n == pr.size {
			return nil
		}
		if pr.h == nil {
			return fmt.Errorf("patch %s: %s changed while being read (%d bytes, was %d); run again", p.Name, p.File, pr.n, pr.size)
		}
		if got := hex.EncodeToString(pr.h.Sum(nil)); got != p.SHA256 {
			return &PinError{Patch: p.Name, What: joinShown(s.where, p.File), Want: p.SHA256, Got: got}
		}
		return nil
	}
	return pr, done, nil
}

// pinReader reads a patch file, hashing it on the way when h is set.
type pinReader struct {
	f    io.Reader
	h    hash.Hash
	n    int64
	size int64
	err  error // a read error other than EOF
}

func (r *pinReader) Read(b []byte) (int, error) {
	n, err := r.f.Read(b)
	r.n += int64(n)
	if r.h != nil {
		r.h.Write(b[:n])
	}
	if err != nil && err != io.EOF {
		r.err = err
	}
	return n, err
}

// hashFile hashes a file of fsys (shown in messages) of at most limit bytes as it reads
// it and returns its sha256 and what the file was when the read began.
func hashFile(fsys fs.FS, name string, limit int64, shown string) (string, fileStamp, error) {
	f, err := fsys.Open(name)
	var nr *NotRegularError
	if errors.As(err, &nr) {
		return "", fileStamp{}, err
	}
	if err != nil {
		return "", fileStamp{}, fmt.Errorf("read %s: %w", shown, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", fileStamp{}, fmt.Errorf("read %s: %w", shown, err)
	}
	if err := checkSize(fi, limit, shown); err != nil {
		return "", fileStamp{}, err
	}
	h := sha256.New()
	if _, err := io.Copy(h, newBoundedReader(context.Background(), f, limit, shown)); err != nil {
		var tl *TooLargeError
		if errors.As(err, &tl) {
			return "", fileStamp{}, err
		}
		return "", fileStamp{}, fmt.Errorf("read %s: %w", shown, err)
	}
	return hex.EncodeToString(h.Sum(nil)), stampOf(fi), nil
}

// joinShown joins a slash-separated path inside a set directory to the
// directory as messages name it (an OS path for a local set).
func joinShown(root, rel string) string {
	if root == "" {
		return rel
	}
	return filepath.Join(root, filepath.FromSlash(rel))
}
