package archive

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestExtractRealArchives extracts archives made by GNU tar (gzip, xz, zstd, plain, piped
// zstd, "./"-style names) and Info-ZIP, with and without StripComponents, and checks that
// the tree, modes, symlinks, hashes and mtimes come back as they went in.
func TestExtractRealArchives(t *testing.T) {
	base := t.TempDir()
	top := filepath.Join(base, "src", "nvshmem_src")
	makeSourceTree(t, top)
	fileTime := time.Unix(1600000000, 0)
	dirTime := time.Unix(1500000000, 0)
	linkTime := time.Unix(1400000000, 0)
	if err := os.Chtimes(filepath.Join(top, "README.md"), fileTime, fileTime); err != nil {
		t.Fatal(err)
	}
	run(t, top, "touch", "-h", "-d", "@1400000000", "lib/libnvshmem_host.so")
	if err := os.Chtimes(filepath.Join(top, "src"), dirTime, dirTime); err != nil {
		t.Fatal(err)
	}
	want := hashTree(t, top)

	arcs := filepath.Join(base, "arcs")
	if err := os.Mkdir(arcs, 0o755); err != nil {
		t.Fatal(err)
	}
	cases := []struct{ name, script string }{
		{"nvshmem_src_3.2.5-1.txz", "tar -cJf $A -C src nvshmem_src"},
		{"src.tar.gz", "tar -czf $A -C src nvshmem_src"},
		{"dot.tgz", "tar -czf $A -C src ."},
		{"src.tar.zst", "tar --zstd -cf $A -C src nvshmem_src"},
		{"piped.tzst", "tar -cf - -C src nvshmem_src | zstd -q -o $A"},
		{"src.tar", "tar -cf $A -C src nvshmem_src"},
		{"src.zip", "cd src && zip -qry $A nvshmem_src"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			arc := filepath.Join(arcs, c.name)
			run(t, base, "bash", "-c", "set -eo pipefail; A="+arc+"; "+c.script)
			for _, strip := range []int{0, 1} {
				dest := filepath.Join(t.TempDir(), "out")
				rep, err := ExtractFile(context.Background(), arc, dest, ExtractOptions{StripComponents: strip})
				if err != nil {
					t.Fatalf("strip %d: %v", strip, err)
				}
				root := dest
				if strip == 0 {
					root = filepath.Join(dest, "nvshmem_src")
				}
				diffEntries(t, fmt.Sprintf("strip %d", strip), hashTree(t, root), want)
				if rep.Symlinks != 4 || rep.Files != 8 || rep.Bytes == 0 {
					t.Errorf("strip %d: report %+v, want 4 symlinks, 8 files", strip, rep)
				}
				checkTime(t, filepath.Join(root, "README.md"), fileTime)
				checkTime(t, filepath.Join(root, "src"), dirTime)
				checkTime(t, filepath.Join(root, "lib", "libnvshmem_host.so"), linkTime)
				if st, err := os.Lstat(filepath.Join(root, "bin", "tool")); err != nil || st.Mode().Perm() != 0o750 {
					t.Errorf("strip %d: bin/tool mode %v (%v), want 0750 kept", strip, st.Mode(), err)
				}
			}
		})
	}

	t.Run("strip needs one top directory", func(t *testing.T) {
		writeFile(t, filepath.Join(base, "src", "other", "x.txt"), "x\n", 0o644)
		arc := filepath.Join(arcs, "two-tops.tar.gz")
		run(t, base, "tar", "-czf", arc, "-C", "src", "nvshmem_src", "other")
		dest := filepath.Join(t.TempDir(), "out")
		_, err := ExtractFile(context.Background(), arc, dest, ExtractOptions{StripComponents: 1})
		if !errors.Is(err, ErrLayout) || !strings.Contains(err.Error(), `"other/"`) || !strings.Contains(err.Error(), "two-tops.tar.gz") {
			t.Fatalf("got %v, want a layout error naming the archive and entry other/", err)
		}
		absent(t, dest)
	})
}

func checkTime(t *testing.T, p string, want time.Time) {
	t.Helper()
	st, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	if !st.ModTime().Equal(want) {
		t.Errorf("%s: mtime %v, want %v", filepath.Base(p), st.ModTime(), want)
	}
}

// TestExtractModes checks the mode policy on crafted headers: special bits and group/other
// write dropped, exec kept, owner write added, read-only directories still filled.
func TestExtractModes(t *testing.T) {
	arc := filepath.Join(t.TempDir(), "modes.tar")
	data := craftTar(t,
		withMode(dir("ro/"), 0o555),
		withMode(file("ro/setuid", "s"), 0o6755),
		withMode(file("ro/world", "w"), 0o666),
		withMode(file("ro/readonly", "r"), 0o444),
		withMode(file("ro/private", "p"), 0o700),
		withMode(dir("secret/"), 0o700),
	)
	if err := os.WriteFile(arc, data, 0o644); err != nil {
		t.Fatal(err)
	}
	dest := filepath.Join(t.TempDir(), "out")
	if _, err := ExtractFile(context.Background(), arc, dest, ExtractOptions{}); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]os.FileMode{
		"":            0o755,
		"ro":          0o755,
		"ro/setuid":   0o755,
		"ro/world":    0o644,
		"ro/readonly": 0o644,
		"ro/private":  0o700,
		"secret":      0o700,
	} {
		st, err := os.Lstat(filepath.Join(dest, name))
		if err != nil {
			t.Fatal(err)
		}
		if got := st.Mode() & (os.ModePerm | os.ModeSetuid | os.ModeSetgid | os.ModeSticky); got != want {
			t.Errorf("%q: mode %v, want %v", name, got, want)
		}
		if name != "" && !st.ModTime().Equal(fixedTime) {
			t.Errorf("%q: mtime %v, want %v", name, st.ModTime(), fixedTime)
		}
	}
}

// TestExtractReplacesLinkNotTarget: a later entry with a symlink's name replaces the link;
// the file the link pointed to keeps its content.
func TestExtractReplacesLinkNotTarget(t *testing.T) {
	arc := filepath.Join(t.TempDir(), "dup.tar.gz")
	data := compress(t, FormatTarGz, craftTar(t,
		file("f", "original"),
		symlink("l", "f"),
		file("l", "replacement"),
		file("g", "one"),
		file("g", "two"),
		file("x", "x"),
		dir("x/"),
	))
	if err := os.WriteFile(arc, data, 0o644); err != nil {
		t.Fatal(err)
	}
	dest := filepath.Join(t.TempDir(), "out")
	rep, err := ExtractFile(context.Background(), arc, dest, ExtractOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"f": "original", "l": "replacement", "g": "two"} {
		b, err := os.ReadFile(filepath.Join(dest, name))
		if err != nil || string(b) != want {
			t.Errorf("%s: %q (%v), want %q", name, b, err, want)
		}
	}
	if st, err := os.Lstat(filepath.Join(dest, "l")); err != nil || !st.Mode().IsRegular() {
		t.Errorf("l should now be a regular file: %v %v", st, err)
	}
	if st, err := os.Lstat(filepath.Join(dest, "x")); err != nil || !st.IsDir() {
		t.Errorf("x should now be a directory: %v %v", st, err)
	}
	if rep.Entries != 7 {
		t.Errorf("report counts %d entries, want 7", rep.Entries)
	}
}

// TestExtractDestination covers the preconditions: dest must not exist, its parent must,
// the format must be known (or given), and a cancelled context leaves nothing behind.
func TestExtractDestination(t *testing.T) {
	tmp := t.TempDir()
	gz := compress(t, FormatTarGz, craftTar(t, file("a/b", "b")))
	arc := filepath.Join(tmp, "a.tar.gz")
	if err := os.WriteFile(arc, gz, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	exists := filepath.Join(tmp, "exists")
	if err := os.Mkdir(exists, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := ExtractFile(ctx, arc, exists, ExtractOptions{}); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Errorf("existing dest: got %v", err)
	}
	if got := listDir(t, exists); len(got) != 0 {
		t.Errorf("existing dest was written into: %v", got)
	}
	if _, err := ExtractFile(ctx, arc, filepath.Join(tmp, "no", "such", "out"), ExtractOptions{}); err == nil || !strings.Contains(err.Error(), "create it first") {
		t.Errorf("missing parent: got %v", err)
	}

	odd := filepath.Join(tmp, "download.bin")
	if err := os.WriteFile(odd, gz, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ExtractFile(ctx, odd, filepath.Join(tmp, "o1"), ExtractOptions{}); err == nil || !strings.Contains(err.Error(), "unknown archive format") {
		t.Errorf("unknown extension: got %v", err)
	}
	if _, err := ExtractFile(ctx, odd, filepath.Join(tmp, "o2"), ExtractOptions{Format: FormatTarGz}); err != nil {
		t.Errorf("explicit format: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(tmp, "o2", "a", "b")); err != nil || string(b) != "b" {
		t.Errorf("explicit format extracted %q, %v", b, err)
	}

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	dest := filepath.Join(tmp, "cancelled")
	if _, err := ExtractFile(cctx, arc, dest, ExtractOptions{}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: got %v", err)
	}
	absent(t, dest)
}

func TestDetectFormat(t *testing.T) {
	for name, want := range map[string]Format{
		"nvshmem_src_3.2.5-1.txz":                 FormatTarXz,
		"nvshmem_src_cuda12-all-all-3.3.9.tar.gz": FormatTarGz,
		"x.TGZ":                           FormatTarGz,
		"deepep-0123456789abcdef.tar.zst": FormatTarZst,
		"a.tzst":                          FormatTarZst,
		"a.tar.xz":                        FormatTarXz,
		"a.tar":                           FormatTar,
		"wheel.zip":                       FormatZip,
	} {
		if got, err := DetectFormat(name); err != nil || got != want {
			t.Errorf("%s: %q, %v; want %q", name, got, err, want)
		}
	}
	if _, err := DetectFormat("a.tar.bz2"); err == nil {
		t.Error("a.tar.bz2: want an error")
	}
}

// TestExtractHardlinks: GNU tar stores the second name of a file as a hard link; it must come
// back as the same inode, also when the top directory is stripped.
func TestExtractHardlinks(t *testing.T) {
	base := t.TempDir()
	writeFile(t, filepath.Join(base, "src", "top", "lib", "libx.so"), "ELF", 0o755)
	if err := os.Link(filepath.Join(base, "src", "top", "lib", "libx.so"), filepath.Join(base, "src", "top", "libx-copy.so")); err != nil {
		t.Fatal(err)
	}
	arc := filepath.Join(base, "links.tar.gz")
	run(t, base, "tar", "-czf", arc, "-C", "src", "top")
	for _, strip := range []int{0, 1} {
		dest := filepath.Join(t.TempDir(), "out")
		rep, err := ExtractFile(context.Background(), arc, dest, ExtractOptions{StripComponents: strip})
		if err != nil {
			t.Fatal(err)
		}
		root := dest
		if strip == 0 {
			root = filepath.Join(dest, "top")
		}
		a, errA := os.Stat(filepath.Join(root, "lib", "libx.so"))
		b, errB := os.Stat(filepath.Join(root, "libx-copy.so"))
		if errA != nil || errB != nil || !os.SameFile(a, b) {
			t.Fatalf("strip %d: want one inode under two names (%v, %v)", strip, errA, errB)
		}
		if rep.Hardlinks != 1 || rep.Files != 1 {
			t.Errorf("strip %d: report %+v, want 1 file and 1 hard link", strip, rep)
		}
	}
}
