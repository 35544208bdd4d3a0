package source

import (
	"context"
	"fmt"
	"io"
	"sync"

	"github.com/epbuild/epbuild/builder/source/gitobj"
	"github.com/go-git/go-git/v5/plumbing"
)

// copyCheckout is copyObjects and a checkout of commit into root in one pass: the trees are
// walked (the pack's objects counted and the checkout planned), then the checkout's
// workers write the tree, each blob inflated once: checked against its id, appended to the
// new pack in packDir and written to its files. A blob stored as a delta on another object
// of the new pack is copied as that delta, not compressed again. Blobs that cached has are read from it
// and not copied; the blobs of other roots that the checkout does not use are copied
// after it. Blobs over gitobj.InlineLimit, streamed rather than held, are inflated a second time
// to be written.
//
// It returns the shallow commits, as copyObjects does, and the written worktree, whose
// index entries hold the files' stat data.
func copyCheckout(ctx context.Context, src, cached *gitobj.DB, packDir string, roots []plumbing.Hash, commit plumbing.Hash, root string, m *meter) ([]plumbing.Hash, *worktree, error) {
	defer m.done()
	blobs := gitobj.NewQueue()
	walked, err := gitobj.Walk(ctx, src.Reader(), roots, nil, cached.Packed, blobs)
	blobs.Close()
	if err != nil {
		return nil, nil, err
	}
	wt, err := planWorktree(ctx, src.Reader(), root, commit)
	if err != nil {
		return nil, nil, err
	}
	m.set(0, int64(walked.Total))
	pending := make(map[plumbing.Hash]bool) // blobs to copy, until one is taken
	packed := make(map[plumbing.Hash]bool)  // what the new pack holds: deltas on them are kept
	for _, j := range walked.Head {
		packed[j.Hash] = true
	}
	for h, ok := blobs.Pop(); ok; h, ok = blobs.Pop() {
		pending[h], packed[h] = true, true
	}
	inPack := func(h plumbing.Hash) bool { return packed[h] }
	reader := func() *gitobj.Reader {
		r := src.Reader()
		r.KeepDeltas(inPack)
		return r
	}

	pw, err := gitobj.NewPackWriter(packDir, walked.Total)
	if err != nil {
		return nil, nil, err
	}
	sink := &packSink{pw: pw, m: m}
	for _, j := range walked.Head {
		if err := sink.add(j); err != nil {
			pw.Abort()
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
		return &copySource{src: reader(), cached: dbSource{cached.Reader()}, take: take, sink: sink}
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
		pw.Abort()
		return nil, nil, err
	}
	if _, _, err := pw.Finish(); err != nil {
		return nil, nil, err
	}
	return walked.Commits, wt, nil
}

// packSink appends the objects that a checkout's workers read to one pack, each in the
// worker that read it: handing each blob to a writer goroutine cost a wake-up per blob,
// more than appending it (a copy, a CRC and the pack's SHA-1 over its packed bytes).
type packSink struct {
	mu  sync.Mutex
	pw  *gitobj.PackWriter
	m   *meter
	err error // the first failure; the pack is then abandoned
}

func (s *packSink) add(j gitobj.Job) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil {
		s.err = s.pw.Add(j)
		s.m.set(s.m.cur.Load()+1, -1)
	}
	return s.err
}

// copySource serves a checkout's blobs while copying them: a blob taken from the copy's
// list is read from the mirror (checked against its id) and appended to the new pack; a
// cached one is read from the cache; one taken already (two paths, one content) is read
// again.
type copySource struct {
	src    *gitobj.Reader
	cached dbSource
	take   func(plumbing.Hash) bool
	sink   *packSink
}

func (s *copySource) blob(h plumbing.Hash) ([]byte, io.Reader, error) {
	if s.cached.r != nil && s.cached.r.DB().Packed(h) {
		return s.cached.blob(h)
	}
	if !s.take(h) {
		return dbSource{s.src}.blob(h)
	}
	if j, ok, err := s.src.StreamJob(h); ok {
		if err == nil {
			err = s.sink.add(j)
		}
		if err != nil {
			return nil, nil, err
		}
		return dbSource{s.src}.blob(h)
	}
	j, data, err := s.src.Job(h)
	if err == nil && j.Type != plumbing.BlobObject {
		err = fmt.Errorf("a %s, not a blob", j.Type)
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
	if j, ok, err := s.src.StreamJob(h); ok {
		if err != nil {
			return err
		}
		return s.sink.add(j)
	}
	j, _, err := s.src.Job(h)
	if err != nil {
		return fmt.Errorf("object %s: %w", h, err)
	}
	return s.sink.add(j)
}
