package manifest

import (
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/epbuild/epbuild/builder/archive"
	"github.com/epbuild/epbuild/builder/disk"
	"github.com/epbuild/epbuild/builder/quote"
)

// ReceiptName is the file install leaves at the top of the prefix.
const ReceiptName = ".epbuild-receipt.json"

// Receipt says what was installed in a prefix, from where and when. It pins
// manifest.json by hash, so an edited manifest cannot hide an edited file.
type Receipt struct {
	Artifact string `json:"artifact"`
	// ArtifactPath is where the artifact was installed from (absolute), for the command
	// that reinstalls it; "" in receipts of older installs.
	ArtifactPath   string    `json:"artifact_path,omitempty"`
	SHA256         string    `json:"sha256"`
	ManifestSHA256 string    `json:"manifest_sha256"`
	Recipe         string    `json:"recipe"`
	PlanKey        string    `json:"plan_key"`
	InstalledAt    time.Time `json:"installed_at"`
	Epbuild        string    `json:"epbuild"`  // the epbuild that installed it
	BuiltBy        string    `json:"built_by"` // the epbuild that built it (from the manifest)
	Prefix         string    `json:"prefix"`
	// Added is what install put beside the artifact's files: the directory bin/, which
	// env.sh puts on PATH, and bin/epbuild, a copy of the epbuild that installed it
	// (version Epbuild), for verify-install on the nodes. Not in the artifact: its bytes
	// do not depend on which epbuild packed it.
	Added []archive.Entry `json:"added,omitempty"`
}

// Paths install may add to a prefix (Receipt.Added): nothing else is accepted there.
const (
	BinDir     = "bin"
	BinEpbuild = "bin/epbuild"
)

// maxReceiptSize bounds the read of a receipt: install writes well under a KiB.
const maxReceiptSize = 64 << 10

// ReadReceipt reads dir's receipt: a regular file (never read through a symlink), that
// decodes, with every field install writes. A missing one is an fs.ErrNotExist error.
func ReadReceipt(dir string) (*Receipt, error) {
	b, err := readTopFile(dir, ReceiptName, maxReceiptSize)
	if err != nil {
		return nil, err
	}
	p := filepath.Join(dir, ReceiptName)
	var r Receipt
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("decode %s: %w", p, err)
	}
	if why := r.incomplete(); why != "" {
		return nil, fmt.Errorf("%s: %s: not the receipt install writes", p, why)
	}
	return &r, nil
}

// incomplete says which field install always writes is missing or malformed ("" when none).
func (r *Receipt) incomplete() string {
	switch {
	case r.Artifact == "" || strings.ContainsRune(r.Artifact, '/'):
		return fmt.Sprintf("artifact %q is not a file name", r.Artifact)
	case !IsSHA256(r.SHA256):
		return fmt.Sprintf("sha256 %q is not 64 hex digits", r.SHA256)
	case !IsSHA256(r.ManifestSHA256):
		return fmt.Sprintf("manifest_sha256 %q is not 64 hex digits", r.ManifestSHA256)
	case r.Recipe == "" || r.PlanKey == "":
		return "no recipe or plan_key"
	case r.InstalledAt.IsZero():
		return "no installed_at"
	}
	for _, e := range r.Added {
		switch {
		case e.Path == BinDir && e.Type == archive.TypeDir:
		case e.Path == BinEpbuild && e.Type == archive.TypeFile && IsSHA256(e.SHA256):
		default:
			return fmt.Sprintf("added %q (%s) is not what install adds (%s/, %s)", e.Path, e.Type, BinDir, BinEpbuild)
		}
	}
	return ""
}

func IsSHA256(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// Bounds on reading an artifact's manifest before anything is written: the manifest of
// a real install is a few MiB; the entries before it in the archive are decompressed and
// discarded, up to this many times the artifact's size (real artifacts compress 2-20
// times; a bomb compresses thousands of times).
const (
	MaxManifestSize   = 256 << 20
	MaxManifestRatio  = 1000
	MinManifestBudget = 64 << 20
	// tarSlack covers tar headers and padding beyond the declared file bytes.
	TarSlack = 1 << 20
)

// InstallCommand is the command line that installs artifact into prefix, each word
// quoted for a POSIX shell; artifact "" (not known) is written ARTIFACT.
func InstallCommand(artifact, prefix string) string {
	a := "ARTIFACT"
	if artifact != "" {
		a = quote.Shell(artifact)
	}
	return "epbuild install " + a + " --prefix " + quote.Shell(prefix)
}

func FileKind(m fs.FileMode) string {
	switch {
	case m.IsRegular():
		return "regular file"
	case m.IsDir():
		return "directory"
	case m&fs.ModeSymlink != 0:
		return "symlink"
	}
	return "special file (" + m.Type().String() + ")"
}

// readTopFile reads the manifest or the receipt at the top of an install, at most limit
// bytes. It must be a regular file: read through a symlink, an identical copy outside
// the prefix would pass every check of its bytes, and whoever can write that copy
// could rewrite the install's record. A missing file is an fs.ErrNotExist error.
func readTopFile(dir, name string, limit int64) ([]byte, error) {
	p := filepath.Join(dir, name)
	st, err := os.Lstat(p)
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is %s, not the regular file install writes", p, describeTopFile(p, st))
	}
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	// the file opened must be the one looked at: not swapped for a link in between
	if fst, err := f.Stat(); err != nil || !os.SameFile(st, fst) {
		return nil, fmt.Errorf("%s changed while it was read", p)
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", p, err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s is larger than %s: not written by epbuild", p, disk.ByteCount(limit))
	}
	return b, nil
}

func describeTopFile(p string, st fs.FileInfo) string {
	if st.Mode()&fs.ModeSymlink != 0 {
		target, _ := os.Readlink(p)
		return "a symlink (to " + target + ")"
	}
	return "a " + FileKind(st.Mode())
}
