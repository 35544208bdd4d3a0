package source

import (
	"context"
	"fmt"
	"io"
	"sync"

	"github.com/go-git/go-git/v5/plumbing"
)

// copyCheckout is copyObjects and a checkout of commit into root in one pass: the trees are
// walked (the pack's objects counted and the checkout planned), then the checkout's
// workers write the tree, each blob inflated once: checked against its id, appended to the
// new pack in packDir and written to its files. Blobs that cached has are read from it
// and not copied; the blobs of other roots that the checkout does not use are copied
// after it. Blobs over inlineLimit, streamed rather than held, are inflated a second time
// to be written.
//
// It returns the shallow commits, as copyObjects does, and the written worktree, whose
// index entries hold the files' stat data.
func copyCheckout(ctx context.Context, src, cached *objectDB, packDir string, roots []plumbing.Hash, commit plumbing.Hash, root string, m *meter) ([]plumbing.Hash, *worktree, error) {
	defer m.done()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	blobs := newHashQueue()
	walked, err := walkObjects(ctx, src.reader(), roots, nil, cached.packed, blobs)
	blobs.close()
	if err != nil {
		return nil, nil, err
	}
	wt, err := planWorktree(ctx, src.reader(), root, commit)
	if err != nil {
		return nil, nil, err
	}
	m.set(0, int64(walked.total))
	pending := make(map[plumbing.Hash]bool) // blobs to copy, until one is taken
	for h, ok := blobs.pop(); ok; h, ok = blobs.pop() {
		pending[h] = true
	}

	pw, err := newPackWriter(packDir, walked.total)
	if err != nil {
		return nil, nil, err
	}
	jobs := make(chan packJob, 64)
	werr := make(chan error, 1)
	go func() {
		var err error
		for j := range jobs {
			if err == nil {
				if err = pw.addJob(j); err != nil {
					cancel()
				}
				m.set(m.cur.Load()+1, -1)
			}
			if j.done != nil {
				close(j.done)
			}
		}
		werr <- err
	}()
	for _, j := range walked.head {
		jobs <- j
	}
	var mu sync.Mutex
	take := func(h plumbing.Hash) bool {
		mu.Lock()
		defer mu.Unlock()
		if pending[h] {
			delete(pending, h)
			return true
		}
		return false
	}
	err = wt.write(ctx, func() blobSource {
		return &copySource{ctx: ctx, src: src.reader(), cached: dbSource{cached.reader()}, take: take, jobs: jobs}
	})
	if err == nil {
		// The blobs of other roots (extra refs), not in the checkout.
		s := &copySource{ctx: ctx, src: src.reader(), jobs: jobs}
		for h := range pending {
			if err = s.copy(h); err != nil {
				break
			}
		}
	}
	close(jobs)
	if err = firstErr([]error{<-werr, err}); err != nil {
		pw.abort()
		return nil, nil, err
	}
	if _, _, err := pw.finish(); err != nil {
		return nil, nil, err
	}
	return walked.commits, wt, nil
}

// copySource serves a checkout's blobs while copying them: a blob taken from the copy's
// list is read from the mirror (checked against its id) and sent to the pack writer; a
// cached one is read from the cache; one taken already (two paths, one content) is read
// again.
type copySource struct {
	ctx    context.Context
	src    *objReader
	cached dbSource
	take   func(plumbing.Hash) bool
	jobs   chan<- packJob
}

func (s *copySource) blob(h plumbing.Hash) ([]byte, io.Reader, error) {
	if s.cached.r != nil && s.cached.r.db.packed(h) {
		return s.cached.blob(h)
	}
	if !s.take(h) {
		return dbSource{s.src}.blob(h)
	}
	if size, ok := s.src.wholeSize(h); ok && size > inlineLimit {
		if err := s.copy(h); err != nil {
			return nil, nil, err
		}
		return dbSource{s.src}.blob(h)
	}
	j, data, err := s.src.packJob(h)
	if err == nil && j.t != plumbing.BlobObject {
		err = fmt.Errorf("a %s, not a blob", j.t)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("object %s: %w", h, err)
	}
	if err := s.send(j); err != nil {
		return nil, nil, err
	}
	return data, nil, nil
}

// copy sends the blob h to the pack writer, streaming it when it is large.
func (s *copySource) copy(h plumbing.Hash) error {
	if size, ok := s.src.wholeSize(h); ok && size > inlineLimit {
		// Large: streamed into the writer, which hashes it on the way.
		t, size, rd, err := s.src.stream(h)
		if err != nil {
			return fmt.Errorf("object %s: %w", h, err)
		}
		j := packJob{h: h, t: t, size: size, r: rd, done: make(chan struct{})}
		if err := s.send(j); err != nil {
			return err
		}
		<-j.done
		return nil
	}
	j, _, err := s.src.packJob(h)
	if err != nil {
		return fmt.Errorf("object %s: %w", h, err)
	}
	return s.send(j)
}

func (s *copySource) send(j packJob) error {
	select {
	case s.jobs <- j:
		return nil
	case <-s.ctx.Done():
		return s.ctx.Err()
	}
}
