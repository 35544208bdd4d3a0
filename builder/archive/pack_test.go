package archive

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"golang.org/x/sys/unix"
)

func packExtras() []File {
	return []File{
		{Name: "manifest.json", Mode: 0o644, Data: []byte(`{"recipe":"deepep"}` + "\n")},
		{Name: "etc/epbuild/env.sh", Mode: 0o700, Data: []byte("export NVSHMEM_DIR=$PREFIX\n")},
	}
}

func packTo(t testing.TB, dir string, opts PackOptions) ([]byte, *PackReport) {
	t.Helper()
	var buf bytes.Buffer
	rep, err := Pack(context.Background(), dir, &buf, opts)
	if err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), rep
}

func sum(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

// TestPackRoundTrip packs a staged prefix with generated files, extracts it, and checks that
// HashTree of the result equals the entries Pack reported; that Pack's in-stream hashes
// equal HashTree's and sha256sum's; and that GNU tar and zstd read the artifact.
func TestPackRoundTrip(t *testing.T) {
	tmp := t.TempDir()
	stage := filepath.Join(tmp, "stage")
	makeSourceTree(t, stage)
	mt := time.Unix(1700000000, 987654321)
	data, rep := packTo(t, stage, PackOptions{Prefix: "deepep-1.2.1", ModTime: mt, Extra: packExtras()})
	if rep.Compressed != int64(len(data)) {
		t.Errorf("report says %d compressed bytes, wrote %d", rep.Compressed, len(data))
	}
	var onDisk []Entry
	for _, e := range rep.Entries {
		if e.Path != "manifest.json" && e.Path != "etc" && !strings.HasPrefix(e.Path, "etc/") {
			onDisk = append(onDisk, e)
		}
	}
	diffEntries(t, "packed vs HashTree of the stage", onDisk, hashTree(t, stage))
	if i := slices.IndexFunc(rep.Entries, func(e Entry) bool { return e.Path == "etc/epbuild" }); i < 0 || rep.Entries[i].Type != TypeDir {
		t.Errorf("parent directory of an extra file missing from the entries")
	}

	arc := filepath.Join(tmp, "deepep-0123abcd.tar.zst")
	if err := os.WriteFile(arc, data, 0o644); err != nil {
		t.Fatal(err)
	}
	dest := filepath.Join(tmp, "install")
	xr, err := ExtractFile(context.Background(), arc, dest, ExtractOptions{StripComponents: 1})
	if err != nil {
		t.Fatal(err)
	}
	got := hashTree(t, dest)
	diffEntries(t, "extracted vs packed", got, rep.Entries)
	if xr.Bytes != rep.Bytes {
		t.Errorf("extracted %d bytes, packed %d", xr.Bytes, rep.Bytes)
	}
	if st, err := os.Stat(filepath.Join(dest, "etc", "epbuild", "env.sh")); err != nil || st.Mode().Perm() != 0o755 {
		t.Errorf("env.sh: %v %v, want mode 0755", st, err)
	}
	for _, p := range []string{"README.md", "lib", "lib/libnvshmem_host.so", "etc/epbuild"} {
		checkTime(t, filepath.Join(dest, p), time.Unix(1700000000, 0))
	}

	out := run(t, dest, "sha256sum", "lib/libnvshmem_host.so.3.2.5", "manifest.json", "src/with space.h")
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		h, name, _ := strings.Cut(line, "  ")
		i := slices.IndexFunc(rep.Entries, func(e Entry) bool { return e.Path == name })
		if i < 0 || rep.Entries[i].SHA256 != h {
			t.Errorf("sha256sum %s = %s; Pack reported %+v", name, h, rep.Entries[i])
		}
	}
	run(t, tmp, "zstd", "-tq", arc)
	listing := strings.Split(strings.TrimSpace(run(t, tmp, "tar", "--zstd", "-tf", arc)), "\n")
	if listing[0] != "deepep-1.2.1/" || listing[1] != "deepep-1.2.1/README.md" || len(listing) != len(rep.Entries)+1 {
		t.Errorf("GNU tar lists %d names starting %q; want the prefix dir then %d sorted entries", len(listing), listing[:2], len(rep.Entries))
	}
}

// TestPackReproducible: the same tree gives the same bytes, also after mtimes, atimes,
// owners and in-class modes change; content, ModTime and level do change the bytes. The
// headers are checked directly: sorted, owner 0:0 without names, one whole-second mtime,
// no PAX time records, ustar wherever the name fits.
func TestPackReproducible(t *testing.T) {
	stage := filepath.Join(t.TempDir(), "stage")
	makeSourceTree(t, stage)
	opts := PackOptions{Prefix: "p", ModTime: fixedTime.Add(700 * time.Millisecond), Extra: packExtras()}
	first, _ := packTo(t, stage, opts)
	again, _ := packTo(t, stage, opts)
	if sum(first) != sum(again) {
		t.Fatal("two packs of the same tree differ")
	}

	when := time.Unix(1234567890, 5)
	err := filepath.WalkDir(stage, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if os.Geteuid() == 0 {
			if err := os.Lchown(p, 4242, 4343); err != nil {
				return err
			}
		}
		ts := []unix.Timespec{unix.NsecToTimespec(when.UnixNano()), unix.NsecToTimespec(when.UnixNano())}
		when = when.Add(time.Hour + 7)
		return unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, unix.AT_SYMLINK_NOFOLLOW)
	})
	if err != nil {
		t.Fatal(err)
	}
	for p, m := range map[string]os.FileMode{"README.md": 0o600, "bin/run.sh": 0o700, "src": 0o750} {
		if err := os.Chmod(filepath.Join(stage, p), m); err != nil {
			t.Fatal(err)
		}
	}
	touched, _ := packTo(t, stage, opts)
	if sum(first) != sum(touched) {
		t.Fatal("pack changed after touching mtimes, owners or in-class modes")
	}

	for what, o := range map[string]PackOptions{
		"ModTime": {Prefix: "p", ModTime: fixedTime.Add(time.Second), Extra: packExtras()},
		"Level":   {Prefix: "p", ModTime: opts.ModTime, Extra: packExtras(), Level: zstd.SpeedBestCompression},
		"Prefix":  {Prefix: "q", ModTime: opts.ModTime, Extra: packExtras()},
	} {
		if b, _ := packTo(t, stage, o); sum(b) == sum(first) {
			t.Errorf("changing %s did not change the output", what)
		}
	}
	if err := os.Chmod(filepath.Join(stage, "README.md"), 0o744); err != nil {
		t.Fatal(err)
	}
	if b, _ := packTo(t, stage, opts); sum(b) == sum(first) {
		t.Error("adding an exec bit did not change the output")
	}
	writeFile(t, filepath.Join(stage, "README.md"), "# fixturf\n", 0o644)
	if b, _ := packTo(t, stage, opts); sum(b) == sum(first) {
		t.Error("changing one byte did not change the output")
	}

	zr, err := zstd.NewReader(bytes.NewReader(first))
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	tr := tar.NewReader(zr)
	prev := ""
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimSuffix(h.Name, "/")
		if name <= prev {
			t.Errorf("%q sorts after %q", name, prev)
		}
		prev = name
		if h.Uid != 0 || h.Gid != 0 || h.Uname != "" || h.Gname != "" {
			t.Errorf("%s: owner %d:%d %q:%q", h.Name, h.Uid, h.Gid, h.Uname, h.Gname)
		}
		if !h.ModTime.Equal(fixedTime) {
			t.Errorf("%s: mtime %v, want %v", h.Name, h.ModTime, fixedTime)
		}
		for k := range h.PAXRecords {
			if k != "path" && k != "linkpath" {
				t.Errorf("%s: PAX record %q", h.Name, k)
			}
		}
		if len(h.Name) <= 100 && h.Format != tar.FormatUSTAR {
			t.Errorf("%s: format %v, want ustar", h.Name, h.Format)
		}
		if m := h.Mode; m != 0o755 && m != 0o644 && m != 0o777 {
			t.Errorf("%s: mode %o", h.Name, m)
		}
	}
}

// TestPackRefuses: links that would point outside an install, special files, and generated
// files that clash with the tree are refused before anything is written.
func TestPackRefuses(t *testing.T) {
	cases := []struct {
		name  string
		setup func(t *testing.T, d string)
		extra []File
		kind  error
		want  string
	}{
		{"absolute symlink", func(t *testing.T, d string) { must(t, os.Symlink("/usr/lib/libx.so", filepath.Join(d, "lib", "l"))) }, nil, ErrUnsafe, `"lib/l"`},
		{"escaping symlink", func(t *testing.T, d string) { must(t, os.Symlink("../../x", filepath.Join(d, "lib", "l"))) }, nil, ErrUnsafe, `"lib/l"`},
		{"escaping chain", func(t *testing.T, d string) {
			must(t, os.Symlink("..", filepath.Join(d, "lib", "up")))
			must(t, os.Symlink("lib/up/..", filepath.Join(d, "x")))
		}, nil, ErrUnsafe, `"x"`},
		{"fifo", func(t *testing.T, d string) { must(t, unix.Mkfifo(filepath.Join(d, "lib", "pipe"), 0o644)) }, nil, ErrUnsupported, `"lib/pipe"`},
		{"extra clashes", nil, []File{{Name: "lib/a.so", Data: []byte("x")}}, nil, `"lib/a.so"`},
		{"extra escapes", nil, []File{{Name: "../m.json"}}, nil, `"../m.json"`},
		{"extra under a file", nil, []File{{Name: "lib/a.so/m.json"}}, nil, `parent "lib/a.so"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := t.TempDir()
			writeFile(t, filepath.Join(d, "lib", "a.so"), "ELF", 0o755)
			if c.setup != nil {
				c.setup(t, d)
			}
			var buf bytes.Buffer
			_, err := Pack(context.Background(), d, &buf, PackOptions{Extra: c.extra})
			t.Log(err)
			if err == nil || !strings.Contains(err.Error(), c.want) || (c.kind != nil && !errors.Is(err, c.kind)) {
				t.Fatalf("got %v; want an error (%v) containing %s", err, c.kind, c.want)
			}
			if buf.Len() != 0 {
				t.Fatalf("%d bytes written before the refusal", buf.Len())
			}
		})
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestHashTreeMatchesSha256sum compares every file hash with coreutils' sha256sum over a
// tree with more files than workers, and checks the entry list is sorted and complete.
func TestHashTreeMatchesSha256sum(t *testing.T) {
	d := t.TempDir()
	makeSourceTree(t, d)
	for i := range 40 {
		writeFile(t, filepath.Join(d, "many", string(rune('a'+i%26))+strings.Repeat("x", i)), strings.Repeat("line\n", i*97), 0o644)
	}
	entries := hashTree(t, d)
	if !slices.IsSortedFunc(entries, func(a, b Entry) int { return strings.Compare(a.Path, b.Path) }) {
		t.Error("entries not sorted")
	}
	out := run(t, d, "bash", "-c", "find . -type f -printf '%P\\0' | xargs -0 sha256sum")
	want := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		h, name, _ := strings.Cut(line, "  ")
		want[name] = h
	}
	files := 0
	for _, e := range entries {
		switch e.Type {
		case TypeFile:
			files++
			if want[e.Path] != e.SHA256 {
				t.Errorf("%s: %s, sha256sum says %s", e.Path, e.SHA256, want[e.Path])
			}
		case TypeSymlink:
			if e.Target == "" || e.Mode != 0o777 {
				t.Errorf("%s: %+v", e.Path, e)
			}
		}
	}
	if files != len(want) {
		t.Errorf("HashTree found %d files, find found %d", files, len(want))
	}
}

// TestPackFile: the file holds exactly what Pack streams, and a refused pack leaves neither
// the artifact nor a temporary file.
func TestPackFile(t *testing.T) {
	tmp := t.TempDir()
	stage := filepath.Join(tmp, "stage")
	makeSourceTree(t, stage)
	opts := PackOptions{Prefix: "p", ModTime: fixedTime}
	want, _ := packTo(t, stage, opts)
	out := filepath.Join(tmp, "out")
	must(t, os.Mkdir(out, 0o755))
	dest := filepath.Join(out, "deepep-abc.tar.zst")
	if _, err := PackFile(context.Background(), stage, dest, opts); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(dest)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("PackFile wrote %d bytes (%v), Pack streams %d", len(got), err, len(want))
	}
	must(t, os.Remove(dest))
	must(t, unix.Mkfifo(filepath.Join(stage, "pipe"), 0o644))
	if _, err := PackFile(context.Background(), stage, dest, opts); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("got %v, want ErrUnsupported", err)
	}
	if names := listDir(t, out); len(names) != 0 {
		t.Fatalf("left behind: %v", names)
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

// TestPackWriteFailure: a failing writer mid-stream stops the reading goroutine and surfaces
// the cause (run under -race, this also checks the hand-off between the two goroutines).
func TestPackWriteFailure(t *testing.T) {
	stage := filepath.Join(t.TempDir(), "stage")
	makeSourceTree(t, stage)
	writeFile(t, filepath.Join(stage, "zz-big.bin"), strings.Repeat("0123456789abcdef", 1<<18), 0o644)
	_, err := Pack(context.Background(), stage, failWriter{}, PackOptions{})
	t.Log(err)
	if err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("got %v, want the writer's error", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Pack(ctx, stage, io.Discard, PackOptions{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: got %v", err)
	}
}
