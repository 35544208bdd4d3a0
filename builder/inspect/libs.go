package inspect

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/epbuild/epbuild/builder/check"
)

// CheckLibs checks that an ELF file in an install prefix (root) finds every library it
// needs where the prefix can carry it: each DT_NEEDED entry, of the file and of every
// library it finds inside the prefix, either resolves through that object's own RUNPATH
// (RPATH when it has none), whose entries must be $ORIGIN-relative and stay inside
// root, or matches one of system, the sonames (globs) the host is expected to provide.
// An absolute RUNPATH (a build machine's directory) fails even when it would resolve
// here: on another host it points nowhere.
func CheckLibs(file, root string, system []string) check.Result {
	r := check.Result{
		ID:       "elf.libs:" + filepath.Base(file),
		Expected: "every needed library inside the prefix (RUNPATH $ORIGIN) or one of: " + strings.Join(system, " "),
	}
	root = filepath.Clean(root)
	var problems, inside, host []string
	seen := map[string]bool{}
	queue := []string{file}
	for len(queue) > 0 {
		f := queue[0]
		queue = queue[1:]
		real, err := filepath.EvalSymlinks(f)
		if err != nil {
			return failed(r, err)
		}
		if seen[real] {
			continue
		}
		seen[real] = true
		info, err := ReadELF(f)
		if err != nil {
			return failed(r, err)
		}
		name := relTo(root, f)
		search := info.Runpath
		if len(search) == 0 {
			search = info.Rpath
		}
		var dirs []string
		for _, e := range search {
			d, ok := expandOrigin(e, filepath.Dir(f))
			switch {
			case !ok:
				problems = append(problems, fmt.Sprintf("%s: RUNPATH entry %q is not relative to $ORIGIN: it names a directory of the build host", name, e))
			case !within(root, d):
				problems = append(problems, fmt.Sprintf("%s: RUNPATH entry %q leaves the prefix", name, e))
			default:
				dirs = append(dirs, d)
			}
		}
	needed:
		for _, n := range info.Needed {
			for _, s := range system {
				if ok, _ := path.Match(s, n); ok {
					if !slices.Contains(host, n) {
						host = append(host, n)
					}
					continue needed
				}
			}
			for _, d := range dirs {
				cand := filepath.Join(d, n)
				if _, err := os.Stat(cand); err != nil {
					continue
				}
				if res, err := filepath.EvalSymlinks(cand); err != nil || !within(root, res) {
					problems = append(problems, fmt.Sprintf("%s: %s resolves outside the prefix (%s)", name, n, res))
					continue needed
				}
				if !slices.Contains(inside, n) {
					inside = append(inside, n)
				}
				queue = append(queue, cand)
				continue needed
			}
			problems = append(problems, fmt.Sprintf("%s: %s is neither in the prefix (RUNPATH %s) nor a named system library", name, n, strings.Join(search, ":")))
		}
	}
	slices.Sort(inside)
	slices.Sort(host)
	r.Found = fmt.Sprintf("%d libraries in the prefix, from the host: %s", len(inside), strings.Join(host, " "))
	if len(problems) > 0 {
		r.Status = check.Fail
		r.Why = strings.Join(problems, "; ")
		return r
	}
	r.Status = check.Pass
	return r
}

// expandOrigin resolves a RUNPATH entry that starts with $ORIGIN or ${ORIGIN}.
func expandOrigin(entry, origin string) (string, bool) {
	for _, tok := range []string{"$ORIGIN", "${ORIGIN}"} {
		if rest, ok := strings.CutPrefix(entry, tok); ok && (rest == "" || rest[0] == '/') {
			return filepath.Clean(origin + rest), true
		}
	}
	return "", false
}

func within(root, p string) bool {
	rel, err := filepath.Rel(root, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}

func relTo(root, p string) string {
	if rel, err := filepath.Rel(root, p); err == nil && within(root, p) {
		return rel
	}
	return p
}
