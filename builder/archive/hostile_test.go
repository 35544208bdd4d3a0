package archive

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

type hostileCase struct {
	name   string
	format Format // the crafted tar is compressed with it; FormatZip takes zip bytes as is
	data   []byte
	opts   ExtractOptions
	kind   error
	entry  string // must appear, quoted, in the message; empty: only the archive name is checked
}

func hostileCases(t testing.TB) []hostileCase {
	tr := func(ents ...tent) []byte { return craftTar(t, ents...) }
	zeros := append(tr(file("a", "a")), make([]byte, 2<<20)...)
	return []hostileCase{
		{name: "dotdot", data: tr(file("../x", "evil")), kind: ErrUnsafe, entry: "../x"},
		{name: "dotdot-inside", data: tr(dir("a/"), file("a/../../x", "evil")), kind: ErrUnsafe, entry: "a/../../x"},
		{name: "absolute", data: tr(file("/abs", "evil")), kind: ErrUnsafe, entry: "/abs"},
		{name: "symlink-absolute", data: tr(symlink("etc", "/etc")), kind: ErrUnsafe, entry: "etc"},
		{name: "symlink-escapes", data: tr(dir("d/"), symlink("d/l", "../../x")), kind: ErrUnsafe, entry: "d/l"},
		{name: "write-through-dot-link", data: tr(symlink("a", "."), file("a/x", "x")), kind: ErrUnsafe, entry: "a/x"},
		{name: "write-through-dir-link", data: tr(dir("sub/"), symlink("a", "sub"), file("a/x", "x")), kind: ErrUnsafe, entry: "a/x"},
		{name: "mkdir-through-link", data: tr(dir("sub/"), symlink("a", "sub"), dir("a/y/")), kind: ErrUnsafe, entry: "a/y/"},
		{name: "symlink-chain", data: tr(dir("d/"), symlink("d/up", ".."), symlink("x", "d/up/..")), kind: ErrUnsafe, entry: "x"},
		{name: "symlink-chain-later", data: tr(symlink("x", "d/up/.."), dir("d/"), symlink("d/up", "..")), kind: ErrUnsafe, entry: "x"},
		{name: "hardlink-outside", data: tr(hardlink("h", "../etc/passwd")), kind: ErrUnsafe, entry: "h"},
		{name: "hardlink-absolute", data: tr(hardlink("h", "/etc/passwd")), kind: ErrUnsafe, entry: "h"},
		{name: "hardlink-missing", data: tr(hardlink("h", "nothing")), kind: ErrUnsafe, entry: "h"},
		{name: "hardlink-to-symlink", data: tr(file("f", "f"), symlink("l", "f"), hardlink("h", "l")), kind: ErrUnsafe, entry: "h"},
		{name: "hardlink-outside-strip", data: tr(file("top/f", "f"), hardlink("top/h", "other/f")), opts: ExtractOptions{StripComponents: 1}, kind: ErrUnsafe, entry: "top/h"},
		{name: "strip-two-tops", data: tr(file("top/f", "f"), file("other/g", "g")), opts: ExtractOptions{StripComponents: 1}, kind: ErrLayout, entry: "other/g"},
		{name: "strip-file-at-top", data: tr(file("top/f", "f"), file("README", "r")), opts: ExtractOptions{StripComponents: 1}, kind: ErrLayout, entry: "README"},
		{name: "char-device", data: tr(special("dev/null", tar.TypeChar)), kind: ErrUnsupported, entry: "dev/null"},
		{name: "block-device", data: tr(special("sda", tar.TypeBlock)), kind: ErrUnsupported, entry: "sda"},
		{name: "fifo", data: tr(special("pipe", tar.TypeFifo)), kind: ErrUnsupported, entry: "pipe"},
		{name: "file-over-dir", data: tr(dir("d/"), file("d/x", "x"), file("d", "x")), kind: ErrUnsafe, entry: "d"},
		{name: "oversized-entry", data: tr(sized("big", 2000)), opts: ExtractOptions{MaxBytes: 1000}, kind: ErrLimit, entry: "big"},
		{name: "oversized-total", data: tr(sized("a", 600), sized("b", 600)), opts: ExtractOptions{MaxBytes: 1000}, kind: ErrLimit, entry: "b"},
		{name: "too-many-entries", data: tr(file("a", ""), file("b", ""), file("c", ""), file("d", "")), opts: ExtractOptions{MaxEntries: 3}, kind: ErrLimit, entry: "d"},
		{name: "trailing-zeros-bomb", format: FormatTarGz, data: zeros, opts: ExtractOptions{MaxBytes: 1 << 20}, kind: ErrLimit},
		{name: "no-end-marker", data: craftTarOpt(t, false, file("a", "a")), kind: ErrCorrupt},
		{name: "empty", data: []byte{}, kind: ErrCorrupt},
		{name: "zip-dotdot", format: FormatZip, data: craftZip(t, zent{"../x", 0o644, "x"}), kind: ErrUnsafe, entry: "../x"},
		{name: "zip-nul", format: FormatZip, data: craftZip(t, zent{"a\x00b", 0o644, "x"}), kind: ErrUnsafe, entry: "a\x00b"},
		{name: "zip-symlink-absolute", format: FormatZip, data: craftZip(t, zent{"l", os.ModeSymlink | 0o777, "/etc"}), kind: ErrUnsafe, entry: "l"},
		{name: "zip-write-through-link", format: FormatZip, data: craftZip(t, zent{"a", os.ModeSymlink | 0o777, "."}, zent{"a/x", 0o644, "x"}), kind: ErrUnsafe, entry: "a/x"},
		{name: "zip-device", format: FormatZip, data: craftZip(t, zent{"d", os.ModeDevice | 0o644, ""}), kind: ErrUnsupported, entry: "d"},
	}
}

// TestExtractHostile feeds crafted archives that try to escape, write through links, plant
// devices or exhaust limits. Each must be refused with its class, a message naming the
// archive and the entry, no destination and nothing written next to it.
func TestExtractHostile(t *testing.T) {
	for _, c := range hostileCases(t) {
		t.Run(c.name, func(t *testing.T) {
			base := t.TempDir()
			work := filepath.Join(base, "work")
			writeFile(t, filepath.Join(base, "etc", "passwd"), "root:x:0:0\n", 0o644)
			format := c.format
			if format == "" {
				format = FormatTar
			}
			name := c.name + "." + string(format)
			arc := filepath.Join(work, name)
			writeFile(t, arc, string(compress(t, format, c.data)), 0o644)
			before := listDir(t, base)
			dest := filepath.Join(work, "out")

			_, err := ExtractFile(context.Background(), arc, dest, c.opts)
			if err == nil {
				t.Fatal("extraction succeeded; want it refused")
			}
			t.Log(err)
			if !errors.Is(err, c.kind) {
				t.Fatalf("got %v; want class %v", err, c.kind)
			}
			var xe *ExtractError
			if !errors.As(err, &xe) || xe.Archive != name || !strings.HasPrefix(err.Error(), "extract "+name+": ") {
				t.Fatalf("error %q does not start with the archive name %s", err, name)
			}
			if c.entry != "" && !strings.Contains(err.Error(), strconquote(c.entry)) {
				t.Fatalf("error %q does not name entry %q", err, c.entry)
			}
			absent(t, dest)
			if got := listDir(t, base); strings.Join(got, ",") != strings.Join(before, ",") {
				t.Fatalf("next to the work dir: %v, before: %v", got, before)
			}
			if format != FormatZip {
				// a scan refuses it the same way, reading the same bytes
				f, err := os.Open(arc)
				if err != nil {
					t.Fatal(err)
				}
				_, serr := Scan(context.Background(), f, name, c.opts)
				f.Close()
				if !errors.Is(serr, c.kind) || !strings.HasPrefix(fmt.Sprint(serr), "extract "+name+": ") ||
					c.entry != "" && !strings.Contains(serr.Error(), strconquote(c.entry)) {
					t.Fatalf("scan: got %v; want class %v naming %s and entry %q", serr, c.kind, name, c.entry)
				}
			}
			if got := listDir(t, work); len(got) != 1 {
				t.Fatalf("work dir holds %v, want only the archive", got)
			}
			if b, _ := os.ReadFile(filepath.Join(base, "etc", "passwd")); string(b) != "root:x:0:0\n" {
				t.Fatal("file outside the destination was modified")
			}
		})
	}
}

func strconquote(s string) string {
	var b strings.Builder
	b.WriteString(`"`)
	b.WriteString(strings.NewReplacer(`"`, `\"`, "\x00", `\x00`).Replace(s))
	b.WriteString(`"`)
	return b.String()
}

// TestExtractCorrupt damages archives made by the real tools, truncating them or flipping
// bytes mid-stream, and expects ErrCorrupt naming the archive (and the entry being read
// when the damage is inside one).
func TestExtractCorrupt(t *testing.T) {
	base := t.TempDir()
	top := filepath.Join(base, "src", "pkg")
	writeFile(t, filepath.Join(top, "a.txt"), "first\n", 0o644)
	big := make([]byte, 1<<20)
	rng := rand.New(rand.NewChaCha8([32]byte{1}))
	for i := range big {
		big[i] = byte(rng.Uint32())
	}
	writeFile(t, filepath.Join(top, "big.bin"), string(big), 0o644)
	writeFile(t, filepath.Join(top, "z.txt"), "last\n", 0o644)

	cases := []struct {
		name, script string
		flip         bool // byte damage is detectable (plain tar has no checksum over data)
		entryOnCut   bool // a cut lands inside big.bin's data and must name it
	}{
		{"c.tar.gz", "tar -czf $A -C src pkg", true, true},
		{"c.txz", "tar -cJf $A -C src pkg", true, true},
		{"c.tar.zst", "tar -cf - -C src pkg | zstd -q -o $A", true, true},
		{"c.tar", "tar -cf $A -C src pkg", false, true},
		{"c.zip", "cd src && zip -qr $A pkg", true, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			good := filepath.Join(base, c.name)
			run(t, base, "bash", "-c", "set -eo pipefail; A="+good+"; "+c.script)
			data, err := os.ReadFile(good)
			if err != nil {
				t.Fatal(err)
			}
			variants := map[string][]byte{"cut": data[:len(data)/2]}
			if c.flip {
				bad := bytes.Clone(data)
				for i := len(bad) / 2; i < len(bad)/2+64; i++ {
					bad[i] ^= 0x55
				}
				variants["flip"] = bad
			}
			for v, b := range variants {
				dir := t.TempDir()
				arc := filepath.Join(dir, v+"-"+c.name)
				if err := os.WriteFile(arc, b, 0o644); err != nil {
					t.Fatal(err)
				}
				dest := filepath.Join(dir, "out")
				_, err := ExtractFile(context.Background(), arc, dest, ExtractOptions{})
				t.Log(err)
				if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "extract "+v+"-"+c.name+": ") {
					t.Fatalf("%s: got %v; want ErrCorrupt naming the archive", v, err)
				}
				if v == "cut" && c.entryOnCut && !strings.Contains(err.Error(), `"pkg/big.bin"`) {
					t.Fatalf("%s: %v does not name the entry being read", v, err)
				}
				if c.name == "c.zip" && v == "flip" && !strings.Contains(err.Error(), `"pkg/big.bin"`) {
					t.Fatalf("%s: %v does not name the damaged entry", v, err)
				}
				absent(t, dest)
			}
		})
	}
}
