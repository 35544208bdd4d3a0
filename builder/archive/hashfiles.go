package archive

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"runtime"
	"sync"

	"github.com/epbuild/epbuild/builder/sha256x2"
)

// FileSum is what HashFiles found for one file.
type FileSum struct {
	SHA256 string      // hex
	N      int64       // bytes hashed
	Info   fs.FileInfo // the fstat of the open file before the read that was hashed
	// Data holds the file's bytes when it was read whole into memory (under wholeMax
	// bytes); nil for bigger files. It is valid only during the done call.
	Data []byte
	Err  error // the file could not be opened or read; the other fields are unset
}

// wholeMax: files under it are read whole into a buffer of their lane; bigger ones are
// mapped (or, where they cannot be, hashed alone: again).
const wholeMax = 256 << 10

// HashFiles hashes the file path(job) of every job from jobs on runtime.NumCPU() workers,
// two files at a time on each, their blocks interleaved (sha256x2: about twice one file's
// speed on a core with SHA extensions), and calls done from the worker with each result.
// A file that changed or faulted while hashed is hashed again alone, as reading it then
// sees it. An error from done stops the hashing, and HashFiles returns the first (or
// ctx's) once every worker has stopped. The caller closes jobs when it has sent them all,
// and stops sending when ctx is done: HashFiles does not drain jobs.
func HashFiles[T any](ctx context.Context, jobs <-chan T, path func(T) string, done func(T, FileSum) error) error {
	return hashFiles(ctx, max(1, runtime.NumCPU()), jobs, path, done)
}

func hashFiles[T any](ctx context.Context, workers int, jobs <-chan T, path func(T) string, done func(T, FileSum) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	fail := func(err error) {
		mu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		mu.Unlock()
		cancel()
	}
	for range workers {
		wg.Go(func() {
			w := &pairWorker[T]{ctx: ctx, jobs: jobs, path: path, done: done}
			if err := w.run(); err != nil {
				fail(err)
			}
		})
	}
	wg.Wait()
	if firstErr == nil {
		firstErr = ctx.Err()
	}
	return firstErr
}

// lane is one file being hashed by a pairWorker.
type lane[T any] struct {
	job   T
	busy  bool
	f     *os.File
	info  fs.FileInfo
	data  []byte // the whole file: mapped (unmap set), or read into buf
	unmap func()
	off   int
	d     sha256x2.Digest
	buf   []byte
}

type pairWorker[T any] struct {
	ctx  context.Context
	jobs <-chan T
	path func(T) string
	done func(T, FileSum) error
	l    [2]lane[T]
	buf  []byte // for files hashed alone
}

func (w *pairWorker[T]) run() error {
	defer func() {
		for i := range w.l {
			w.l[i].close()
		}
	}()
	more := true
	for {
		for i := range w.l {
			for more && !w.l[i].busy {
				var err error
				if more, err = w.load(&w.l[i]); err != nil {
					return err
				}
			}
		}
		a, b := &w.l[0], &w.l[1]
		if !a.busy && !b.busy {
			return nil
		}
		if err := w.ctx.Err(); err != nil {
			return err
		}
		if a.busy && b.busy {
			n := min(len(a.data)-a.off, len(b.data)-b.off, mapChunk) &^ (sha256x2.BlockSize - 1)
			if n > 0 {
				pa, pb := a.data[a.off:a.off+n], b.data[b.off:b.off+n]
				if !noFault(func() { sha256x2.Blocks2(&a.d, &b.d, pa, pb) }) {
					// a mapped file was truncated: both lanes start again, alone
					if err := w.again(a); err != nil {
						return err
					}
					if err := w.again(b); err != nil {
						return err
					}
					continue
				}
				a.off += n
				b.off += n
				continue
			}
		}
		// A lane with less than a block left, or the only lane left when no file is left
		// to pair it with: finish it.
		for i := range w.l {
			l := &w.l[i]
			if l.busy && (len(l.data)-l.off < sha256x2.BlockSize || !more && !w.l[1-i].busy) {
				if err := w.finish(l); err != nil {
					return err
				}
			}
		}
	}
}

// load starts the next job in l. more is false when jobs is closed (or ctx done).
func (w *pairWorker[T]) load(l *lane[T]) (more bool, err error) {
	var job T
	select {
	case j, ok := <-w.jobs:
		if !ok {
			return false, nil
		}
		job = j
	case <-w.ctx.Done():
		return false, nil
	}
	p := w.path(job)
	f, err := os.Open(p)
	if err != nil {
		return true, w.done(job, FileSum{Err: err})
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return true, w.done(job, FileSum{Err: err})
	}
	*l = lane[T]{job: job, busy: true, f: f, info: fi, buf: l.buf}
	l.d.Reset()
	size := fi.Size()
	switch {
	case !fi.Mode().IsRegular():
		return true, w.again(l)
	case size < wholeMax:
		// one read of size+1 bytes: a short count is the end of the file
		if cap(l.buf) < int(size)+1 {
			l.buf = make([]byte, max(int(size)+1, 64<<10))
		}
		n, err := io.ReadFull(f, l.buf[:size+1])
		switch {
		case err == nil:
			return true, w.again(l) // it grew: read it as it comes
		case !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF):
			l.close()
			return true, w.done(job, FileSum{Err: fmt.Errorf("read: %w", err)})
		}
		l.data = l.buf[:n]
	default:
		m, unmap, ok := mapFile(f, size)
		if !ok {
			return true, w.again(l)
		}
		l.data, l.unmap = m, unmap
	}
	return true, nil
}

// finish hashes the rest of l's file and reports it.
func (w *pairWorker[T]) finish(l *lane[T]) error {
	var sum string
	ok := noFault(func() {
		// alone, in pieces between checks of ctx
		for len(l.data)-l.off > mapChunk {
			if w.ctx.Err() != nil {
				return
			}
			l.d.Blocks(l.data[l.off : l.off+mapChunk])
			l.off += mapChunk
		}
		sum = l.d.Sum(l.data[l.off:])
	})
	if err := w.ctx.Err(); err != nil {
		return err
	}
	if !ok {
		return w.again(l)
	}
	n := int64(len(l.data))
	read := l.unmap == nil
	if !read {
		// a mapping holds the size the file had at the fstat: a file that changed size
		// since is hashed again, as reading sees it
		if now, err := l.f.Stat(); err != nil || now.Size() != n {
			return w.again(l)
		}
	}
	res := FileSum{SHA256: sum, N: n, Info: l.info}
	if read {
		res.Data = l.data
	}
	job := l.job
	err := w.done(job, res)
	l.close()
	return err
}

// again hashes l's file alone from its start, as reading it now sees it (the file it
// opened, fstat again), and reports it.
func (w *pairWorker[T]) again(l *lane[T]) error {
	job, f := l.job, l.f
	if l.unmap != nil {
		l.unmap()
		l.unmap = nil
	}
	defer l.close()
	if w.buf == nil {
		w.buf = make([]byte, copyBufSize)
	}
	fi, err := f.Stat()
	if err == nil {
		_, err = f.Seek(0, io.SeekStart)
	}
	var sum string
	var n int64
	if err == nil {
		sum, n, err = hashOpen(w.ctx, f, fi, sha256.New(), w.buf)
	}
	if err != nil {
		if w.ctx.Err() != nil {
			return w.ctx.Err()
		}
		return w.done(job, FileSum{Err: fmt.Errorf("read: %w", err)})
	}
	return w.done(job, FileSum{SHA256: sum, N: n, Info: fi})
}

func (l *lane[T]) close() {
	if l.unmap != nil {
		l.unmap()
	}
	if l.f != nil {
		l.f.Close()
	}
	buf := l.buf
	*l = lane[T]{buf: buf}
}

// hashItems hashes items[i] for every i of idx through HashFiles.
func hashItems(ctx context.Context, items []item, idx []int, done func(i int, s FileSum) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	jobs := make(chan int, 64)
	go func() {
		defer close(jobs)
		for _, i := range idx {
			select {
			case jobs <- i:
			case <-ctx.Done():
				return
			}
		}
	}()
	return HashFiles(ctx, jobs, func(i int) string { return items[i].src }, done)
}
