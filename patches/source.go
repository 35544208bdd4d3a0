package patches

import (
	"context"
	"fmt"
	"io"
	"strings"
)

// Upstream serves upstream content by pin. The source layer implements it over
// its cache or mirror; nothing upstream is stored in this repository.
type Upstream interface {
	// Diff returns the git-style unified diff base..head (like `git diff base head`,
	// binary changes included).
	Diff(ctx context.Context, d DiffSpec) ([]byte, error)
	// File returns the bytes of Path at Commit.
	File(ctx context.Context, f FileSpec) ([]byte, error)
}

// DiffSpec names an upstream diff: Repo's Base..Head. Ref, when given, is a ref
// (such as refs/pull/466/head) that must point at Head.
type DiffSpec struct {
	Repo string `yaml:"repo" json:"repo"`
	Base string `yaml:"base" json:"base"`
	Head string `yaml:"head" json:"head"`
	Ref  string `yaml:"ref,omitempty" json:"ref,omitempty"`
}

// FileSpec names a file of an upstream repository at a commit.
type FileSpec struct {
	Repo   string `yaml:"repo" json:"repo"`
	Commit string `yaml:"commit" json:"commit"`
	Path   string `yaml:"path" json:"path"`
}

func (f FileSpec) String() string { return fmt.Sprintf("%s@%s:%s", f.Repo, short(f.Commit), f.Path) }

func short(c string) string {
	if len(c) > 7 {
		return c[:7]
	}
	return c
}

// body is a patch's bytes, checked against their pin: in memory (upstream content, a
// replacement file) or a file of the set, read as it is applied.
type body struct {
	digest string
	data   string
	open   func() (io.Reader, func() error, error) // a file of the set; nil: data
}

// reader reads the body; done, called after the last read, says whether it matched its
// pin.
func (b body) reader() (r io.Reader, done func() error, err error) {
	if b.open != nil {
		return b.open()
	}
	return strings.NewReader(b.data), func() error { return nil }, nil
}

// content fetches the bytes a patch applies (the diff, or the replacement file) and
// checks them against their pin; a file of the set is checked as it is read.
func (s *Set) content(ctx context.Context, p Patch, up Upstream) (body, error) {
	kind := p.Kind()
	if kind == KindFile {
		return body{digest: p.SHA256, open: func() (io.Reader, func() error, error) { return s.openOwnFile(ctx, p) }}, nil
	}
	if up == nil {
		return body{}, fmt.Errorf("patch %s: %s needs an upstream source, and none was given", p.Name, kind)
	}
	switch kind {
	case KindUpstreamDiff:
		d := *p.UpstreamDiff
		data, err := up.Diff(ctx, d)
		if err != nil {
			return body{}, fmt.Errorf("patch %s: diff %s %s..%s: %w", p.Name, d.Repo, short(d.Base), short(d.Head), err)
		}
		if len(data) == 0 {
			return body{}, fmt.Errorf("patch %s: diff %s %s..%s is empty", p.Name, d.Repo, short(d.Base), short(d.Head))
		}
		return body{digest: sha256Hex(data), data: string(data)}, nil
	case KindUpstreamFile, KindReplace:
		var spec FileSpec
		var want string
		if kind == KindReplace {
			spec, want = p.Replace.Spec(), p.Replace.SHA256
		} else {
			spec, want = p.UpstreamFile.Spec(), p.UpstreamFile.SHA256
		}
		data, err := up.File(ctx, spec)
		if err != nil {
			return body{}, fmt.Errorf("patch %s: fetch %s: %w", p.Name, spec, err)
		}
		got := sha256Hex(data)
		if got != want {
			return body{}, &PinError{Patch: p.Name, What: spec.String(), Want: want, Got: got}
		}
		return body{digest: got, data: string(data)}, nil
	}
	return body{}, fmt.Errorf("patch %s: no source (give exactly one of file, upstream-diff, upstream-file, replace)", p.Name)
}
