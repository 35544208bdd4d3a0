package verify

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/epbuild/epbuild/builder/archive"
	"github.com/epbuild/epbuild/builder/manifest"
)

// A file that install hashed as it wrote it, with the sha256 the manifest expects, is not
// read again; one whose recorded sha256 is not the expected one (env.sh, baked after the
// extraction) is read and judged by its bytes.
func TestVerifyFilesHashedNotReadAgain(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"a.txt", "b.txt"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("on disk"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// the manifest expects other bytes of the same size: reading either file finds it changed
	want := manifest.SHA256Hex([]byte("written"))
	entries := []archive.Entry{
		{Path: "a.txt", Type: archive.TypeFile, Mode: 0o644, Size: 7, SHA256: want},
		{Path: "b.txt", Type: archive.TypeFile, Mode: 0o644, Size: 7, SHA256: want},
	}
	hashed := map[string]string{"a.txt": want, "b.txt": manifest.SHA256Hex([]byte("earlier"))}
	problems, st, err := verifyFiles(context.Background(), dir, entries, hashed)
	if err != nil {
		t.Fatal(err)
	}
	if len(problems) != 1 || problems[0].Path != "b.txt" || problems[0].Kind != manifest.ProblemChanged {
		t.Errorf("problems %+v; want b.txt changed alone (a.txt was hashed as written)", problems)
	}
	if st.Files != 2 || st.Bytes != 14 {
		t.Errorf("stats %+v; want 2 files, 14 bytes", st)
	}
}
