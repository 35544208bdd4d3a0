package gitobj

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
)

// Copy packs the closure of roots (tags, commits with their whole trees but no
// parents) from src into a new pack in packDir and returns the commits, which are the
// shallow boundary of the repository the pack goes to. Tags and commits for which skip is
// true are taken as present already, closure included; so are trees and blobs for which
// have is true (the destination holds whole closures: the cache does, a partial clone
// serving as a mirror does not).
//
// Objects stored whole in src's packs are copied as they are packed there (their content
// inflated and hashed to check it, but not compressed again); others (deltas, loose
// objects) are written whole. This goroutine walks the trees and hands the blobs it finds
// to copyReaders goroutines as it goes; one writer appends to the pack what they send,
// holding it until the walk has counted the objects for the pack's header.
//
// progress hears the count of objects written and, once the walk has counted them, the
// total (a total < 0: not known yet).
func Copy(ctx context.Context, src *DB, packDir string, roots []plumbing.Hash, skip, have func(plumbing.Hash) bool, progress func(written, total int64)) ([]plumbing.Hash, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	jobs := make(chan Job, 64)
	walked := make(chan Walked, 1)
	var pw *PackWriter // the writer's until werr is received
	var written int64
	werr := make(chan error, 1)
	go func() {
		var err error
		var held []Job // what the readers sent before the walk ended
		heldBytes := 0
		add := func(j Job) { // or drop it, once the walk has failed
			if err == nil && pw != nil {
				err = pw.Add(j)
				written++
				progress(written, -1)
			}
			if j.done != nil {
				close(j.done) // a reader waits on it, whether j was written or not
			}
		}
		open, walkc := true, walked
		for open || walkc != nil {
			var in chan Job // nil, not read, while enough is held and the walk goes on
			if open && (walkc == nil || heldBytes <= copyHoldBytes) {
				in = jobs
			}
			select {
			case w := <-walkc:
				walkc = nil
				if w.Total > 0 {
					if pw, err = NewPackWriter(packDir, w.Total); err != nil {
						cancel()
					}
				}
				for _, j := range append(w.Head, held...) {
					add(j)
				}
				held = nil
			case j, ok := <-in:
				switch {
				case !ok:
					open = false
				case walkc != nil:
					held = append(held, j)
					heldBytes += len(j.raw)
				default:
					add(j)
				}
			}
		}
		werr <- err
	}()
	blobs := NewQueue()
	rerrs := make([]error, copyReaders)
	var wg sync.WaitGroup
	for i := 0; i < copyReaders; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			if rerrs[i] = readBlobs(ctx, src.Reader(), blobs, jobs); rerrs[i] != nil {
				cancel()
			}
		}(i)
	}
	w, err := Walk(ctx, src.Reader(), roots, skip, have, blobs)
	blobs.Close()
	if err != nil {
		cancel()
		w = Walked{}
	}
	progress(0, int64(w.Total))
	walked <- w
	wg.Wait()
	close(jobs)
	if err := firstErr(append([]error{<-werr, err}, rerrs...)); err != nil {
		if pw != nil {
			pw.Abort()
		}
		return nil, err
	}
	if pw == nil {
		return nil, nil
	}
	if _, _, err := pw.Finish(); err != nil {
		return nil, err
	}
	return w.Commits, nil
}

// copyHoldBytes bounds what a copy's writer holds in memory while the walk goes on.
const copyHoldBytes = 32 << 20

// Walked is what Walk found.
type Walked struct {
	Head    []Job           // the tags, commits and trees to pack
	Commits []plumbing.Hash // the commits
	Total   int             // how many objects to pack in all, blobs included
	had     int             // objects left out: the destination has them
}

// firstErr returns the first error that is not a cancellation, or else the first error:
// one goroutine's failure cancels the others.
func firstErr(errs []error) error {
	var first error
	for _, e := range errs {
		if e != nil && !errors.Is(e, context.Canceled) {
			return e
		}
		if first == nil {
			first = e
		}
	}
	return first
}

// Walk reads the tags, commits and trees of the closure of roots (see Copy) and hands
// their blobs to blobs.
func Walk(ctx context.Context, r *Reader, roots []plumbing.Hash, skip, have func(plumbing.Hash) bool, blobs *Queue) (Walked, error) {
	var w Walked
	seen := make(map[plumbing.Hash]bool)
	var walkTree func(h plumbing.Hash) error
	walkTree = func(h plumbing.Hash) error {
		if seen[h] {
			return nil
		}
		seen[h] = true
		if have != nil && have(h) {
			w.had++
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		j, data, err := r.Job(h)
		if err == nil && j.Type != plumbing.TreeObject {
			err = fmt.Errorf("a %s, not a tree", j.Type)
		}
		if err != nil {
			return fmt.Errorf("tree %s: %w", h, err)
		}
		w.Head = append(w.Head, j)
		entries, err := ParseTree(data)
		if err != nil {
			return fmt.Errorf("tree %s: %w", h, err)
		}
		for _, e := range entries {
			switch e.Mode {
			case filemode.Dir:
				if err := walkTree(e.Hash); err != nil {
					return err
				}
			case filemode.Submodule: // a commit of another repository
			default:
				if !seen[e.Hash] {
					seen[e.Hash] = true
					if have != nil && have(e.Hash) {
						w.had++
						continue
					}
					blobs.push(e.Hash)
				}
			}
		}
		return nil
	}
	for _, h := range roots {
		for i := 0; ; i++ {
			if skip != nil && skip(h) {
				break
			}
			j, data, err := r.Job(h)
			if err != nil {
				return Walked{}, fmt.Errorf("object %s: %w", h, err)
			}
			if j.Type == plumbing.TagObject && i < 10 {
				if !seen[h] {
					seen[h] = true
					w.Head = append(w.Head, j)
				}
				tgt, err := TagTarget(data)
				if err != nil {
					return Walked{}, fmt.Errorf("tag %s: %w", h, err)
				}
				h = tgt
				continue
			}
			if j.Type != plumbing.CommitObject {
				return Walked{}, fmt.Errorf("object %s is a %s, not a commit", h, j.Type)
			}
			if seen[h] {
				break
			}
			seen[h] = true
			w.Head = append(w.Head, j)
			tree, err := CommitTree(data)
			if err != nil {
				return Walked{}, fmt.Errorf("commit %s: %w", h, err)
			}
			w.Commits = append(w.Commits, h)
			if err := walkTree(tree); err != nil {
				return Walked{}, err
			}
			break
		}
	}
	w.Total = len(seen) - w.had
	return w, nil
}

// Queue hands object ids from one producer to several consumers; pushing never blocks.
type Queue struct {
	mu     sync.Mutex
	cond   sync.Cond
	items  []plumbing.Hash
	closed bool
}

// NewQueue returns an empty, open Queue.
func NewQueue() *Queue {
	q := &Queue{}
	q.cond.L = &q.mu
	return q
}

func (q *Queue) push(h plumbing.Hash) {
	q.mu.Lock()
	q.items = append(q.items, h)
	q.mu.Unlock()
	q.cond.Signal()
}

// Close says that nothing more comes; Pop then empties the queue.
func (q *Queue) Close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.cond.Broadcast()
}

// Pop waits for the next id; false once the queue is closed and empty.
func (q *Queue) Pop() (plumbing.Hash, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.items) == 0 && !q.closed {
		q.cond.Wait()
	}
	if len(q.items) == 0 {
		return plumbing.ZeroHash, false
	}
	h := q.items[0]
	q.items = q.items[1:]
	return h, true
}

// copyReaders is how many goroutines read blobs for a copy.
const copyReaders = 2

// Job is one object on its way into a pack: its packed bytes in raw or, when large, its
// content in r (then done, when set, is closed once r has been read, before the reader
// goes on).
type Job struct {
	Hash plumbing.Hash
	Type plumbing.ObjectType
	size int64
	raw  []byte
	r    io.Reader
	done chan struct{}
}

// Add appends j to the pack; streamed content is hashed as it goes and checked.
func (w *PackWriter) Add(j Job) error {
	if j.r == nil {
		w.addRaw(j.Hash, j.raw)
		return nil
	}
	return w.addStream(j.Hash, j.Type, j.size, j.r)
}

// Job reads h for a copy, and returns its content too (valid until the next call on r).
func (r *Reader) Job(h plumbing.Hash) (Job, []byte, error) {
	t, data, raw, err := r.rawObject(h)
	if err != nil {
		return Job{}, nil, err
	}
	return Job{Hash: h, Type: t, size: int64(len(data)), raw: raw}, data, nil
}

// StreamJob is Job for an object larger than InlineLimit, which is streamed into the pack
// and hashed on the way, not held in memory; false when h is not such an object.
func (r *Reader) StreamJob(h plumbing.Hash) (Job, bool, error) {
	if size, ok := r.WholeSize(h); !ok || size <= InlineLimit {
		return Job{}, false, nil
	}
	t, size, rd, err := r.Stream(h)
	if err != nil {
		return Job{}, true, fmt.Errorf("object %s: %w", h, err)
	}
	return Job{Hash: h, Type: t, size: size, r: rd}, true, nil
}

// readBlobs reads the blobs the queue hands it until it is closed and sends them on.
func readBlobs(ctx context.Context, r *Reader, blobs *Queue, jobs chan<- Job) error {
	for {
		h, ok := blobs.Pop()
		if !ok {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if j, ok, err := r.StreamJob(h); ok {
			if err != nil {
				return err
			}
			j.done = make(chan struct{})
			jobs <- j
			<-j.done
			continue
		}
		j, _, err := r.Job(h)
		if err != nil {
			return fmt.Errorf("object %s: %w", h, err)
		}
		jobs <- j
	}
}
