package source

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/epbuild/epbuild/builder/cache"
	"github.com/epbuild/epbuild/builder/source/gitobj"
)

// WriteMirror writes into dir exactly what the given sources need, laid out by URL, for
// carrying to a site without internet: a bare repository per git URL holding the pinned
// commits (shallow: their trees, no history), their refs, and the archive files. It fetches
// through f (its cache, and its mirror or the network). Existing content is kept; a
// repository that already holds a commit is not made shallow at it.
func (f *Fetcher) WriteMirror(ctx context.Context, dir string, gits []Git, archives []Archive) error {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("write mirror %s: %w", dir, err)
	}
	if dir == f.mirror {
		return fmt.Errorf("write mirror %s: it is the mirror this fetcher reads from", dir)
	}
	var gps []*gitPin
	for _, g := range gits {
		p, err := parseGit(g)
		if err != nil {
			return err
		}
		gps = append(gps, p)
	}
	var aps []*archivePin
	for _, a := range archives {
		p, err := parseArchive(a)
		if err != nil {
			return err
		}
		aps = append(aps, p)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("write mirror %s: %w", dir, err)
	}
	for _, p := range gps {
		if err := f.mirrorGit(ctx, dir, p); err != nil {
			return err
		}
	}
	for _, p := range aps {
		if err := f.mirrorArchive(ctx, dir, p); err != nil {
			return err
		}
	}
	return nil
}

func (f *Fetcher) mirrorGit(ctx context.Context, dir string, p *gitPin) error {
	unlock, err := f.cache.Lock(ctx, cache.KindGit, p.key)
	if err != nil {
		return fetchErr(err, "mirror %s", p)
	}
	defer unlock()
	if err := f.fetchGitLocked(ctx, p); err != nil {
		return err
	}
	mdir := filepath.Join(dir, filepath.FromSlash(p.key))
	if err := os.MkdirAll(filepath.Dir(mdir), 0o755); err != nil {
		return fmt.Errorf("mirror %s into %s: %w", p, mdir, err)
	}
	if _, err := os.Stat(filepath.Join(mdir, "HEAD")); err != nil {
		tmp, err := os.MkdirTemp(filepath.Dir(mdir), ".tmp-init-")
		if err != nil {
			return fmt.Errorf("mirror %s into %s: %w", p, mdir, err)
		}
		defer os.RemoveAll(tmp)
		if err := writeBareSkeleton(tmp); err != nil {
			return fmt.Errorf("mirror %s into %s: %w", p, mdir, err)
		}
		if err := os.Rename(tmp, mdir); err != nil {
			return fmt.Errorf("mirror %s into %s: %w", p, mdir, err)
		}
	}
	src, err := gitobj.Open(filepath.Join(f.cache.GitDir(p.key), "objects"))
	if err != nil {
		return fmt.Errorf("mirror %s: %w", p, err)
	}
	defer src.Close()
	have, err := gitobj.Open(filepath.Join(mdir, "objects"))
	if err != nil {
		return fmt.Errorf("mirror %s into %s: %w", p, mdir, err)
	}
	defer have.Close()
	tmp, err := os.MkdirTemp(filepath.Dir(mdir), ".tmp-objects-")
	if err != nil {
		return fmt.Errorf("mirror %s into %s: %w", p, mdir, err)
	}
	defer os.RemoveAll(tmp)
	roots := p.commits()
	for _, r := range p.refs {
		if !containsHash(roots, r.obj) {
			roots = append(roots, r.obj)
		}
	}
	m := newMeter(f.progress, f.log, p.url, "objects", 0)
	shallow, err := gitobj.Copy(ctx, src, tmp, roots, have.Has, nil, m.set)
	m.done()
	if err != nil {
		return fmt.Errorf("mirror %s into %s: %w", p, mdir, err)
	}
	if err := publish(tmp, mdir, shallow, p); err != nil {
		return fmt.Errorf("mirror %s into %s: %w", p, mdir, err)
	}
	return nil
}

func (f *Fetcher) mirrorArchive(ctx context.Context, dir string, p *archivePin) error {
	unlock, err := f.cache.Lock(ctx, cache.KindArchive, p.sha)
	if err != nil {
		return fetchErr(err, "mirror %s", p)
	}
	defer unlock()
	src, err := f.fetchArchiveLocked(ctx, p)
	if err != nil {
		return err
	}
	dst := filepath.Join(dir, filepath.FromSlash(p.key))
	if sum, err := fileSHA256(dst); err == nil && sum == p.sha {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return fmt.Errorf("mirror %s into %s: %w", p, dst, err)
	}
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("mirror %s: %w", p, err)
	}
	defer in.Close()
	out, err := os.CreateTemp(filepath.Dir(dst), ".tmp-"+filepath.Base(dst)+"-")
	if err != nil {
		return fmt.Errorf("mirror %s into %s: %w", p, dst, err)
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		os.Remove(out.Name())
		return fmt.Errorf("mirror %s into %s: %w", p, dst, err)
	}
	if err := out.Chmod(0o644); err != nil {
		out.Close()
		os.Remove(out.Name())
		return fmt.Errorf("mirror %s into %s: %w", p, dst, err)
	}
	return cache.CommitFile(out, dst)
}

func fileSHA256(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
