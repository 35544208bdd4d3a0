package archive

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"runtime"
	"sync"
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

// wholeMax: files under it are read whole into their worker's buffer; bigger ones are
// read in chunks.
const wholeMax = 256 << 10

// HashFiles hashes the file path(job) of every job from jobs on runtime.NumCPU() workers,
// one file at a time on each, with crypto/sha256 (SHA extensions where the CPU has them),
// and calls done from the worker with each result. A file under wholeMax bytes is read
// whole in one read (its bytes go to done); a bigger one is read in chunks of the
// worker's buffer (see HashFile). An error from
// done stops the hashing, and HashFiles returns the first (or ctx's) once every worker
// has stopped. The caller closes jobs when it has sent them all, and stops sending when
// ctx is done: HashFiles does not drain jobs.
//
// Two files interleaved on one core (a two-lane SHA-256 in assembly) measured 1.18-1.28x
// this on the Intel Xeons the GPU hosts use, under the 1.3x a whole stage had to gain
// for the hand-written code to stay.
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
			var buf []byte
			for {
				var job T
				select {
				case j, ok := <-jobs:
					if !ok {
						return
					}
					job = j
				case <-ctx.Done():
					return
				}
				if buf == nil {
					buf = make([]byte, copyBufSize)
				}
				r := hashFile(ctx, path(job), buf)
				if ctx.Err() != nil {
					return // stopped: HashFiles returns ctx's error or the first done's
				}
				if err := done(job, r); err != nil {
					fail(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if firstErr == nil {
		firstErr = ctx.Err()
	}
	return firstErr
}

// hashFile hashes the file at p as reading it sees it. buf is the worker's (copyBufSize).
func hashFile(ctx context.Context, p string, buf []byte) FileSum {
	f, err := openRead(p)
	if err != nil {
		return FileSum{Err: err}
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return FileSum{Err: err}
	}
	if size := fi.Size(); fi.Mode().IsRegular() && size < wholeMax {
		// one read of size+1 bytes into the worker's buffer: a short count is the end of
		// the file (a fresh buffer per file costs more in page faults than the read)
		data := buf[:size+1]
		n, err := io.ReadFull(f, data)
		switch {
		case errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF):
			sum := sha256.Sum256(data[:n])
			return FileSum{SHA256: hex.EncodeToString(sum[:]), N: int64(n), Info: fi, Data: data[:n]}
		case err != nil:
			return FileSum{Err: fmt.Errorf("read: %w", err)}
		}
		// it grew: read it as it comes, from the start
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return FileSum{Err: fmt.Errorf("read: %w", err)}
		}
	}
	sum, n, err := hashReader(ctx, f, sha256.New(), buf)
	if err != nil {
		return FileSum{Err: fmt.Errorf("read: %w", err)}
	}
	return FileSum{SHA256: sum, N: n, Info: fi}
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
