package archive

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const corpusDir = "testdata/fuzz/FuzzExtract"

// fuzzSeeds are the uncompressed hostile archives plus well-formed ones, so the fuzzer
// starts from every path through the extractor.
func fuzzSeeds(t testing.TB) map[string][]byte {
	seeds := map[string][]byte{
		"valid-tar": craftTar(t,
			dir("top/"), file("top/a.txt", "a\n"), withMode(file("top/bin/run", "#!/bin/sh\n"), 0o755),
			symlink("top/lib.so", "bin/run"), hardlink("top/b.txt", "top/a.txt"), dir("top/empty/")),
		"valid-zip": craftZip(t,
			zent{"top/", os.ModeDir | 0o755, ""}, zent{"top/a.txt", 0o644, "a\n"},
			zent{"top/l", os.ModeSymlink | 0o777, "a.txt"}),
	}
	for _, c := range hostileCases(t) {
		if c.format == "" || c.format == FormatZip {
			seeds[c.name] = c.data
		}
	}
	return seeds
}

func corpusFile(data []byte) []byte {
	return fmt.Appendf(nil, "go test fuzz v1\n[]byte(%q)\n", data)
}

// TestFuzzCorpusCurrent keeps the committed seed corpus equal to what the test code crafts.
func TestFuzzCorpusCurrent(t *testing.T) {
	seeds := fuzzSeeds(t)
	if os.Getenv("EPBUILD_UPDATE_FUZZ_CORPUS") != "" {
		if err := os.MkdirAll(corpusDir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, data := range seeds {
			if err := os.WriteFile(filepath.Join(corpusDir, name), corpusFile(data), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	for name, data := range seeds {
		got, err := os.ReadFile(filepath.Join(corpusDir, name))
		if err != nil || !bytes.Equal(got, corpusFile(data)) {
			t.Errorf("seed %s is missing or stale in %s (%v); regenerate with EPBUILD_UPDATE_FUZZ_CORPUS=1 go test -run TestFuzzCorpusCurrent ./builder/archive", name, corpusDir, err)
		}
	}
}

// FuzzExtract feeds arbitrary bytes as a tar (or a zip when they start with "PK"), with and
// without StripComponents, and checks by independent means that nothing was written outside
// the destination, that a failure leaves no destination, and that what a success leaves is
// only files, directories and symlinks that stay inside.
func FuzzExtract(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		base := t.TempDir()
		writeFile(t, filepath.Join(base, "outside", "keep"), "keep", 0o644)
		work := filepath.Join(base, "work")
		name := "f.tar"
		if bytes.HasPrefix(data, []byte("PK")) {
			name = "f.zip"
		}
		writeFile(t, filepath.Join(work, name), string(data), 0o644)
		wantWork := []string{name}
		for strip := range 2 {
			dest := filepath.Join(work, fmt.Sprintf("out%d", strip))
			opts := ExtractOptions{StripComponents: strip, MaxBytes: 1 << 20, MaxEntries: 1000, Hash: true}
			rep, err := ExtractFile(context.Background(), filepath.Join(work, name), dest, opts)
			if err != nil {
				absent(t, dest)
			} else {
				wantWork = append(wantWork, filepath.Base(dest))
				checkInside(t, dest)
				if got := walkTree(t, dest); !slices.Equal(rep.Tree, got) {
					t.Fatalf("the extraction's Tree differs from what it wrote:\n%v\n%v", rep.Tree, got)
				}
			}
			if name == "f.tar" {
				// a scan reads the same tree, or refuses the archive for the same reason
				srep, serr := Scan(context.Background(), bytes.NewReader(data), name, opts)
				switch {
				case (err == nil) != (serr == nil):
					t.Fatalf("extraction: %v; scan: %v", err, serr)
				case err == nil && !slices.Equal(rep.Tree, srep.Tree):
					t.Fatalf("the scan's Tree differs from the extraction's:\n%v\n%v", srep.Tree, rep.Tree)
				case err != nil && errorClass(err) != errorClass(serr):
					t.Fatalf("extraction: %v; scan: %v", err, serr)
				}
			}
			if got := listDir(t, base); !slices.Equal(got, []string{"outside", "work"}) {
				t.Fatalf("base holds %v", got)
			}
			if got := listDir(t, work); !slices.Equal(got, wantWork) {
				t.Fatalf("work holds %v, want %v", got, wantWork)
			}
			if got := listDir(t, filepath.Join(base, "outside")); !slices.Equal(got, []string{"keep"}) {
				t.Fatalf("outside holds %v", got)
			}
			if b, _ := os.ReadFile(filepath.Join(base, "outside", "keep")); string(b) != "keep" {
				t.Fatal("file outside the destination was modified")
			}
		}
	})
}

// checkInside walks an extracted tree with the OS's own resolution, not the package's.
func checkInside(t *testing.T, dest string) {
	t.Helper()
	real, err := filepath.EvalSymlinks(dest)
	if err != nil {
		t.Fatal(err)
	}
	err = filepath.WalkDir(dest, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if info.Mode()&(fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky) != 0 {
			t.Errorf("%s: special mode bits %v", p, info.Mode())
		}
		switch info.Mode().Type() {
		case 0, fs.ModeDir:
		case fs.ModeSymlink:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			if filepath.IsAbs(target) {
				t.Errorf("%s: absolute symlink %q", p, target)
			}
			if lex := filepath.Join(filepath.Dir(p), target); lex != dest && !strings.HasPrefix(lex, dest+"/") {
				t.Errorf("%s: symlink %q points outside lexically", p, target)
			}
			if r, err := filepath.EvalSymlinks(p); err == nil && r != real && !strings.HasPrefix(r, real+"/") {
				t.Errorf("%s: symlink %q resolves outside, to %s", p, target, r)
			}
		default:
			t.Errorf("%s: unexpected file type %v", p, info.Mode().Type())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// errorClass is the Err* class of an extraction error (nil for I/O).
func errorClass(err error) error {
	for _, k := range []error{ErrUnsafe, ErrLimit, ErrCorrupt, ErrUnsupported, ErrLayout} {
		if errors.Is(err, k) {
			return k
		}
	}
	return nil
}

// walkTree lists an extracted tree from the file system, as Tree describes it: the
// exact permission bits, each file's size and sha256, each symlink's target.
func walkTree(t *testing.T, dir string) []Entry {
	t.Helper()
	var out []Entry
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		e := Entry{Path: filepath.ToSlash(rel), Mode: info.Mode().Perm()}
		switch info.Mode().Type() {
		case fs.ModeDir:
			e.Type = TypeDir
		case fs.ModeSymlink:
			e.Type, e.Mode = TypeSymlink, 0o777
			e.Target, _ = os.Readlink(p)
		default:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(b)
			e.Type, e.Size, e.SHA256 = TypeFile, int64(len(b)), hex.EncodeToString(sum[:])
		}
		out = append(out, e)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
