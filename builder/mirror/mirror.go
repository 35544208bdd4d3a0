package mirror

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/gofrs/flock"

	"github.com/epbuild/epbuild/builder/disk"
	"github.com/epbuild/epbuild/builder/embedded"
	"github.com/epbuild/epbuild/builder/plan"
	"github.com/epbuild/epbuild/builder/quote"
	"github.com/epbuild/epbuild/builder/source"
	"github.com/epbuild/epbuild/builder/store"
)

// A mirror is written whole or not at all: a new one is made in a directory beside it
// and renamed into place; an existing one gets each entry atomically (the source
// fetcher's own rule) and loses, on failure, every entry this run created. Its index,
// epbuild-mirror.json, names the recipes it holds completely and is written last. The
// Python packages a recipe takes from the build host's environment are not fetched (no
// package index is read): python/requirements.txt names them, with the pip commands.

// Names inside a mirror.
const (
	IndexName       = "epbuild-mirror.json"
	mirrorPythonDir = "python"
	requirementsTxt = "requirements.txt"
)

// Report says what a mirror holds.
type Report struct {
	Dir      string `json:"dir"`
	Git      int    `json:"git"`
	Archives int    `json:"archives"`
	// Python are the packages of the Python environment these recipes need, which the
	// mirror names (Requirements) and does not hold; PipDownload fetches them into the
	// mirror where there is an index, PipInstall installs them on the build host.
	Python       []PythonNeed `json:"python,omitempty"`
	Requirements string       `json:"requirements,omitempty"`
	PipDownload  string       `json:"pip_download,omitempty"`
	PipInstall   string       `json:"pip_install,omitempty"`
	// Index lists every recipe the mirror holds completely.
	Index string `json:"index"`
}

// PythonNeed is a package of the build host's Python environment a recipe needs.
type PythonNeed struct {
	Recipe     string `json:"recipe"`
	Component  string `json:"component"`
	Package    string `json:"package"`
	Constraint string `json:"constraint,omitempty"`
	// Requirement is the line for pip; Note says why it carries no version, if so.
	Requirement string `json:"requirement"`
	Note        string `json:"note,omitempty"`
}

// mirrorIndex is epbuild-mirror.json.
type mirrorIndex struct {
	Format  int           `json:"format"`
	Recipes []mirrorEntry `json:"recipes"`
}

type mirrorEntry struct {
	Recipe   string       `json:"recipe"`
	PlanKey  string       `json:"plan_key"`
	Written  time.Time    `json:"written"`
	Git      []string     `json:"git,omitempty"`
	Archives []string     `json:"archives,omitempty"`
	Python   []PythonNeed `json:"python,omitempty"`
}

// Job is what a mirror needs of one planned recipe: its plan, the fetcher that reads its
// sources (the build's cache and mirror) and that cache's directory, for the error that
// says where space ran out.
type Job struct {
	Plan     *plan.Plan
	Fetcher  *source.Fetcher
	CacheDir string
}

// Write writes into dir exactly what the jobs need: every pinned source and every
// upstream commit their patch sets read, laid out by URL, and names the Python packages
// they take from the build host's environment. dir is whole or untouched on failure.
func Write(ctx context.Context, dir string, jobs ...Job) (Report, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return Report{Dir: dir}, &plan.UsageError{Err: fmt.Errorf("mirror %s: %w", dir, err)}
	}
	rep := Report{Dir: abs, Index: filepath.Join(abs, IndexName)}
	var gits []source.Git
	var archives []source.Archive
	var main *source.Fetcher
	var cacheDir string
	var entries []mirrorEntry
	for _, j := range jobs {
		main, cacheDir = j.Fetcher, j.CacheDir
		e := mirrorEntry{Recipe: j.Plan.Recipe, PlanKey: j.Plan.Key, Written: time.Now().UTC().Truncate(time.Second)}
		addGit := func(g source.Git) {
			gits = append(gits, g)
			e.Git = append(e.Git, g.URL+"@"+g.Commit)
		}
		for _, c := range j.Plan.Components {
			switch {
			case c.Source.Git != nil && !embedded.Served(c.Source.Git.URL):
				addGit(source.Git{URL: c.Source.Git.URL, Commit: c.Source.Git.Commit, Ref: c.Source.Git.Ref})
			case c.Source.Archive != nil:
				a := c.Source.Archive
				archives = append(archives, source.Archive{URL: a.URL, SHA256: a.SHA256, Strip: a.Strip})
				e.Archives = append(e.Archives, a.URL+" sha256:"+a.SHA256)
			case c.Source.Python != nil:
				req, note := pipRequirement(c.Source.Python.Package, c.Source.Python.Version)
				e.Python = append(e.Python, PythonNeed{Recipe: j.Plan.Recipe, Component: c.Name, Package: c.Source.Python.Package,
					Constraint: c.Source.Python.Version, Requirement: req, Note: note})
			}
			for _, s := range c.PatchSets {
				for _, pt := range s.Patches {
					switch {
					case pt.UpstreamDiff != nil:
						d := pt.UpstreamDiff
						addGit(source.Git{URL: d.Repo, Commit: d.Head, Ref: d.Ref})
						addGit(source.Git{URL: d.Repo, Commit: d.Base})
					case pt.UpstreamFile != nil:
						addGit(source.Git{URL: pt.UpstreamFile.Repo, Commit: pt.UpstreamFile.Commit})
					case pt.Replace != nil:
						addGit(source.Git{URL: pt.Replace.Repo, Commit: pt.Replace.Commit})
					}
				}
			}
		}
		entries = append(entries, e)
		rep.Python = append(rep.Python, e.Python...)
	}
	if main == nil {
		return rep, errors.New("mirror: no recipe given")
	}
	if err := os.MkdirAll(filepath.Dir(abs), 0o755); err != nil {
		return rep, fmt.Errorf("mirror %s: %w", abs, err)
	}
	// one mirror run per directory at a time (flock: never deleted, released by the kernel)
	lock := flock.New(filepath.Join(filepath.Dir(abs), "."+filepath.Base(abs)+".epbuild-mirror-lock"))
	if ok, err := lock.TryLockContext(ctx, 200*time.Millisecond); err != nil || !ok {
		return rep, fmt.Errorf("mirror %s: lock %s: %w", abs, lock.Path(), errors.Join(err, ctx.Err()))
	}
	defer func() { _ = lock.Unlock() }()

	_, statErr := os.Stat(abs)
	fresh := errors.Is(statErr, fs.ErrNotExist)
	target := abs
	var created []string
	if fresh {
		// a new mirror is made beside its place and renamed into it when whole
		tmp, err := os.MkdirTemp(filepath.Dir(abs), "."+filepath.Base(abs)+".epbuild-mirror-")
		if err != nil {
			return rep, fmt.Errorf("mirror %s: %w", abs, err)
		}
		defer os.RemoveAll(tmp) // gone after the rename; removes a failed one
		target = tmp
	} else {
		// an existing mirror: note which entries are new, to remove them on failure
		for _, g := range gits {
			if k, err := source.RepoKey(g.URL); err == nil {
				created = appendIfAbsent(created, filepath.Join(abs, filepath.FromSlash(k)))
			}
		}
		for _, a := range archives {
			if k, err := source.ArchiveKey(a.URL); err == nil {
				created = appendIfAbsent(created, filepath.Join(abs, filepath.FromSlash(k)))
			}
		}
	}
	err = write(ctx, main, target, gits, archives, entries, &rep)
	// outside the stage store: no space in the mirror or the cache is said here
	err = disk.NoSpaceIn(err, "write the mirror "+abs, disk.Place{Dir: target, Fix: disk.FixOutSpace}, disk.Place{Dir: cacheDir, Fix: store.FixCacheSpace})
	if err != nil && !fresh {
		for _, p := range created {
			_ = os.RemoveAll(p)
		}
		return rep, fmt.Errorf("%w; nothing of this run was kept in %s (its index lists only what it holds whole)", err, abs)
	}
	if err != nil {
		return rep, fmt.Errorf("%w; no mirror was written at %s", err, abs)
	}
	if fresh {
		if err := os.Rename(target, abs); err != nil {
			return rep, fmt.Errorf("mirror %s: put the mirror in place: %w", abs, err)
		}
	}
	rep.Git, rep.Archives = len(gits), len(archives)
	return rep, nil
}

// appendIfAbsent adds p to list when nothing is at p.
func appendIfAbsent(list []string, p string) []string {
	if _, err := os.Lstat(p); errors.Is(err, fs.ErrNotExist) && !slices.Contains(list, p) {
		return append(list, p)
	}
	return list
}

// write fills dir: the sources, the Python requirements, then the index.
func write(ctx context.Context, f *source.Fetcher, dir string, gits []source.Git, archives []source.Archive, entries []mirrorEntry, rep *Report) error {
	if err := f.WriteMirror(ctx, dir, gits, archives); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("mirror %s: %w", rep.Dir, err)
	}
	idx := mirrorIndex{Format: 1}
	if b, err := os.ReadFile(filepath.Join(dir, IndexName)); err == nil {
		if err := json.Unmarshal(b, &idx); err != nil || idx.Format != 1 {
			return fmt.Errorf("mirror %s: %s is not an index this epbuild reads (%v)", rep.Dir, IndexName, err)
		}
	}
	for _, e := range entries {
		idx.Recipes = slices.DeleteFunc(idx.Recipes, func(x mirrorEntry) bool { return x.Recipe == e.Recipe && x.PlanKey == e.PlanKey })
		idx.Recipes = append(idx.Recipes, e)
	}
	sort.SliceStable(idx.Recipes, func(i, j int) bool { return idx.Recipes[i].Recipe < idx.Recipes[j].Recipe })
	var needs []PythonNeed
	for _, e := range idx.Recipes {
		needs = append(needs, e.Python...)
	}
	if len(needs) > 0 {
		pyDir := filepath.Join(dir, mirrorPythonDir)
		if err := os.MkdirAll(pyDir, 0o755); err != nil {
			return fmt.Errorf("mirror %s: %w", rep.Dir, err)
		}
		if err := disk.WriteFileAtomic(filepath.Join(pyDir, requirementsTxt), []byte(requirementsFile(needs))); err != nil {
			return fmt.Errorf("mirror %s: %w", rep.Dir, err)
		}
		py, req := filepath.Join(rep.Dir, mirrorPythonDir), filepath.Join(rep.Dir, mirrorPythonDir, requirementsTxt)
		rep.Requirements = req
		rep.PipDownload = fmt.Sprintf("python3 -m pip download --no-deps --only-binary=:all: --dest %s -r %s", shellWord(py), shellWord(req))
		rep.PipInstall = fmt.Sprintf("python3 -m pip install --no-index --find-links %s -r %s", shellWord(py), shellWord(req))
	}
	b, err := json.MarshalIndent(idx, "", "  ")
	if err != nil {
		return err
	}
	if err := disk.WriteFileAtomic(filepath.Join(dir, IndexName), append(b, '\n')); err != nil {
		return fmt.Errorf("mirror %s: %w", rep.Dir, err)
	}
	return nil
}

// requirementsFile is python/requirements.txt: one line per package, the recipes'
// constraints joined, with the commands in its head (paths relative to the mirror).
func requirementsFile(needs []PythonNeed) string {
	specs, who, notes := map[string][]string{}, map[string][]string{}, map[string][]string{}
	for _, n := range needs {
		spec := strings.TrimPrefix(n.Requirement, n.Package)
		if spec != "" && !slices.Contains(specs[n.Package], spec) {
			specs[n.Package] = append(specs[n.Package], spec)
		} else if _, ok := specs[n.Package]; !ok {
			specs[n.Package] = nil
		}
		who[n.Package] = appendUnique(who[n.Package], n.Recipe+"/"+n.Component)
		if n.Note != "" {
			notes[n.Package] = appendUnique(notes[n.Package], n.Note)
		}
	}
	var b strings.Builder
	b.WriteString(`# The Python packages these recipes take from the build host's Python environment
# (their python: sources), written by epbuild mirror, which reads no package index and
# so does not download them. Where there is an index, with the build host's Python
# version and platform, in the mirror directory:
#   python3 -m pip download --no-deps --only-binary=:all: --dest python -r python/requirements.txt
# then on the build host, with the mirror at MIRROR:
#   python3 -m pip install --no-index --find-links MIRROR/python -r MIRROR/python/requirements.txt
`)
	for _, pkg := range slices.Sorted(maps.Keys(specs)) {
		s := specs[pkg]
		sort.Strings(s)
		fmt.Fprintf(&b, "%s%s  # %s", pkg, strings.Join(s, ","), strings.Join(who[pkg], ", "))
		for _, n := range notes[pkg] {
			b.WriteString("; " + n)
		}
		b.WriteString("\n")
	}
	return b.String()
}

func appendUnique(list []string, s string) []string {
	if slices.Contains(list, s) {
		return list
	}
	return append(list, s)
}

var (
	pipSpecRe   = regexp.MustCompile(`^(===|~=|==|!=|<=|>=|<|>)\s*([0-9][0-9A-Za-z.+!*-]*)$`)
	bareVerRe   = regexp.MustCompile(`^[0-9][0-9A-Za-z.+!-]*$`)
	shellWordRe = regexp.MustCompile(`^[A-Za-z0-9_./:=@%+,-]+$`)
)

// pipRequirement turns a python: source's version constraint into pip's requirement
// syntax: a bare version means exactly it; comparisons pass as they are. A constraint pip
// cannot read (^1.2, 1.x, a || b) leaves the version out, saying so.
func pipRequirement(pkg, constraint string) (req, note string) {
	c := strings.TrimSpace(constraint)
	if c == "" {
		return pkg, ""
	}
	if bareVerRe.MatchString(c) {
		return pkg + "==" + c, ""
	}
	var specs []string
	for _, part := range strings.Split(c, ",") {
		m := pipSpecRe.FindStringSubmatch(strings.TrimSpace(part))
		if m == nil {
			return pkg, fmt.Sprintf("the recipe asks for %q, which pip cannot read: pick a matching version", constraint)
		}
		specs = append(specs, m[1]+m[2])
	}
	return pkg + strings.Join(specs, ","), ""
}

// shellWord quotes s for a shell command line where it needs it.
func shellWord(s string) string {
	if shellWordRe.MatchString(s) {
		return s
	}
	return quote.ShellAlways(s)
}
