package patches

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"testing/fstest"
)

// git runs the git CLI in dir with a fixed identity and no user or system
// configuration, and returns its stdout.
func git(t testing.TB, dir string, args ...string) string {
	t.Helper()
	out, err := runGit(dir, nil, args...)
	if err != nil {
		t.Fatalf("git %s: %v", strings.Join(args, " "), err)
	}
	return out
}

func runGit(dir string, stdin []byte, args ...string) (string, error) {
	cmd := exec.Command("git", append([]string{"-c", "core.autocrlf=false", "-c", "commit.gpgsign=false", "-c", "init.defaultBranch=main"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL="+os.DevNull, "HOME="+dir,
		"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_AUTHOR_DATE=2025-01-01T00:00:00Z",
		"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com", "GIT_COMMITTER_DATE=2025-01-01T00:00:00Z",
	)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%w: %s", err, stderr.String())
	}
	return stdout.String(), nil
}

// fixture is a git repository the test builds commit by commit.
type fixture struct {
	t   testing.TB
	dir string
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	f := &fixture{t: t, dir: t.TempDir()}
	git(t, f.dir, "init", "-q")
	return f
}

// commit writes files (nil data deletes; a name ending in "*" is made
// executable), commits everything and returns the commit id.
func (f *fixture) commit(msg string, files map[string][]byte) string {
	f.t.Helper()
	for name, data := range files {
		exe := strings.HasSuffix(name, "*")
		name = strings.TrimSuffix(name, "*")
		p := filepath.Join(f.dir, filepath.FromSlash(name))
		if data == nil {
			if err := os.Remove(p); err != nil {
				f.t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			f.t.Fatal(err)
		}
		perm := os.FileMode(0o644)
		if exe {
			perm = 0o755
		}
		if err := os.WriteFile(p, data, perm); err != nil {
			f.t.Fatal(err)
		}
		if err := os.Chmod(p, perm); err != nil {
			f.t.Fatal(err)
		}
	}
	git(f.t, f.dir, "add", "-A")
	git(f.t, f.dir, "commit", "-q", "--allow-empty", "-m", msg)
	return strings.TrimSpace(git(f.t, f.dir, "rev-parse", "HEAD"))
}

// diff is `git diff --binary --full-index -M base head`.
func (f *fixture) diff(base, head string) []byte {
	f.t.Helper()
	return []byte(git(f.t, f.dir, "diff", "--binary", "--full-index", "-M", base, head))
}

// checkout writes the tree of commit into a new directory that is not a git
// work tree, and returns it.
func (f *fixture) checkout(commit string) string {
	f.t.Helper()
	dst := f.t.TempDir()
	extract(f.t, f.dir, commit, dst)
	return dst
}

// extract unpacks commit of repo (a work tree or a bare repository) into dst.
func extract(t testing.TB, repo, commit, dst string) {
	t.Helper()
	tarball, err := exec.Command("git", "-C", repo, "archive", "--format=tar", commit).Output()
	if err != nil {
		t.Fatalf("git archive %s: %v", commit, err)
	}
	cmd := exec.Command("tar", "-x", "-C", dst)
	cmd.Stdin = bytes.NewReader(tarball)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("tar -x: %v: %s", err, out)
	}
}

// gitApply applies patch with `git apply` in dir, which it first makes the
// top of its own repository: git apply inside a subdirectory of another work
// tree skips every hunk and exits 0.
func gitApply(t testing.TB, dir string, patch []byte, args ...string) {
	t.Helper()
	git(t, dir, "init", "-q")
	if _, err := runGit(dir, patch, append([]string{"apply", "--whitespace=nowarn"}, append(args, "-")...)...); err != nil {
		t.Fatalf("git apply: %v", err)
	}
	if err := os.RemoveAll(filepath.Join(dir, ".git")); err != nil {
		t.Fatal(err)
	}
}

// snapshot hashes every entry of a tree (path, type, exec bit, content or link
// target), .git included, so two snapshots are equal only if the trees are.
func snapshot(t testing.TB, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			out[rel] = "link " + target
		case d.IsDir():
			out[rel] = "dir"
		default:
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			h := sha256.Sum256(data)
			out[rel] = fmt.Sprintf("file %o %s", info.Mode().Perm()&0o111, hex.EncodeToString(h[:]))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func sameTrees(t testing.TB, what string, want, got map[string]string) {
	t.Helper()
	var diffs []string
	for k, v := range want {
		if got[k] != v {
			diffs = append(diffs, fmt.Sprintf("%s: want %q, got %q", k, v, got[k]))
		}
	}
	for k, v := range got {
		if _, ok := want[k]; !ok {
			diffs = append(diffs, fmt.Sprintf("%s: unexpected %q", k, v))
		}
	}
	if len(diffs) > 0 {
		sort.Strings(diffs)
		if len(diffs) > 20 {
			diffs = append(diffs[:20], "...")
		}
		t.Fatalf("%s: trees differ:\n%s", what, strings.Join(diffs, "\n"))
	}
}

// fileSet builds a set of KindFile patches (given in order as name, content)
// through LoadFS, as a shipped set with its own files would be loaded.
func fileSet(t testing.TB, maxOffset int, patches ...string) *Set {
	t.Helper()
	fsys := fstest.MapFS{}
	var y strings.Builder
	fmt.Fprintf(&y, "name: test\ndescription: test set\ncomponent: deepep\nmax-offset: %d\npatches:\n", maxOffset)
	for i := 0; i+1 < len(patches); i += 2 {
		file := fmt.Sprintf("%04d.patch", i/2+1)
		fsys["test/"+file] = &fstest.MapFile{Data: []byte(patches[i+1])}
		fmt.Fprintf(&y, "  - name: %s\n    file: %s\n    sha256: %s\n", patches[i], file, sha256Hex([]byte(patches[i+1])))
	}
	fsys["test/set.yaml"] = &fstest.MapFile{Data: []byte(y.String())}
	c, err := LoadFS(fsys)
	if err != nil {
		t.Fatal(err)
	}
	s, ok := c.Get("test")
	if !ok {
		t.Fatal("set test not loaded")
	}
	return s
}

func apply(t testing.TB, root string, s *Set, opts Options) (*SetResult, error) {
	t.Helper()
	return Apply(context.Background(), root, s, nil, opts)
}

// lines makes numbered text lines "<prefix> 1\n" .. "<prefix> n\n".
func lines(prefix string, n int) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "%s %d\n", prefix, i)
	}
	return b.String()
}

// gitUpstream serves upstream content with the git CLI from local
// repositories (work trees or bare), keyed by repository URL.
type gitUpstream map[string]string

func (u gitUpstream) dir(repo string) (string, error) {
	d, ok := u[repo]
	if !ok {
		return "", fmt.Errorf("no repository %s here", repo)
	}
	return d, nil
}

func (u gitUpstream) Diff(ctx context.Context, d DiffSpec) ([]byte, error) {
	dir, err := u.dir(d.Repo)
	if err != nil {
		return nil, err
	}
	if d.Ref != "" {
		out, err := exec.CommandContext(ctx, "git", "-C", dir, "rev-parse", "--verify", d.Ref+"^{commit}").Output()
		if err != nil {
			return nil, fmt.Errorf("resolve %s: %w", d.Ref, err)
		}
		if got := strings.TrimSpace(string(out)); got != d.Head {
			return nil, fmt.Errorf("%s is %s, pinned %s", d.Ref, got, d.Head)
		}
	}
	out, err := exec.CommandContext(ctx, "git", "-C", dir, "-c", "diff.noprefix=false", "diff", "--binary", "--full-index", "-M", d.Base, d.Head).Output()
	if err != nil {
		return nil, fmt.Errorf("git diff: %w", err)
	}
	return out, nil
}

func (u gitUpstream) File(ctx context.Context, f FileSpec) ([]byte, error) {
	dir, err := u.dir(f.Repo)
	if err != nil {
		return nil, err
	}
	out, err := exec.CommandContext(ctx, "git", "-C", dir, "cat-file", "blob", f.Commit+":"+f.Path).Output()
	if err != nil {
		return nil, fmt.Errorf("git cat-file %s:%s: %w", f.Commit, f.Path, err)
	}
	return out, nil
}

func removeAll(root, rel string) error {
	return os.RemoveAll(filepath.Join(root, filepath.FromSlash(rel)))
}
