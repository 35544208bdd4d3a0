package patches

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestHostilePatches: each patch is refused with an error naming the patch,
// the file and why, and neither the tree nor anything outside it changes.
func TestHostilePatches(t *testing.T) {
	cases := []struct {
		name  string
		patch string
		plant func(t *testing.T, tree, outside string)
		want  string // substring of the error
		kind  string // "unsafe" or "conflict"
	}{
		{
			name:  "dotdot",
			patch: "diff --git a/../evil.txt b/../evil.txt\nnew file mode 100644\n--- /dev/null\n+++ b/../evil.txt\n@@ -0,0 +1 @@\n+pwned\n",
			want:  "patch hostile: ../evil.txt: refused: path leaves the tree (..)", kind: "unsafe",
		},
		{
			name:  "dotdot inside",
			patch: "diff --git a/src/../../evil.txt b/src/../../evil.txt\nnew file mode 100644\n--- /dev/null\n+++ b/src/../../evil.txt\n@@ -0,0 +1 @@\n+pwned\n",
			want:  "patch hostile: src/../../evil.txt: refused: path leaves the tree (..)", kind: "unsafe",
		},
		{
			name:  "absolute rename target",
			patch: "diff --git a/a.txt b/a.txt\nsimilarity index 100%\nrename from a.txt\nrename to /evil/abs.txt\n",
			want:  "patch hostile: /evil/abs.txt: refused: absolute path", kind: "unsafe",
		},
		{
			name:  "git config",
			patch: "diff --git a/.git/config b/.git/config\n--- a/.git/config\n+++ b/.git/config\n@@ -1 +1,2 @@\n [core]\n+\thooksPath = /x\n",
			want:  "patch hostile: .git/config: refused: path is inside .git", kind: "unsafe",
		},
		{
			name:  "nested GIT upper case",
			patch: "diff --git a/sub/.GIT/hooks/pre-commit b/sub/.GIT/hooks/pre-commit\nnew file mode 100755\n--- /dev/null\n+++ b/sub/.GIT/hooks/pre-commit\n@@ -0,0 +1 @@\n+pwned\n",
			want:  "patch hostile: sub/.GIT/hooks/pre-commit: refused: path is inside .git", kind: "unsafe",
		},
		{
			name:  "through a symlinked directory",
			patch: "diff --git a/lib/evil.txt b/lib/evil.txt\nnew file mode 100644\n--- /dev/null\n+++ b/lib/evil.txt\n@@ -0,0 +1 @@\n+pwned\n",
			plant: func(t *testing.T, tree, outside string) {
				if err := os.Symlink(outside, filepath.Join(tree, "lib")); err != nil {
					t.Fatal(err)
				}
			},
			want: "patch hostile: lib/evil.txt: refused: path goes through the symlink lib", kind: "unsafe",
		},
		{
			name:  "symlink inside the tree",
			patch: "diff --git a/alias/a.txt b/alias/a.txt\n--- a/alias/a.txt\n+++ b/alias/a.txt\n@@ -1,3 +1,3 @@\n a 1\n-a 2\n+pwned\n a 3\n",
			plant: func(t *testing.T, tree, _ string) {
				if err := os.Mkdir(filepath.Join(tree, "real"), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(tree, "real", "a.txt"), []byte(lines("a", 3)), 0o644); err != nil {
					t.Fatal(err)
				}
				if err := os.Symlink("real", filepath.Join(tree, "alias")); err != nil {
					t.Fatal(err)
				}
			},
			want: "patch hostile: alias/a.txt: refused: path goes through the symlink alias", kind: "unsafe",
		},
		{
			name:  "target is a symlink",
			patch: "diff --git a/link.txt b/link.txt\n--- a/link.txt\n+++ b/link.txt\n@@ -1,3 +1,3 @@\n o 1\n-o 2\n+pwned\n o 3\n",
			plant: func(t *testing.T, tree, outside string) {
				if err := os.WriteFile(filepath.Join(outside, "target.txt"), []byte(lines("o", 3)), 0o644); err != nil {
					t.Fatal(err)
				}
				if err := os.Symlink(filepath.Join(outside, "target.txt"), filepath.Join(tree, "link.txt")); err != nil {
					t.Fatal(err)
				}
			},
			want: "patch hostile: link.txt: refused: target is a symlink", kind: "unsafe",
		},
		{
			name:  "creates a symlink",
			patch: "diff --git a/sneaky b/sneaky\nnew file mode 120000\n--- /dev/null\n+++ b/sneaky\n@@ -0,0 +1 @@\n+../../outside\n\\ No newline at end of file\n",
			want:  "patch hostile: sneaky: refused: symlink entries (mode 120000) are not applied", kind: "unsafe",
		},
		{
			// The first context line differs: GNU patch would apply this with
			// fuzz 1 and git apply -C2 would too; strict context refuses it, even
			// with an offset search of 3 lines.
			name:  "only with fuzz",
			patch: "diff --git a/a.txt b/a.txt\n--- a/a.txt\n+++ b/a.txt\n@@ -4,7 +4,7 @@\n a four\n a 5\n a 6\n-a 7\n+a seven\n a 8\n a 9\n a 10\n",
			want:  `patch hostile: a.txt: hunk 1 at line 4: context does not match here nor within the allowed offset: line 4: expected "a four", found "a 4"`, kind: "conflict",
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			parent := t.TempDir()
			tree := filepath.Join(parent, "tree")
			outside := filepath.Join(parent, "outside")
			for _, d := range []string{tree, outside, filepath.Join(tree, ".git")} {
				if err := os.Mkdir(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.WriteFile(filepath.Join(tree, "a.txt"), []byte(lines("a", 20)), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(tree, ".git", "config"), []byte("[core]\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			if c.plant != nil {
				c.plant(t, tree, outside)
			}
			before := snapshot(t, parent)
			_, err := apply(t, tree, fileSet(t, 3, "hostile", c.patch), Options{})
			if err == nil {
				t.Fatal("applied")
			}
			if err.Error() != c.want {
				t.Fatalf("error\n got %s\nwant %s", err, c.want)
			}
			var ue *UnsafePathError
			var ce *ConflictError
			if (c.kind == "unsafe") != errors.As(err, &ue) || (c.kind == "conflict") != errors.As(err, &ce) {
				t.Fatalf("error type %T, want %s", err, c.kind)
			}
			sameTrees(t, "tree and outside", before, snapshot(t, parent))
		})
	}
}

// TestFuzzOnlyMatchIsRealFuzz shows that the "only with fuzz" patch above
// does apply once context is reduced (git apply -C2), so the strict refusal is
// about fuzz and not about a patch that fits nowhere.
func TestFuzzOnlyMatchIsRealFuzz(t *testing.T) {
	tree := t.TempDir()
	if err := os.WriteFile(filepath.Join(tree, "a.txt"), []byte(lines("a", 20)), 0o644); err != nil {
		t.Fatal(err)
	}
	patch := "diff --git a/a.txt b/a.txt\n--- a/a.txt\n+++ b/a.txt\n@@ -4,7 +4,7 @@\n a four\n a 5\n a 6\n-a 7\n+a seven\n a 8\n a 9\n a 10\n"
	gitApply(t, tree, []byte(patch), "-C2")
	got, _ := os.ReadFile(filepath.Join(tree, "a.txt"))
	if !strings.Contains(string(got), "a seven\n") {
		t.Fatal("git apply -C2 did not apply it")
	}
}
