package archive

import (
	"io/fs"
	"os"
	"runtime"
	"slices"
	"sync"
	"time"
)

// asyncMax is the largest file the extractor hands to its writers. Creating a file costs
// more than writing a few hundred KB of it on the file systems installs go to, and an
// artifact holds thousands of small files (headers, Python sources): those are created and
// written on every core. Bigger files are written by the extractor itself as their data
// streams by, so that a writer's buffer holds at most this much.
const asyncMax = 1 << 20

// fileWriters creates and writes files of an extraction on runtime.NumCPU() goroutines.
// The extractor keeps every decision (names, links, the tree, the hashes) and hands over
// only the writing of bytes it has read and checked; it waits for the writers (settle)
// before it touches a name on disk again (a later entry of the same name, a hard link)
// and before it sets the directories' modes and times.
type fileWriters struct {
	root    *os.Root
	jobs    chan fileJob
	free    chan []byte
	made    int // buffers made; the extractor's goroutine alone counts them
	max     int
	workers sync.WaitGroup
	pending sync.WaitGroup
	mu      sync.Mutex
	err     error // the first failure, as the extractor reports it
}

type fileJob struct {
	name  string // as stored, for the error
	rel   string
	mode  fs.FileMode
	mtime time.Time
	data  []byte
	fail  func(name string, err error) error
}

func newFileWriters(root *os.Root) *fileWriters {
	n := max(2, runtime.NumCPU())
	w := &fileWriters{root: root, jobs: make(chan fileJob, n), free: make(chan []byte, 3*n), max: 3 * n}
	for range n {
		w.workers.Go(func() {
			for j := range w.jobs {
				if err := w.write(j); err != nil {
					w.mu.Lock()
					if w.err == nil {
						w.err = j.fail(j.name, err)
					}
					w.mu.Unlock()
				}
				w.free <- j.data[:0]
				w.pending.Done()
			}
		})
	}
	return w
}

// buffer returns an empty buffer of at least n bytes' capacity, waiting for one when as
// many as the writers may hold are in use.
func (w *fileWriters) buffer(n int) []byte {
	var b []byte
	select {
	case b = <-w.free:
	default:
		if w.made < w.max {
			w.made++
		} else {
			b = <-w.free
		}
	}
	return slices.Grow(b[:0], n)
}

// write creates j.rel (O_EXCL: the extractor cleared the name) with its bytes, mode and time.
func (w *fileWriters) write(j fileJob) error {
	w.mu.Lock()
	failed := w.err != nil
	w.mu.Unlock()
	if failed {
		return nil // the extraction has failed: nothing more is written
	}
	f, err := w.root.OpenFile(j.rel, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(j.data)
	if err == nil {
		err = f.Chmod(j.mode)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && !j.mtime.IsZero() {
		err = w.root.Chtimes(j.rel, j.mtime, j.mtime)
	}
	return err
}

// submit hands a file to the writers; it returns the first failure of a file handed
// earlier, if any.
func (w *fileWriters) submit(j fileJob) error {
	if err := w.failure(); err != nil {
		w.free <- j.data[:0]
		return err
	}
	w.pending.Add(1)
	w.jobs <- j
	return nil
}

func (w *fileWriters) failure() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// settle waits for every file handed over and returns the first failure.
func (w *fileWriters) settle() error {
	w.pending.Wait()
	return w.failure()
}

// close settles and stops the writers.
func (w *fileWriters) close() error {
	err := w.settle()
	close(w.jobs)
	w.workers.Wait()
	return err
}
