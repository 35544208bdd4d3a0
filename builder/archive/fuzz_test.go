package archive

import (
	"bytes"
	"context"
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
			_, err := ExtractFile(context.Background(), filepath.Join(work, name), dest,
				ExtractOptions{StripComponents: strip, MaxBytes: 1 << 20, MaxEntries: 1000})
			if err != nil {
				absent(t, dest)
			} else {
				wantWork = append(wantWork, filepath.Base(dest))
				checkInside(t, dest)
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
