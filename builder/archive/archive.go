// Package archive unpacks pinned source archives and build artifacts safely, packs a staged
// prefix into a reproducible tar.zst, and hashes trees for the manifest and install checks.
//
// Extraction never writes outside its destination: names are checked lexically, every write
// goes through an os.Root, a symlink extracted earlier is never written through, and the
// tree appears at its destination only when the whole archive was read without error.
package archive

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"
)

// Format names an archive container and its compression.
type Format string

// The formats ExtractFile understands. Pack always writes FormatTarZst.
const (
	FormatTar    Format = "tar"
	FormatTarGz  Format = "tar.gz"
	FormatTarXz  Format = "tar.xz"
	FormatTarZst Format = "tar.zst"
	FormatZip    Format = "zip"
)

// suffixes maps file name endings to formats; longer endings come first so ".tar.gz" wins
// over a hypothetical ".gz".
var suffixes = [...]struct {
	suffix string
	format Format
}{
	{".tar.gz", FormatTarGz},
	{".tgz", FormatTarGz},
	{".tar.xz", FormatTarXz},
	{".txz", FormatTarXz},
	{".tar.zst", FormatTarZst},
	{".tzst", FormatTarZst},
	{".tar", FormatTar},
	{".zip", FormatZip},
}

// DetectFormat picks the format from an archive's file name.
func DetectFormat(name string) (Format, error) {
	lower := strings.ToLower(name)
	for _, s := range suffixes {
		if strings.HasSuffix(lower, s.suffix) {
			return s.format, nil
		}
	}
	return "", fmt.Errorf("unknown archive format for %q: the name must end in .tar.gz, .tgz, .tar.xz, .txz, .tar.zst, .tzst, .tar or .zip, or give the format explicitly", name)
}

func (f Format) valid() bool {
	switch f {
	case FormatTar, FormatTarGz, FormatTarXz, FormatTarZst, FormatZip:
		return true
	}
	return false
}

// Error classes, for errors.Is on an *ExtractError or a Pack error: callers map them to
// "bad input" without parsing messages.
var (
	// ErrUnsafe: an entry would land or point outside the destination, or write through a link.
	ErrUnsafe = errors.New("unsafe archive entry")
	// ErrLimit: MaxBytes or MaxEntries was exceeded.
	ErrLimit = errors.New("archive limit exceeded")
	// ErrCorrupt: the archive is truncated or its bytes are damaged.
	ErrCorrupt = errors.New("archive truncated or corrupt")
	// ErrUnsupported: an entry type that has no place in a source tree or an install.
	ErrUnsupported = errors.New("unsupported archive entry")
	// ErrLayout: the entries do not fit the options (StripComponents without one top directory).
	ErrLayout = errors.New("archive layout does not match the options")
)

// ExtractError says which archive and which entry failed, what was wrong and how to fix it.
type ExtractError struct {
	Archive string // base name of the archive file
	Entry   string // the entry's name as stored; empty when the failure is not at an entry
	Kind    error  // one of the Err* classes above, or nil for I/O errors and cancellation
	Err     error  // what went wrong
	Fix     string // what the user can do about it; may be empty
}

func (e *ExtractError) Error() string {
	var b strings.Builder
	b.WriteString("extract ")
	b.WriteString(e.Archive)
	if e.Entry != "" {
		fmt.Fprintf(&b, ": entry %q", e.Entry)
	}
	b.WriteString(": ")
	b.WriteString(e.Err.Error())
	if e.Fix != "" {
		b.WriteString(" (")
		b.WriteString(e.Fix)
		b.WriteString(")")
	}
	return b.String()
}

func (e *ExtractError) Unwrap() error { return e.Err }

// ExitCode: an archive refused for what it holds (unsafe, corrupt, over a limit) is bad
// input, 2 — it was pinned or handed over as it is; a failure to write is a failed job.
func (e *ExtractError) ExitCode() int {
	if e.Kind != nil {
		return 2
	}
	return 1
}

// Is lets errors.Is(err, ErrUnsafe) and friends match on the error's class.
func (e *ExtractError) Is(target error) bool { return e.Kind != nil && target == e.Kind }

// EntryType is the kind of a tree entry in a PackReport or HashTree result.
type EntryType string

// Entry types. Hard links are not a type of their own: Pack and HashTree see each link as
// the regular file it is.
const (
	TypeFile    EntryType = "file"
	TypeDir     EntryType = "dir"
	TypeSymlink EntryType = "symlink"
)

// Entry describes one path of a tree, as packed or as found on disk. Paths are relative,
// slash-separated, without a leading "./" and without the pack prefix.
type Entry struct {
	Path   string      `json:"path"`
	Type   EntryType   `json:"type"`
	Mode   fs.FileMode `json:"mode"`             // 0755 or 0644 for files, 0755 for dirs, 0777 for symlinks
	Size   int64       `json:"size,omitempty"`   // regular files only
	SHA256 string      `json:"sha256,omitempty"` // lower-case hex, regular files only
	Target string      `json:"target,omitempty"` // symlinks only, verbatim
}

// normalMode is the only mode information an artifact keeps: the exec bit. Everything else
// (group write, setuid, sticky) is either noise or a hazard on the nodes we install to.
func normalMode(t EntryType, perm fs.FileMode) fs.FileMode {
	switch t {
	case TypeDir:
		return 0o755
	case TypeSymlink:
		return 0o777
	}
	if perm&0o111 != 0 {
		return 0o755
	}
	return 0o644
}
