package source

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"

	"github.com/epbuild/epbuild/builder/source/gitobj"
)

// TestMirrorObjectForms checks out a commit from mirrors that store its objects in each
// form git uses: loose, packed whole, as offset and as ref deltas, behind alternates; a
// delta on another object of the commit stays a delta in the copy, from packs. The
// tree has an executable, a symlink, an empty file, a submodule, nested directories, a
// directory of 133 files and a blob larger than gitobj.InlineLimit (streamed).
func TestMirrorObjectForms(t *testing.T) {
	work := t.TempDir()
	runGit(t, work, "init", "-q", "-b", "main")
	rng := rand.New(rand.NewSource(7))
	big := make([]byte, gitobj.InlineLimit+(1<<20))
	rng.Read(big)
	files := map[string]string{
		"README.md":            "readme\n",
		"empty":                "",
		"tools/build.sh":       "#!/bin/sh\necho build\n",
		"a/b/c/deep.txt":       strings.Repeat("deep line\n", 200),
		"bin/big.bin":          string(big),
		"src/kernel.cu":        strings.Repeat("__global__ void k() {}\n", 500),
		"src/other.cu":         strings.Repeat("__device__ int f() { return 1; }\n", 300),
		"docs/guide/index.txt": "guide\n",
	}
	for i := 0; i < 133; i++ {
		files["many/f"+string(rune('a'+i%26))+strings.Repeat("x", i/26)+".txt"] = strings.Repeat("many\n", i)
	}
	for p, c := range files {
		mode := os.FileMode(0o644)
		if strings.HasSuffix(p, ".sh") {
			mode = 0o755
		}
		writeFile(t, filepath.Join(work, p), c, mode)
	}
	if err := os.Symlink("src/kernel.cu", filepath.Join(work, "kernel-link.cu")); err != nil {
		t.Fatal(err)
	}
	runGit(t, work, "add", "-A")
	runGit(t, work, "update-index", "--add", "--cacheinfo", "160000,"+strings.Repeat("ab", 20)+",third-party/sub")
	runGit(t, work, "commit", "-q", "-m", "one")
	// A second commit changes files a little, so that repacking stores them as deltas.
	writeFile(t, filepath.Join(work, "src/kernel.cu"), strings.Repeat("__global__ void k() {}\n", 499)+"// changed\n", 0o644)
	writeFile(t, filepath.Join(work, "a/b/c/deep.txt"), strings.Repeat("deep line\n", 201), 0o644)
	big[len(big)/2] ^= 1
	writeFile(t, filepath.Join(work, "bin/big.bin"), string(big), 0o644)
	runGit(t, work, "add", "src", "a", "bin") // not commit -a: that drops the submodule, absent here
	runGit(t, work, "commit", "-q", "-m", "two")
	commit := runGit(t, work, "rev-parse", "HEAD")

	url := "https://example.com/org/forms"
	bare := func(mirror string) string {
		d := filepath.Join(mirror, "example.com", "org", "forms.git")
		runGit(t, "", "init", "-q", "--bare", "-b", "main", d)
		return d
	}
	mirrors := map[string]string{}
	{ // loose
		m := t.TempDir()
		d := bare(m)
		runGit(t, work, "push", "-q", d, "main")
		pack := mustGlob(t, filepath.Join(d, "objects", "pack", "*.pack"))
		b, err := os.ReadFile(pack)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{pack, strings.TrimSuffix(pack, ".pack") + ".idx"} {
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
		}
		if out, err := gitOut(d, b, "unpack-objects", "-q"); err != nil {
			t.Fatalf("git unpack-objects: %v\n%s", err, out)
		}
		if out := runGit(t, d, "count-objects", "-v"); !strings.Contains(out, "in-pack: 0") {
			t.Fatalf("expected loose objects only:\n%s", out)
		}
		mirrors["loose"] = m
	}
	for _, form := range []string{"ofs", "ref"} {
		m := t.TempDir()
		d := bare(m)
		runGit(t, work, "push", "-q", d, "main")
		runGit(t, d, "-c", "repack.useDeltaBaseOffset="+map[string]string{"ofs": "true", "ref": "false"}[form],
			"repack", "-adfq", "--window=50", "--depth=50")
		if out := runGit(t, d, "verify-pack", "-v", mustGlob(t, filepath.Join(d, "objects", "pack", "*.idx"))); !strings.Contains(out, "chain length = 1") {
			t.Fatalf("%s: expected deltas in the pack:\n%s", form, out)
		}
		mirrors[form] = m
	}
	{ // alternates: the mirror's own object directory is empty
		m := t.TempDir()
		d := bare(m)
		other := filepath.Join(mirrors["ofs"], "example.com", "org", "forms.git", "objects")
		writeFile(t, filepath.Join(d, "objects", "info", "alternates"), other+"\n", 0o644)
		runGit(t, d, "update-ref", "refs/heads/main", commit)
		mirrors["alternates"] = m
	}

	ctx := context.Background()
	t.Run("missing tree", func(t *testing.T) {
		// A pack without the tree zz/, walked long after the large blob bin/big.bin has gone
		// to a reader (which then waits for the writer): the fetch must fail, not hang.
		runGit(t, work, "checkout", "-q", "-b", "missing", commit)
		for i := 0; i < 100; i++ {
			writeFile(t, filepath.Join(work, "w", fmt.Sprintf("d%03d", i), "f"), fmt.Sprintln(i), 0o644)
		}
		writeFile(t, filepath.Join(work, "zz", "last"), "last\n", 0o644)
		runGit(t, work, "add", "w", "zz")
		runGit(t, work, "commit", "-q", "-m", "three")
		head := runGit(t, work, "rev-parse", "HEAD")
		runGit(t, work, "checkout", "-q", "main")
		m := t.TempDir()
		d := bare(m)
		missing := runGit(t, work, "rev-parse", head+":zz")
		var list strings.Builder
		for _, l := range strings.Split(runGit(t, work, "rev-list", "--objects", head), "\n") {
			if id, _, _ := strings.Cut(l, " "); id != missing {
				list.WriteString(id + "\n")
			}
		}
		if out, err := gitOut(work, []byte(list.String()), "pack-objects", "-q", "--window=0", filepath.Join(d, "objects", "pack", "pack")); err != nil {
			t.Fatalf("git pack-objects: %v\n%s", err, out)
		}
		f := newTestFetcher(t, "", m)
		done := make(chan error, 1)
		go func() { done <- f.FetchGit(ctx, Git{URL: url, Commit: head}) }()
		select {
		case err := <-done:
			if !errors.Is(err, ErrFetch) || !strings.Contains(err.Error(), missing) {
				t.Fatalf("got %v, want a fetch error naming the tree %s", err, missing)
			}
		case <-time.After(time.Minute):
			t.Fatal("the fetch hangs")
		}
		assertNoRepo(t, f)
	})
	for form, m := range mirrors {
		t.Run(form, func(t *testing.T) {
			f := newTestFetcher(t, "", m)
			dest := filepath.Join(t.TempDir(), "ws")
			if err := f.CheckoutGit(ctx, Git{URL: url, Commit: commit}, dest); err != nil {
				t.Fatal(err)
			}
			if got := runGit(t, dest, "rev-parse", "HEAD"); got != commit {
				t.Errorf("HEAD %s, want %s", got, commit)
			}
			if got := runGit(t, dest, "status", "--porcelain", "--ignored", "--untracked-files=all"); got != "" {
				t.Errorf("git status is not clean:\n%s", got)
			}
			if a, b := runGit(t, dest, "ls-files", "-s"), runGit(t, work, "ls-tree", "-r", "--format=%(objectmode) %(objectname) 0\t%(path)", commit); a != b {
				t.Errorf("index:\n%s\ntree:\n%s", a, b)
			}
			if out, err := gitOut(dest, nil, "fsck", "--no-dangling"); err != nil {
				t.Errorf("git fsck: %v\n%s", err, out)
			}
			// The many/ files are deltas on each other in the packed mirrors: the copy keeps
			// them as deltas (git verify-pack checks every object of the pack); loose ones have none.
			out, err := gitOut(dest, nil, "verify-pack", "-v", mustGlob(t, filepath.Join(dest, ".git", "objects", "pack", "*.idx")))
			if err != nil {
				t.Errorf("git verify-pack: %v\n%s", err, out)
			}
			if kept := strings.Contains(out, "chain length = 1"); kept != (form != "loose") {
				t.Errorf("%s: deltas kept in the copy: %v\n%s", form, kept, out)
			}
			if b, err := os.ReadFile(filepath.Join(dest, "bin", "big.bin")); err != nil || !bytes.Equal(b, big) {
				t.Errorf("bin/big.bin differs: %v", err)
			}
			if fi, err := os.Stat(filepath.Join(dest, "tools", "build.sh")); err != nil || fi.Mode().Perm()&0o100 == 0 {
				t.Errorf("tools/build.sh not executable: %v", err)
			}
			if target, err := os.Readlink(filepath.Join(dest, "kernel-link.cu")); err != nil || target != "src/kernel.cu" {
				t.Errorf("kernel-link.cu: %q, %v", target, err)
			}
			if fi, err := os.Stat(filepath.Join(dest, "third-party", "sub")); err != nil || !fi.IsDir() {
				t.Errorf("submodule directory: %v", err)
			}
			// BlobSize reads each object's headers alone and agrees with git, for every
			// form: whole, delta, loose, behind alternates
			repo, err := OpenRepository(filepath.Join(m, "example.com", "org", "forms.git"))
			if err != nil {
				t.Fatal(err)
			}
			defer repo.Close()
			rd := repo.Reader()
			deltas := 0
			var ids strings.Builder
			for _, c := range []string{commit + "~1", commit} {
				for _, l := range strings.Split(runGit(t, work, "ls-tree", "-r", "--format=%(objecttype) %(objectname) %(objectsize)", c), "\n") {
					var typ, id string
					var want int64
					if _, err := fmt.Sscan(l, &typ, &id, &want); err != nil || typ != "blob" {
						continue
					}
					if got, err := rd.BlobSize(id); err != nil || got != want {
						t.Errorf("BlobSize(%s) = %d, %v; git says %d", id, got, err, want)
					}
					ids.WriteString(id + "\n")
				}
			}
			// git names the base of each object stored as a delta (behind alternates too)
			bases, err := gitOut(filepath.Join(m, "example.com", "org", "forms.git"), []byte(ids.String()), "cat-file", "--batch-check=%(deltabase)")
			if err != nil {
				t.Fatalf("git cat-file: %v\n%s", err, bases)
			}
			for _, l := range strings.Fields(bases) {
				if l != plumbing.ZeroHash.String() {
					deltas++
				}
			}
			if (deltas > 0) != (form == "ofs" || form == "ref" || form == "alternates") {
				t.Errorf("%s: %d blobs sized from their delta's header", form, deltas)
			}
		})
	}
}

func mustGlob(t *testing.T, pattern string) string {
	t.Helper()
	m, err := filepath.Glob(pattern)
	if err != nil || len(m) != 1 {
		t.Fatalf("glob %s: %v %v", pattern, m, err)
	}
	return m[0]
}
