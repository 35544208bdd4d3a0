package patches

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"

	"github.com/goccy/go-yaml"

	"github.com/epbuild/epbuild/patches/effect"
)

// NewPatch is one patch of a set being written: its name in the set and its bytes.
type NewPatch struct {
	Name string
	Data []byte
	// Commit is the commit the patch makes, when it comes from one.
	Commit string
}

// NewSet is a patch set to write with WriteSet: a set.yaml and its patch files.
type NewSet struct {
	Name        string
	Description string
	Component   Component
	// Base is the commit the patches were made on, when known (applies-to).
	Base    string
	Patches []NewPatch
	// Effects are the effects to state; SuggestEffects derives some from the patches.
	Effects []effect.Effect
}

// EnvError is something the environment lacks (git, to read a commit range): exit 3.
type EnvError struct{ Err error }

func (e *EnvError) Error() string { return e.Err.Error() }
func (e *EnvError) Unwrap() error { return e.Err }

// ExitCode marks it as the environment's (exit 3).
func (e *EnvError) ExitCode() int { return 3 }

// FromCommits makes one patch per commit of the range base..head (git's A..B) of the git
// work tree dir, in order, each as `git format-patch` writes it. It returns the patches
// and base as a full commit.
func FromCommits(ctx context.Context, dir, rng string) ([]NewPatch, string, error) {
	a, b, ok := strings.Cut(rng, "..")
	if !ok || a == "" || b == "" || strings.HasPrefix(b, ".") {
		return nil, "", &LoadError{Err: fmt.Errorf("--from %q: give a commit range BASE..HEAD (two dots), or patch files", rng)}
	}
	if _, err := exec.LookPath("git"); err != nil {
		return nil, "", &EnvError{fmt.Errorf("--from %s needs git: %w", rng, err)}
	}
	base, err := gitOut(ctx, dir, "rev-parse", "--verify", "--end-of-options", a+"^{commit}")
	if err != nil {
		return nil, "", &LoadError{Err: fmt.Errorf("--from %s: %s is not a commit of %s: %w", rng, a, dir, err)}
	}
	head, err := gitOut(ctx, dir, "rev-parse", "--verify", "--end-of-options", b+"^{commit}")
	if err != nil {
		return nil, "", &LoadError{Err: fmt.Errorf("--from %s: %s is not a commit of %s: %w", rng, b, dir, err)}
	}
	list, err := gitOut(ctx, dir, "rev-list", "--reverse", "--no-merges", base+".."+head)
	if err != nil {
		return nil, "", fmt.Errorf("list the commits %s: %w", rng, err)
	}
	commits := strings.Fields(list)
	if len(commits) == 0 {
		return nil, "", &LoadError{Err: fmt.Errorf("--from %s: no commits in the range (is it HEAD..BASE?)", rng)}
	}
	var out []NewPatch
	for i, c := range commits {
		subject, err := gitOut(ctx, dir, "log", "-1", "--format=%f", c)
		if err != nil {
			return nil, "", fmt.Errorf("read commit %s: %w", c, err)
		}
		data, err := gitRaw(ctx, dir, "format-patch", "-1", "--stdout", "--no-signature", "--full-index", "--binary", c)
		if err != nil {
			return nil, "", fmt.Errorf("format-patch %s: %w", c, err)
		}
		name := fmt.Sprintf("%04d-%s", i+1, subject)
		if len(name) > 64 {
			name = strings.TrimRight(name[:64], "-.")
		}
		out = append(out, NewPatch{Name: name, Data: []byte(data), Commit: c})
	}
	return out, base, nil
}

func gitOut(ctx context.Context, dir string, args ...string) (string, error) {
	out, err := gitRaw(ctx, dir, args...)
	return strings.TrimSpace(out), err
}

// gitRaw runs git in dir and returns its output as it is.
func gitRaw(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", append([]string{"-c", "core.quotepath=off", "-c", "diff.noprefix=false"}, args...)...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		if msg := strings.TrimSpace(stderr.String()); msg != "" {
			return "", fmt.Errorf("git %s: %s", args[0], msg)
		}
		return "", fmt.Errorf("git %s: %w", args[0], err)
	}
	return string(b), nil
}

// FromFiles reads existing diff files, each a patch named by its file name without
// .patch or .diff. They are read as a set's files are: regular files, within limits.
func FromFiles(ctx context.Context, files []string, limits Limits) ([]NewPatch, error) {
	limits = limits.orDefault()
	var out []NewPatch
	seen := map[string]string{}
	for _, f := range files {
		name := strings.TrimSuffix(strings.TrimSuffix(filepath.Base(f), ".patch"), ".diff")
		if !nameRe.MatchString(name) {
			return nil, &LoadError{Err: fmt.Errorf("%s: %q is not a patch name (letters, digits, '.', '_', '-'): rename the file", f, name)}
		}
		if prev, ok := seen[name]; ok {
			return nil, &LoadError{Err: fmt.Errorf("%s and %s make the same patch name %q: rename one", prev, f, name)}
		}
		seen[name] = f
		data, err := readUserFile(ctx, f, limits.PatchBytes)
		if err != nil {
			return nil, err
		}
		if _, err := parsePatch(name, data); err != nil {
			return nil, &LoadError{Err: fmt.Errorf("%s: %w", f, err)}
		}
		out = append(out, NewPatch{Name: name, Data: data})
	}
	return out, nil
}

// readUserFile reads a file the user named: a regular file of at most limit bytes.
func readUserFile(ctx context.Context, p string, limit int64) ([]byte, error) {
	f, err := userDir(filepath.Dir(p)).Open(filepath.Base(p))
	if err != nil {
		var nr *NotRegularError
		if errors.As(err, &nr) {
			return nil, err
		}
		return nil, &LoadError{Err: fmt.Errorf("read %s: %w", p, err)}
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", p, err)
	}
	if err := checkSize(fi, limit, p); err != nil {
		return nil, err
	}
	data, err := io.ReadAll(newBoundedReader(ctx, f, limit, p))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", p, err)
	}
	return data, nil
}

// setFileYAML is set.yaml as WriteSet writes it: the fields of Set in their order.
type setFileYAML struct {
	Name        string          `yaml:"name"`
	Description string          `yaml:"description"`
	Component   Component       `yaml:"component"`
	AppliesTo   []Target        `yaml:"applies-to,omitempty"`
	Patches     []Patch         `yaml:"patches"`
	Effects     []effect.Effect `yaml:"effects,omitempty"`
}

// WriteSet writes the set into the new directory dir (its last element is the set's
// name): set.yaml, with each patch file pinned by its sha256, and the patch files. It is
// written whole into a temporary directory beside dir, then renamed: an existing dir is
// never overwritten, and nothing half-written is left.
func WriteSet(dir string, ns NewSet) error {
	if ns.Name != filepath.Base(dir) {
		return fmt.Errorf("write set %s: its name %q differs from its directory", dir, ns.Name)
	}
	if _, err := os.Lstat(dir); err == nil {
		return &LoadError{Err: fmt.Errorf("%s exists: pick another name, or remove it first", dir)}
	}
	y := setFileYAML{Name: ns.Name, Description: ns.Description, Component: ns.Component, Effects: ns.Effects}
	if ns.Base != "" {
		y.AppliesTo = []Target{{Commit: ns.Base}}
	}
	for _, p := range ns.Patches {
		y.Patches = append(y.Patches, Patch{Name: p.Name, File: p.Name + ".patch", SHA256: sha256Hex(p.Data)})
	}
	body, err := yaml.MarshalWithOptions(y, yaml.IndentSequence(true))
	if err != nil {
		return fmt.Errorf("write set %s: %w", dir, err)
	}
	head := "# Written by epbuild patch new. The effects are suggestions derived from what the\n" +
		"# patches add: keep those that say what the set is for, add \"installed:\" paths, and\n" +
		"# see docs/patch-sets.md for every field and effect kind.\n"
	// written and loaded under a temporary directory beside dir, then moved into place
	tmp, err := os.MkdirTemp(filepath.Dir(dir), "."+filepath.Base(dir)+".tmp-")
	if err != nil {
		return fmt.Errorf("write set %s: %w", dir, err)
	}
	defer os.RemoveAll(tmp)
	setDir := filepath.Join(tmp, ns.Name)
	if err := os.Mkdir(setDir, 0o755); err != nil {
		return fmt.Errorf("write set %s: %w", dir, err)
	}
	for _, p := range ns.Patches {
		if err := os.WriteFile(filepath.Join(setDir, p.Name+".patch"), p.Data, 0o644); err != nil {
			return fmt.Errorf("write set %s: %w", dir, err)
		}
	}
	if err := os.WriteFile(filepath.Join(setDir, "set.yaml"), append([]byte(head), body...), 0o644); err != nil {
		return fmt.Errorf("write set %s: %w", dir, err)
	}
	if _, err := LoadFor(Local{Dirs: []string{tmp}, Shadow: []string{ns.Name}}, ns.Name); err != nil {
		return fmt.Errorf("write set %s: the set written does not load: %w", dir, err)
	}
	if err := renameNoReplace(setDir, dir); err != nil {
		return fmt.Errorf("write set %s: %w", dir, err)
	}
	return nil
}

// NewOptions says what epbuild patch new writes, and from what.
type NewOptions struct {
	// Dir is the set directory to create; its last element is the set's name.
	Dir         string
	Component   Component
	Description string
	// Repo is the git work tree Range is read from.
	Repo string
	// Range is a commit range BASE..HEAD; else Files are read.
	Range  string
	Files  []string
	Limits Limits
}

// New writes a new set from a commit range (one patch per commit) or diff files, with
// the effects SuggestEffects derives; from commits, only those that pass on the head
// commit's files are kept. It returns the set as written.
func New(ctx context.Context, o NewOptions) (*NewSet, error) {
	name := filepath.Base(o.Dir)
	if !nameRe.MatchString(name) {
		return nil, &LoadError{Err: fmt.Errorf("%q is not a set name (letters, digits, '.', '_', '-', starting with a letter or digit)", name)}
	}
	if !componentRe.MatchString(string(o.Component)) {
		return nil, &LoadError{Err: fmt.Errorf("--component %q is not a component name (lower-case letters, digits, '-'): the recipe component the set patches", o.Component)}
	}
	ns := &NewSet{Name: name, Component: o.Component, Description: o.Description}
	var err error
	switch {
	case o.Range != "":
		var head string
		if ns.Patches, ns.Base, err = FromCommits(ctx, o.Repo, o.Range); err != nil {
			return nil, err
		}
		head = ns.Patches[len(ns.Patches)-1].Commit
		at := GitFileAt(ctx, o.Repo)
		tree, err := os.MkdirTemp("", "epbuild-patch-new-")
		if err != nil {
			return nil, fmt.Errorf("suggest effects: %w", err)
		}
		defer os.RemoveAll(tree)
		effs := SuggestEffects(ns.Patches, at)
		if err := TreeOf(tree, effs, head, at); err != nil {
			return nil, fmt.Errorf("suggest effects: %w", err)
		}
		ns.Effects = KeepPassing(tree, effs)
		if ns.Description == "" {
			subj, _ := gitOut(ctx, o.Repo, "log", "-1", "--format=%s", ns.Patches[0].Commit)
			ns.Description = subj
		}
	case len(o.Files) > 0:
		if ns.Patches, err = FromFiles(ctx, o.Files, o.Limits); err != nil {
			return nil, err
		}
		ns.Effects = SuggestEffects(ns.Patches, nil)
	default:
		return nil, &LoadError{Err: errors.New("give --from BASE..HEAD (a commit range of a git work tree) or --from FILE... (diff files)")}
	}
	if strings.TrimSpace(ns.Description) == "" {
		ns.Description = "patches " + strings.Join(patchNames(ns.Patches), ", ")
	}
	if err := WriteSet(o.Dir, *ns); err != nil {
		return nil, err
	}
	return ns, nil
}

func patchNames(ps []NewPatch) []string {
	n := make([]string, len(ps))
	for i, p := range ps {
		n[i] = p.Name
	}
	return n
}

var (
	pyClassRe  = regexp.MustCompile(`^\s*class\s+([A-Za-z_]\w*)`)
	pyDefRe    = regexp.MustCompile(`^\s*(?:async\s+)?def\s+([A-Za-z_]\w*)\s*\(`)
	pySelfCall = regexp.MustCompile(`\bself\.([A-Za-z_]\w*)\s*\(`)
	envReadRe  = regexp.MustCompile(`(?:os\.environ\.get|os\.getenv|getenv)\s*\(\s*["']([A-Za-z_][A-Za-z0-9_]*)["']|os\.environ\[\s*["']([A-Za-z_][A-Za-z0-9_]*)["']\s*\]`)
	includeRe  = regexp.MustCompile(`^\s*#\s*include\s*[<"]([^>"]+)[>"]`)
	hunkHeadRe = regexp.MustCompile(`^@@ -[0-9,]+ \+([0-9]+)(?:,[0-9]+)? @@ ?(.*)$`)
)

// FileAt returns the text of a file of the tree a patch leaves (its commit's), or false.
type FileAt func(commit, path string) ([]byte, bool)

// SuggestEffects derives effects from what the patches add, for the author to keep or
// drop: a Python method added to a class (python-def) and called with self.m() from
// another method (python-call), an environment variable read (env-read), an #include
// added (include); for a file where none is found, the longest line added (contains).
// With at, the class and method around an added line are read from the patched file;
// without it, from the diff's own lines.
func SuggestEffects(ps []NewPatch, at FileAt) []effect.Effect {
	var out []effect.Effect
	add := func(e effect.Effect) {
		if !slices.ContainsFunc(out, func(o effect.Effect) bool { return reflect.DeepEqual(o, e) }) {
			out = append(out, e)
		}
	}
	type call struct{ file, class, method, callee string }
	var defs []effect.Effect
	var calls []call
	for _, p := range ps {
		var (
			file, class, method, longest string
			src                          []string
			found                        bool
			n                            int // the new-side line number of the next line
		)
		flush := func() {
			if file != "" && !found && longest != "" {
				add(effect.Effect{Kind: effect.Contains, File: file, Text: longest})
			}
			found, longest = false, ""
		}
		for _, line := range strings.Split(string(p.Data), "\n") {
			switch {
			case strings.HasPrefix(line, "+++ "):
				flush()
				file, src, class, method = "", nil, "", ""
				if f, ok := strings.CutPrefix(line, "+++ b/"); ok && fsValid(f) {
					file = f
					if at != nil {
						if b, ok := at(p.Commit, f); ok {
							src = strings.Split(string(b), "\n")
						}
					}
				}
				continue
			case strings.HasPrefix(line, "--- "), strings.HasPrefix(line, "diff --git "):
				continue
			case strings.HasPrefix(line, "@@"):
				method = ""
				if m := hunkHeadRe.FindStringSubmatch(line); m != nil {
					fmt.Sscan(m[1], &n)
					if c := pyClassRe.FindStringSubmatch(m[2]); c != nil && !strings.HasPrefix(m[2], " ") {
						class = c[1]
					}
				}
				continue
			}
			if file == "" || line == "" || (line[0] != '+' && line[0] != ' ') {
				continue
			}
			added, text := line[0] == '+', line[1:]
			n++
			isPy := strings.HasSuffix(file, ".py")
			if isPy {
				// where the line is: from the patched file, else from the diff's lines
				if c := pyClassRe.FindStringSubmatch(text); c != nil {
					class, method = c[1], ""
				} else if d := pyDefRe.FindStringSubmatch(text); d != nil {
					method = d[1]
				} else if t := strings.TrimSpace(text); t != "" && !strings.HasPrefix(text, " ") && !strings.HasPrefix(text, "\t") && !strings.HasPrefix(t, "#") {
					class, method = "", ""
				}
				if src != nil {
					class, method = enclosing(src, n-1)
				}
			}
			if !added {
				continue
			}
			if isPy {
				if d := pyDefRe.FindStringSubmatch(text); d != nil && class != "" {
					defs = append(defs, effect.Effect{Kind: effect.PythonDef, File: file, Class: class, Method: d[1]})
					found = true
				}
				if class != "" && method != "" {
					for _, m := range pySelfCall.FindAllStringSubmatch(text, -1) {
						calls = append(calls, call{file, class, method, m[1]})
					}
				}
			}
			for _, m := range envReadRe.FindAllStringSubmatch(text, -1) {
				add(effect.Effect{Kind: effect.EnvRead, File: file, Name: m[1] + m[2]})
				found = true
			}
			if m := includeRe.FindStringSubmatch(text); m != nil && !isPy {
				add(effect.Effect{Kind: effect.Include, File: file, Header: m[1]})
				found = true
			}
			if t := strings.TrimSpace(text); len(t) > len(longest) && !strings.HasPrefix(t, "#") {
				longest = t
			}
		}
		flush()
	}
	for _, d := range defs {
		add(d)
		// a method added and called: the call is what makes it matter
		for _, c := range calls {
			if c.file == d.File && c.class == d.Class && c.callee == d.Method && c.method != d.Method {
				add(effect.Effect{Kind: effect.PythonCall, File: d.File, Class: d.Class, Method: c.method, Callee: d.Method})
			}
		}
	}
	return out
}

// enclosing finds the class and method around line i (0-based) of a Python file by
// indentation: the nearest def above it indented less, and the nearest class above that
// indented less again (dotted when classes nest). A def line is its own method.
func enclosing(src []string, i int) (class, method string) {
	if i < 0 || i >= len(src) {
		return "", ""
	}
	ind := indent(src[i])
	if d := pyDefRe.FindStringSubmatch(src[i]); d != nil {
		method = d[1]
	} else if strings.TrimSpace(src[i]) == "" {
		ind = 1 << 30
	}
	var classes []string
	for j := i - 1; j >= 0 && ind > 0; j-- {
		l := src[j]
		t := strings.TrimSpace(l)
		if t == "" || strings.HasPrefix(t, "#") {
			continue
		}
		li := indent(l)
		if li >= ind {
			continue
		}
		ind = li
		if c := pyClassRe.FindStringSubmatch(l); c != nil {
			classes = append([]string{c[1]}, classes...)
		} else if d := pyDefRe.FindStringSubmatch(l); d != nil {
			if len(classes) > 0 {
				return "", "" // a class inside a function: not a method effect can name
			}
			method = d[1] // a nested def runs when the one around it calls it: name the outer
		}
	}
	return strings.Join(classes, "."), method
}

func indent(l string) int { return len(l) - len(strings.TrimLeft(l, " \t")) }

// KeepPassing returns the effects that pass on the tree at root: a suggestion that does
// not hold on the patched tree is left out.
func KeepPassing(root string, effs []effect.Effect) []effect.Effect {
	var out []effect.Effect
	for _, e := range effs {
		if r := effect.Check(root, e, nil); r.Status == effect.StatusPass {
			out = append(out, e)
		}
	}
	return out
}

// GitFileAt reads files of commits of the git work tree dir.
func GitFileAt(ctx context.Context, dir string) FileAt {
	return func(commit, p string) ([]byte, bool) {
		if commit == "" {
			return nil, false
		}
		cmd := exec.CommandContext(ctx, "git", "show", commit+":"+p)
		cmd.Dir = dir
		b, err := cmd.Output()
		return b, err == nil
	}
}

// TreeOf writes the files the effects name, as they are at commit, under root: enough
// of the patched tree for KeepPassing.
func TreeOf(root string, effs []effect.Effect, commit string, at FileAt) error {
	for _, e := range effs {
		if e.File == "" {
			continue
		}
		b, ok := at(commit, e.File)
		if !ok {
			continue
		}
		dst := filepath.Join(root, filepath.FromSlash(e.File))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(dst, b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

func fsValid(p string) bool {
	return p != "" && path.Clean(p) == p && !strings.HasPrefix(p, "../") && !path.IsAbs(p)
}
