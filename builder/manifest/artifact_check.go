package manifest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/epbuild/epbuild/builder/archive"
	"github.com/epbuild/epbuild/builder/disk"
	"github.com/epbuild/epbuild/builder/quote"
	"github.com/epbuild/epbuild/builder/toolchain"
	"github.com/epbuild/epbuild/recipes/userfile"
)

// The artifact check: install's checks on an artifact, made as the artifact streams by.
// One engine, archive's extractor, reads the archive for both install (which extracts
// it) and the check that writes nothing (push, pull): the same rules on names, links,
// types and limits, each regular file hashed as its data passes, and one comparison of
// the tree it yields against the manifest the artifact carries (checkTree).

// CheckArtifact runs install's checks on the artifact at art without installing it, in
// one read of the file that writes nothing: its sha256 against ARTIFACT.sha256 when
// there is one, and every entry's type, mode, size and sha256 against the manifest it
// carries (CheckArtifactStream). It returns the manifest, its bytes and the artifact's
// sha256; a failed check is a *BadArtifactError (exit 2). Exporters of the artifact (the
// OCI push and pull) call it, so that there is one artifact check.
func CheckArtifact(ctx context.Context, art string) (*Manifest, []byte, string, error) {
	// opened first, then checked: a FIFO put there is refused, not waited on
	f, st, err := userfile.Open(art)
	if err != nil {
		return nil, nil, "", &BadArtifactError{Artifact: art, Err: err}
	}
	defer f.Close()
	want, err := SumBeside(art)
	if err != nil {
		return nil, nil, "", err
	}
	h := sha256.New()
	m, raw, err := CheckArtifactStream(ctx, io.TeeReader(f, h), art, st.Size())
	if err != nil && (want == "" || ctx.Err() != nil) {
		return nil, nil, "", err
	}
	// the rest of the file, if the check stopped early: a damaged artifact is best named
	// by its .sha256
	if _, cerr := io.CopyBuffer(h, f, make([]byte, 256<<10)); cerr != nil && err == nil {
		return nil, nil, "", &BadArtifactError{Artifact: art, Err: cerr}
	}
	sum := hex.EncodeToString(h.Sum(nil))
	if want != "" && sum != want {
		return nil, nil, "", SumMismatch(art, sum, want)
	}
	if err != nil {
		return nil, nil, "", err
	}
	return m, raw, sum, nil
}

// CheckArtifactStream is CheckArtifact of an artifact as it arrives (a download): r is
// read once, to its end, and nothing is written. size is the artifact's size (it bounds
// how far the manifest may lie into the archive); art names it in errors. The caller
// checks the bytes' sha256.
//
// The entries before the manifest are bounded by maxManifestRatio times size, the whole
// archive by what the manifest declares, and every entry must match the manifest, as
// install's extraction requires (stageArtifact); memory is bounded by the number of
// entries, not by their size.
func CheckArtifactStream(ctx context.Context, r io.Reader, art string, size int64) (*Manifest, []byte, error) {
	var (
		m   *Manifest
		raw []byte
	)
	hook := &archive.MemberHook{Name: ManifestName, MaxSize: MaxManifestSize, Found: func(b []byte) (archive.Limits, error) {
		dm, err := DecodeManifest(b, ManifestName)
		if err != nil {
			return archive.Limits{}, &BadArtifactError{Artifact: art, Err: fmt.Errorf("not an epbuild artifact: %w", err)}
		}
		m, raw = dm, bytes.Clone(b)
		return archive.Limits{MaxBytes: DeclaredBytes(m, raw), MaxEntries: MaxEntries(m)}, nil
	}}
	opts := archive.ExtractOptions{Format: archive.FormatTarZst, MaxBytes: ManifestBudget(size), Member: hook}
	rep, err := archive.Scan(ctx, r, filepath.Base(art), opts)
	if err != nil {
		return nil, nil, ReadError(ctx, art, err, m, raw)
	}
	if m == nil {
		return nil, nil, &BadArtifactError{Artifact: art, Err: fmt.Errorf("not an epbuild artifact: it holds no %s", ManifestName)}
	}
	// what follows the archive's end, so that the whole stream was read (and hashed)
	if _, err := io.Copy(io.Discard, r); err != nil {
		return nil, nil, ReadError(ctx, art, err, m, raw)
	}
	if err := CheckTree(art, m, raw, rep.Tree); err != nil {
		return nil, nil, err
	}
	return m, raw, nil
}

// manifestBudget is how many bytes of entries may come before the manifest in an
// artifact of size bytes: a bomb without a manifest is refused cheaply.
func ManifestBudget(size int64) int64 {
	return max(MinManifestBudget, min(archive.DefaultMaxBytes, MaxManifestRatio*size))
}

// maxEntries is how many entries an artifact of manifest m may hold: its files, and a
// margin for the top directory and the generated files.
func MaxEntries(m *Manifest) int { return len(m.Files) + 16 }

// readError explains an error of reading an artifact, before its manifest was found (m
// nil) or after.
func ReadError(ctx context.Context, art string, err error, m *Manifest, raw []byte) error {
	var be *BadArtifactError
	var xe *archive.ExtractError
	switch {
	case errors.As(err, &be):
		return be
	case ctx.Err() != nil:
		return fmt.Errorf("check %s: %w", art, ctx.Err())
	case errors.Is(err, archive.ErrLimit) && m == nil:
		return &BadArtifactError{Artifact: art, Err: fmt.Errorf("%w; an epbuild artifact carries its manifest within %d times its own size", err, MaxManifestRatio)}
	case errors.Is(err, archive.ErrLimit):
		return &BadArtifactError{Artifact: art, Err: fmt.Errorf("it holds more than its manifest declares (%d files, %s), extraction stopped: %w",
			CountFiles(m), disk.ByteCount(DeclaredBytes(m, raw)-TarSlack), err)}
	case errors.As(err, &xe) && xe.Kind != nil:
		return &BadArtifactError{Artifact: art, Err: err}
	case disk.IsNoSpace(err):
		return err // the caller says where and how much
	}
	// an I/O error here is as likely the archive's (a truncated zstd frame) as ours;
	// nothing was installed either way
	return &BadArtifactError{Artifact: art, Err: err}
}

// checkTree compares the tree an artifact extracts to (as archive lists it, every file
// hashed) with the manifest it carries: the manifest.json there must be the one read
// first, and every entry must match the manifest's, as VerifyFiles requires of an
// installed tree. A difference is a *BadArtifactError listing the first ten.
func CheckTree(art string, m *Manifest, raw []byte, tree []archive.Entry) error {
	rawSum := SHA256Hex(raw)
	same := false
	for _, e := range tree {
		if e.Path == ManifestName {
			same = e.Type == archive.TypeFile && e.SHA256 == rawSum
			break
		}
	}
	if !same {
		return &BadArtifactError{Artifact: art, Err: fmt.Errorf("it holds more than one %s, and they differ", ManifestName)}
	}
	problems := treeProblems(tree, m.Files)
	if len(problems) == 0 {
		return nil
	}
	const show = 10
	var lines []string
	for i, p := range problems {
		if i == show {
			lines = append(lines, fmt.Sprintf("... and %d more", len(problems)-show))
			break
		}
		lines = append(lines, fmt.Sprintf("%s %s: expected %s, found %s", p.Kind, p.Path, toolchain.OrNone(p.Expected), toolchain.OrNone(p.Found)))
	}
	return &BadArtifactError{Artifact: art, Err: fmt.Errorf("%d entries differ from its manifest:\n  - %s", len(problems), strings.Join(lines, "\n  - "))}
}

// treeProblems is VerifyFiles' judgement of a tree listed in memory: every entry against
// the manifest's (type, exact mode, symlink target, size, then sha256), every entry the
// manifest lacks (below a directory that is wrong or extra, nothing more is reported),
// every manifest entry missing. manifest.json and the receipt at the top are not
// entries: only their type and mode are checked. Bytecode in __pycache__ that the
// manifest does not list is extra: nothing has run Python here.
func treeProblems(tree, want []archive.Entry) []FileProblem {
	byPath := make(map[string]*archive.Entry, len(want))
	for i := range want {
		byPath[want[i].Path] = &want[i]
	}
	seen := make(map[string]bool, len(want))
	skipped := map[string]bool{} // directories not looked into
	under := func(p string) bool {
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			if skipped[d] {
				return true
			}
		}
		return false
	}
	var problems []FileProblem
	add := func(p FileProblem) { problems = append(problems, p) }
	for _, e := range tree {
		if len(skipped) > 0 && under(e.Path) {
			continue
		}
		if e.Path == ManifestName || e.Path == ReceiptName {
			switch {
			case e.Type != archive.TypeFile:
				add(FileProblem{Path: e.Path, Kind: ProblemType, Expected: string(archive.TypeFile), Found: describeListed(e)})
			case e.Mode.Perm() != TopFileMode:
				add(FileProblem{Path: e.Path, Kind: ProblemMode, Expected: fmt.Sprintf("mode %04o", uint32(TopFileMode)), Found: fmt.Sprintf("mode %04o", uint32(e.Mode.Perm()))})
			}
			if e.Type == archive.TypeDir {
				skipped[e.Path] = true
			}
			continue
		}
		w := byPath[e.Path]
		if w == nil {
			switch {
			case e.Type == archive.TypeDir && path.Base(e.Path) == "__pycache__":
			case e.Type == archive.TypeFile && path.Base(path.Dir(e.Path)) == "__pycache__" && strings.HasSuffix(e.Path, ".pyc"):
				add(FileProblem{Path: e.Path, Kind: ProblemExtra, Found: "Python bytecode its manifest does not list"})
			default:
				add(FileProblem{Path: e.Path, Kind: ProblemExtra, Found: describeListed(e)})
				if e.Type == archive.TypeDir {
					skipped[e.Path] = true
				}
			}
			continue
		}
		seen[e.Path] = true
		if e.Type != w.Type {
			add(FileProblem{Path: e.Path, Kind: ProblemType, Expected: string(w.Type), Found: describeListed(e)})
			if e.Type == archive.TypeDir {
				skipped[e.Path] = true
			}
			continue
		}
		if e.Type != archive.TypeSymlink && e.Mode.Perm() != w.Mode.Perm() {
			add(FileProblem{Path: e.Path, Kind: ProblemMode, Expected: fmt.Sprintf("mode %04o", uint32(w.Mode.Perm())), Found: fmt.Sprintf("mode %04o", uint32(e.Mode.Perm()))})
		}
		switch e.Type {
		case archive.TypeSymlink:
			if e.Target != w.Target {
				add(FileProblem{Path: e.Path, Kind: ProblemChanged, Expected: "symlink to " + w.Target, Found: "symlink to " + e.Target})
			}
		case archive.TypeFile:
			switch {
			case e.Size != w.Size:
				add(FileProblem{Path: e.Path, Kind: ProblemChanged, Expected: DescribeContent(w.Size, w.SHA256), Found: SizeChange(e.Size, w.Size)})
			case e.SHA256 != w.SHA256:
				add(FileProblem{Path: e.Path, Kind: ProblemChanged, Expected: DescribeContent(w.Size, w.SHA256), Found: DescribeContent(e.Size, e.SHA256)})
			}
		}
	}
	for _, e := range want {
		if !seen[e.Path] {
			add(FileProblem{Path: e.Path, Kind: ProblemMissing, Expected: string(e.Type)})
		}
	}
	SortProblems(problems)
	return problems
}

// describeListed says what a listed entry is, as describeEntry says it of a file on disk.
func describeListed(e archive.Entry) string {
	switch e.Type {
	case archive.TypeFile:
		return fmt.Sprintf("file, %d bytes", e.Size)
	case archive.TypeDir:
		return "directory"
	}
	return "symlink to " + e.Target
}

// SumBeside reads ARTIFACT.sha256: "" when there is none; a file that holds no sha256,
// or is not a small regular file (a FIFO, /dev/zero behind a symlink: read whole it
// would hang or exhaust memory), is a *BadArtifactError naming it and the fix.
func SumBeside(art string) (string, error) {
	side := art + ".sha256"
	b, err := userfile.ReadFile(side, userfile.SumLimit)
	var nr *userfile.NotRegularError
	var tl *userfile.TooLargeError
	switch {
	case errors.Is(err, os.ErrNotExist):
		return "", nil
	case errors.As(err, &nr):
		nr.Fix = sumFix(art)
	case errors.As(err, &tl):
		tl.Fix = "a .sha256 is one line of sha256sum; " + sumFix(art)
	}
	if err != nil {
		return "", &BadArtifactError{Artifact: art, Err: err}
	}
	f := strings.Fields(string(b))
	if len(f) == 0 || !IsSHA256(strings.ToLower(f[0])) {
		return "", &BadArtifactError{Artifact: art, Err: fmt.Errorf("%s.sha256 holds no sha256", filepath.Base(art))}
	}
	return strings.ToLower(f[0]), nil
}

// sumFix says how to repair an artifact's .sha256.
func sumFix(art string) string {
	name := quote.Shell(filepath.Base(art))
	return "remove it, or write it again beside the artifact with: sha256sum " + name + " > " + name + ".sha256"
}

// sumMismatch is an artifact whose bytes are not what its .sha256 says.
func SumMismatch(art, sum, want string) error {
	return &BadArtifactError{Artifact: art, Err: fmt.Errorf("its sha256 is %s, %s.sha256 says %s: truncated or damaged in transfer; copy it again",
		sum, filepath.Base(art), want)}
}
