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
// new pack in packDir and written to its files. A blob stored as a delta on another object
// of the new pack is copied as that delta, not compressed again. Blobs that cached has are read from it
// and not copied; the blobs of other roots that the checkout does not use are copied
// after it. Blobs over inlineLimit, streamed rather than held, are inflated a second time
// to be written.
//
// It returns the shallow commits, as copyObjects does, and the written worktree, whose
// index entries hold the files' stat data.
func copyCheckout(ctx context.Context, src, cached *objectDB, packDir string, roots []plumbing.Hash, commit plumbing.Hash, root string, m *meter) ([]plumbing.Hash, *worktree, error) {
	defer m.done()
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
	packed := make(map[plumbing.Hash]bool)  // what the new pack holds: deltas on them are kept
	for _, j := range walked.head {
		packed[j.h] = true
	}
	for h, ok := blobs.pop(); ok; h, ok = blobs.pop() {
		pending[h], packed[h] = true, true
	}
	inPack := func(h plumbing.Hash) bool { return packed[h] }
	reader := func() *objReader {
		r := src.reader()
		r.inPack = inPack
		return r
	}

	pw, err := newPackWriter(packDir, walked.total)
	if err != nil {
		return nil, nil, err
	}
	sink := &packSink{pw: pw, m: m}
	for _, j := range walked.head {
		if err := sink.add(j); err != nil {
			pw.abort()
			return nil, nil, err
		}
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
		return &copySource{src: reader(), cached: dbSource{cached.reader()}, take: take, sink: sink}
	})
	if err == nil {
		// The blobs of other roots (extra refs), not in the checkout.
		s := &copySource{src: reader(), sink: sink}
		for h := range pending {
			if err = s.copy(h); err != nil {
				break
			}
		}
	}
	if err != nil {
		pw.abort()
		return nil, nil, err
	}
	if _, _, err := pw.finish(); err != nil {
		return nil, nil, err
	}
	return walked.commits, wt, nil
}

// packSink appends the objects that a checkout's workers read to one pack, each in the
// worker that read it: handing each blob to a writer goroutine cost a wake-up per blob,
// more than appending it (a copy, a CRC and the pack's SHA-1 over its packed bytes).
type packSink struct {
	mu  sync.Mutex
	pw  *packWriter
	m   *meter
	err error // the first failure; the pack is then abandoned
}

func (s *packSink) add(j packJob) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil {
		s.err = s.pw.addJob(j)
		s.m.set(s.m.cur.Load()+1, -1)
	}
	return s.err
}

// copySource serves a checkout's blobs while copying them: a blob taken from the copy's
// list is read from the mirror (checked against its id) and appended to the new pack; a
// cached one is read from the cache; one taken already (two paths, one content) is read
// again.
type copySource struct {
	src    *objReader
	cached dbSource
	take   func(plumbing.Hash) bool
	sink   *packSink
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
	if err := s.sink.add(j); err != nil {
		return nil, nil, err
	}
	return data, nil, nil
}

// copy appends the blob h to the pack, streaming it when it is large.
func (s *copySource) copy(h plumbing.Hash) error {
	if size, ok := s.src.wholeSize(h); ok && size > inlineLimit {
		// Large: streamed into the writer, which hashes it on the way.
		t, size, rd, err := s.src.stream(h)
		if err != nil {
			return fmt.Errorf("object %s: %w", h, err)
		}
		return s.sink.add(packJob{h: h, t: t, size: size, r: rd})
	}
	j, _, err := s.src.packJob(h)
	if err != nil {
		return fmt.Errorf("object %s: %w", h, err)
	}
	return s.sink.add(j)
}
