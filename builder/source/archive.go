package source

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/epbuild/epbuild/builder/archive"
	"github.com/epbuild/epbuild/builder/cache"
)

type archivePin struct {
	url, key, sha string
}

func (p *archivePin) String() string { return p.url }

func parseArchive(a Archive) (*archivePin, error) {
	key, err := ArchiveKey(a.URL)
	if err != nil {
		return nil, err
	}
	sha := strings.ToLower(a.SHA256)
	if len(sha) != 64 || !hexRE.MatchString(sha) {
		return nil, badPin(nil, "archive %s: sha256 %q is not 64 hex digits: pin the archive's sha256 (sha256sum prints it)", a.URL, a.SHA256)
	}
	if a.Strip < 0 {
		return nil, badPin(nil, "archive %s: strip %d is negative", a.URL, a.Strip)
	}
	return &archivePin{url: a.URL, key: key, sha: sha}, nil
}

// FetchArchive brings the archive into the cache and returns its path there. The bytes are
// hashed as they arrive into a temp file and renamed into place only when the sha256
// matches the pin.
func (f *Fetcher) FetchArchive(ctx context.Context, a Archive) (string, error) {
	p, err := parseArchive(a)
	if err != nil {
		return "", err
	}
	unlock, err := f.cache.Lock(ctx, cache.KindArchive, p.sha)
	if err != nil {
		return "", fetchErr(err, "fetch %s", p)
	}
	defer unlock()
	return f.fetchArchiveLocked(ctx, p)
}

// fetchArchiveLocked is FetchArchive with the entry's lock held.
func (f *Fetcher) fetchArchiveLocked(ctx context.Context, p *archivePin) (string, error) {
	dst := f.cache.ArchivePath(p.sha)
	if _, err := os.Stat(dst); err == nil {
		return dst, f.cache.Touch(cache.KindArchive, p.sha, p.url)
	}
	src, size, where, err := f.openArchive(ctx, p)
	if err != nil {
		return "", err
	}
	defer src.Close()
	tmp, err := f.cache.CreateTemp(cache.KindArchive, p.sha)
	if err != nil {
		return "", fetchErr(err, "fetch %s", p)
	}
	committed := false
	defer func() {
		if !committed {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	h := sha256.New()
	m := newMeter(f.progress, f.log, path.Base(p.key), "B", size)
	n, err := io.Copy(io.MultiWriter(tmp, h, m), ctxReader{ctx, src})
	m.done()
	if err != nil {
		return "", fetchErr(err, "fetch %s: read %s after %d bytes", p, where, n)
	}
	if size >= 0 && n != size {
		return "", fetchErr(nil, "fetch %s: %s ended after %d of %d bytes", p, where, n, size)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != p.sha {
		return "", badPin(nil, "fetch %s: sha256 mismatch: expected %s, got %s (%d bytes from %s): fix the pin if upstream changed the file on purpose", p, p.sha, got, n, where)
	}
	committed = true
	if err := cache.CommitFile(tmp, dst); err != nil {
		return "", fetchErr(err, "fetch %s", p)
	}
	f.log.Debug("fetched", "source", p.url, "cache", dst)
	return dst, f.cache.Touch(cache.KindArchive, p.sha, p.url)
}

// openArchive opens the archive's bytes at the mirror or the URL; size is -1 if unknown.
func (f *Fetcher) openArchive(ctx context.Context, p *archivePin) (io.ReadCloser, int64, string, error) {
	if f.mirror != "" {
		mp := filepath.Join(f.mirror, filepath.FromSlash(p.key))
		r, err := os.Open(mp)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, 0, "", fetchErr(nil, "fetch %s: no mirror entry: looked for %s (write it with `epbuild mirror`)", p, mp)
		}
		if err != nil {
			return nil, 0, "", fetchErr(err, "fetch %s from the mirror", p)
		}
		fi, err := r.Stat()
		if err != nil || !fi.Mode().IsRegular() {
			r.Close()
			return nil, 0, "", fetchErr(err, "fetch %s: mirror entry %s is not a regular file", p, mp)
		}
		return r, fi.Size(), mp, nil
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.url, nil)
	if err != nil {
		return nil, 0, "", badPin(err, "fetch %s", p)
	}
	resp, err := f.http.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, 0, "", fetchErr(err, "fetch %s", p)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, 0, "", fetchErr(nil, "fetch %s: HTTP %s", p, resp.Status)
	}
	return resp.Body, resp.ContentLength, p.url, nil
}

// ctxReader stops a copy when ctx is done (a file read is not interrupted by ctx).
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(b []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(b)
}

// ExtractArchive fetches the archive if needed and unpacks it into dest (which must not
// exist), dropping a.Strip leading components. dest appears complete or not at all.
func (f *Fetcher) ExtractArchive(ctx context.Context, a Archive, dest string) error {
	p, err := parseArchive(a)
	if err != nil {
		return err
	}
	format, err := archive.DetectFormat(path.Base(p.key))
	if err != nil {
		return badPin(err, "extract %s", p)
	}
	// Hold the entry's lock while reading too, so that a concurrent gc cannot remove it.
	unlock, err := f.cache.Lock(ctx, cache.KindArchive, p.sha)
	if err != nil {
		return fetchErr(err, "extract %s", p)
	}
	defer unlock()
	file, err := f.fetchArchiveLocked(ctx, p)
	if err != nil {
		return err
	}
	if _, err := archive.ExtractFile(ctx, file, dest, archive.ExtractOptions{Format: format, StripComponents: a.Strip}); err != nil {
		return fmt.Errorf("extract %s (sha256 %s) into %s: %w", p, p.sha, dest, err)
	}
	return nil
}
