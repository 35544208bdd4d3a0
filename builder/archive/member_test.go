package archive

import (
	"context"
	"errors"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// ReadMember finds one regular file without writing anything, and holds the entries
// before it to the same limits as an extraction.
func TestReadMember(t *testing.T) {
	good := craftTar(t, dir("a/"), file("a/x", "xx"), file("manifest.json", `{"m":1}`), file("z", "zz"))
	cases := []struct {
		name    string
		data    []byte
		max     int64
		opts    ExtractOptions
		want    string
		wantErr error
	}{
		{name: "found", data: good, max: 100, want: `{"m":1}`},
		{name: "found, zstd", data: compress(t, FormatTarZst, good), max: 100, opts: ExtractOptions{Format: FormatTarZst}, want: `{"m":1}`},
		{name: "missing", data: craftTar(t, file("a", "x")), max: 100, wantErr: fs.ErrNotExist},
		{name: "bigger than allowed", data: good, max: 3, wantErr: ErrLimit},
		{name: "entries before it past MaxBytes", data: craftTar(t, sized("big", 5000), file("manifest.json", "{}")), max: 100,
			opts: ExtractOptions{MaxBytes: 4096}, wantErr: ErrLimit},
		{name: "too many entries before it", data: craftTar(t, file("1", ""), file("2", ""), file("manifest.json", "{}")), max: 100,
			opts: ExtractOptions{MaxEntries: 2}, wantErr: ErrLimit},
		{name: "a symlink", data: craftTar(t, symlink("manifest.json", "/etc/passwd")), max: 100, wantErr: ErrLayout},
		{name: "a name that leaves, not taken for it", data: craftTar(t, file("../manifest.json", "{}")), max: 100, wantErr: fs.ErrNotExist},
		{name: "truncated", data: craftTarOpt(t, false, file("manifest.json", strings.Repeat("m", 600)))[:700], max: 1000, wantErr: ErrCorrupt},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "a.tar")
			writeFile(t, p, string(c.data), 0o644)
			opts := c.opts
			if opts.Format == "" {
				opts.Format = FormatTar
			}
			got, err := ReadMember(context.Background(), p, "manifest.json", c.max, opts)
			if c.wantErr != nil {
				if !errors.Is(err, c.wantErr) {
					t.Fatalf("got %q, %v; want %v", got, err, c.wantErr)
				}
				return
			}
			if err != nil || string(got) != c.want {
				t.Fatalf("got %q, %v; want %q", got, err, c.want)
			}
			if got := listDir(t, filepath.Dir(p)); len(got) != 1 {
				t.Errorf("it wrote %v", got)
			}
		})
	}
}
