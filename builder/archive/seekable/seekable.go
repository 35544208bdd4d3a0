// Package seekable writes and reads the zstd seekable format (facebook/zstd,
// contrib/seekable_format/zstd_seekable_compression_format.md), artifact format 2's
// compression: independent frames compressed and decompressed on every core, and a seek
// table in a skippable frame. It owns the frames and the table, nothing of tar or of the
// artifact's entries (builder/archive packs and reads those through it).
package seekable

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"sync"

	"github.com/klauspost/compress/zstd"
)

// Artifact format 2 is the zstd seekable format (facebook/zstd,
// contrib/seekable_format/zstd_seekable_compression_format.md): the tar stream cut into
// frames of FrameSize uncompressed bytes each, every frame compressed on its own, then a
// skippable frame holding the seek table, which gives each frame's compressed and
// decompressed size. It is one valid zstd stream (a decoder skips the table), so
// `tar --zstd -xf` and `zstd -d` read it as they read format 1, one zstd frame. Frames
// are compressed on every core and decompressed on every core; a reader that wants the
// manifest, the first entry, decompresses the first frame(s) only.

// FrameSize is the uncompressed tar bytes in each frame but the last. The bytes do not
// depend on the number of workers: a frame is a pure function of its input and the level.
// Each frame starts with an empty window, which costs size; smaller frames cost more:
// on the 575 MB generated install tree of the package comparison, over one stream at the
// same level, 1 MiB frames grow the artifact by 5.0%, 2 MiB by 2.3%, 4 MiB by 1.1%,
// 8 MiB by 0.57% (the demo artifact, 54 KB of tar, is one frame and the 25-byte seek
// table: 0.28%). 8 MiB keeps two cores busy from a 16 MiB tar on (a real artifact is
// hundreds of MB) and bounds what a reader holds per frame in flight.
const FrameSize = 8 << 20

// MaxWindow bounds the memory a zstd frame may ask for: zstd --long=27 (128 MiB) is
// the largest window a real source or artifact uses; the library's default is 512 MiB.
const MaxWindow = 128 << 20

// Seek table constants of the format's specification.
const (
	seekTableMagic     = 0x184D2A5E // the skippable frame's magic: 0x184D2A50 | 0xE
	seekableMagic      = 0x8F92EAB1 // the last 4 bytes of the table's footer
	footerSize         = 9          // Number_Of_Frames, Seek_Table_Descriptor, Seekable_Magic_Number
	seekChecksumFlag   = 0x80       // entries carry a 4-byte checksum
	seekReservedBits   = 0x7c       // must be zero
	skippableHeaderLen = 8
)

// maxFrameDecoded bounds the decompressed size of one frame a reader accepts from a seek
// table, and so the memory a frame in flight may take: far above FrameSize (other writers
// of the format cut bigger frames), far below a bomb. A table that asks for more is not
// used: the archive is then read as one stream.
const maxFrameDecoded = 64 << 20

// Frame is one entry of a seek table, with its offsets.
type Frame struct {
	Off, Size   int64 // compressed
	DOff, DSize int64 // decompressed
}

// Writer compresses what it is given in frames of FrameSize bytes, each on its own
// on one of workers goroutines, writes them to w in order and, at Close, the seek table.
// Write and Close are called from one goroutine.
type Writer struct {
	w     io.Writer
	enc   *zstd.Encoder
	size  int
	buf   []byte
	free  chan []byte         // input buffers
	outs  chan []byte         // output buffers written, for the workers to reuse
	jobs  chan frameJob       // to the workers
	order chan chan frameDone // one per frame, in order, to the writing goroutine
	done  chan struct{}       // the writing goroutine has returned
	sizes [][2]uint32         // compressed, decompressed; final after Close
	err   error               // the first error of the writing goroutine, after done
	wg    sync.WaitGroup
	fail  chan struct{} // closed when the writing goroutine failed
}

type frameJob struct {
	in  []byte
	out chan frameDone
}

type frameDone struct {
	in, out []byte
}

// NewWriter starts workers encoders at level (0 or less: runtime.NumCPU()), with
// frames of size bytes.
func NewWriter(w io.Writer, level zstd.EncoderLevel, workers, size int) (*Writer, error) {
	if workers <= 0 {
		workers = runtime.NumCPU()
	}
	// One encoder, used by every worker through EncodeAll: it keeps one encoder state per
	// worker. CRC on: each frame checks its own content.
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(level), zstd.WithEncoderConcurrency(workers), zstd.WithEncoderCRC(true))
	if err != nil {
		return nil, err
	}
	fw := &Writer{
		w: w, enc: enc, size: size,
		free:  make(chan []byte, workers+2),
		outs:  make(chan []byte, workers+2),
		jobs:  make(chan frameJob),
		order: make(chan chan frameDone, workers+1),
		done:  make(chan struct{}),
		fail:  make(chan struct{}),
	}
	for range workers + 1 {
		fw.free <- make([]byte, 0, size)
	}
	fw.buf = make([]byte, 0, size)
	for range workers {
		fw.wg.Go(func() {
			for j := range fw.jobs {
				var out []byte
				select {
				case out = <-fw.outs:
				default:
					out = make([]byte, 0, enc.MaxEncodedSize(fw.size))
				}
				j.out <- frameDone{in: j.in, out: enc.EncodeAll(j.in, out)}
			}
		})
	}
	go fw.writeFrames()
	return fw, nil
}

// writeFrames writes the frames in order as they are done, and gives their input
// buffers back.
func (fw *Writer) writeFrames() {
	defer close(fw.done)
	for ch := range fw.order {
		d := <-ch
		if fw.err == nil {
			if _, err := fw.w.Write(d.out); err != nil {
				fw.err = err
				close(fw.fail)
			}
			fw.sizes = append(fw.sizes, [2]uint32{uint32(len(d.out)), uint32(len(d.in))})
		}
		fw.free <- d.in[:0]
		select {
		case fw.outs <- d.out[:0]:
		default:
		}
	}
}

func (fw *Writer) Write(p []byte) (int, error) {
	if fw.buf == nil {
		return 0, fw.writeErr() // a flush failed
	}
	n := len(p)
	for len(p) > 0 {
		k := copy(fw.buf[len(fw.buf):fw.size], p)
		fw.buf, p = fw.buf[:len(fw.buf)+k], p[k:]
		if len(fw.buf) == fw.size {
			if err := fw.flush(); err != nil {
				return n - len(p), err
			}
		}
	}
	return n, nil
}

// ReadFrom reads r to its end straight into the frames, without a buffer in between.
func (fw *Writer) ReadFrom(r io.Reader) (int64, error) {
	var n int64
	for {
		if fw.buf == nil {
			return n, fw.writeErr() // a flush failed
		}
		k, err := r.Read(fw.buf[len(fw.buf):fw.size])
		fw.buf = fw.buf[:len(fw.buf)+k]
		n += int64(k)
		if len(fw.buf) == fw.size {
			if ferr := fw.flush(); ferr != nil {
				return n, ferr
			}
		}
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

// flush hands the buffer to a worker as the next frame.
func (fw *Writer) flush() error {
	out := make(chan frameDone, 1)
	select {
	case fw.order <- out:
	case <-fw.fail:
		return fw.writeErr()
	}
	fw.jobs <- frameJob{in: fw.buf, out: out}
	select {
	case fw.buf = <-fw.free:
	case <-fw.fail:
		fw.buf = nil
		return fw.writeErr()
	}
	return nil
}

func (fw *Writer) writeErr() error {
	<-fw.fail
	return fmt.Errorf("write frame: %w", fw.err)
}

// Close compresses what is left as the last frame, waits for every frame to be written
// and writes the seek table. It stops the workers whatever happened; call it once.
func (fw *Writer) Close() error {
	var err error
	if fw.buf != nil && len(fw.buf) > 0 {
		err = fw.flush()
	}
	close(fw.jobs)
	fw.wg.Wait()
	close(fw.order)
	<-fw.done
	fw.enc.Close()
	if err != nil {
		return err
	}
	if fw.err != nil {
		return fmt.Errorf("write frame: %w", fw.err)
	}
	if _, err := fw.w.Write(seekTable(fw.sizes)); err != nil {
		return fmt.Errorf("write seek table: %w", err)
	}
	return nil
}

// seekTable is the skippable frame of the seek table for frames of these sizes
// (compressed, decompressed), without checksums: each frame carries its own.
func seekTable(sizes [][2]uint32) []byte {
	n := len(sizes)
	b := make([]byte, 0, skippableHeaderLen+8*n+footerSize)
	b = binary.LittleEndian.AppendUint32(b, seekTableMagic)
	b = binary.LittleEndian.AppendUint32(b, uint32(8*n+footerSize))
	for _, s := range sizes {
		b = binary.LittleEndian.AppendUint32(b, s[0])
		b = binary.LittleEndian.AppendUint32(b, s[1])
	}
	b = binary.LittleEndian.AppendUint32(b, uint32(n))
	b = append(b, 0)
	return binary.LittleEndian.AppendUint32(b, seekableMagic)
}

// ReadTable reads the seek table at the end of the size bytes of r. It returns nil
// and no error when there is none, or one that does not describe exactly the bytes before
// it in frames a reader may hold (maxFrameDecoded): such an archive is read as one
// stream, which judges its bytes. An error is a failure to read r.
func ReadTable(r io.ReaderAt, size int64) ([]Frame, error) {
	if size < skippableHeaderLen+footerSize {
		return nil, nil
	}
	var foot [footerSize]byte
	if _, err := r.ReadAt(foot[:], size-footerSize); err != nil {
		return nil, err
	}
	if binary.LittleEndian.Uint32(foot[5:]) != seekableMagic || foot[4]&seekReservedBits != 0 {
		return nil, nil
	}
	n := int64(binary.LittleEndian.Uint32(foot[:4]))
	entry := int64(8)
	if foot[4]&seekChecksumFlag != 0 {
		entry = 12
	}
	tableLen := skippableHeaderLen + n*entry + footerSize
	if n == 0 || tableLen > size {
		return nil, nil
	}
	table := make([]byte, tableLen-footerSize)
	if _, err := r.ReadAt(table, size-tableLen); err != nil {
		return nil, err
	}
	if binary.LittleEndian.Uint32(table) != seekTableMagic || int64(binary.LittleEndian.Uint32(table[4:])) != tableLen-skippableHeaderLen {
		return nil, nil
	}
	frames := make([]Frame, n)
	var off, dOff int64
	for i := range frames {
		e := table[skippableHeaderLen+int64(i)*entry:]
		c, d := int64(binary.LittleEndian.Uint32(e)), int64(binary.LittleEndian.Uint32(e[4:]))
		if c == 0 || d > maxFrameDecoded {
			return nil, nil
		}
		frames[i] = Frame{Off: off, Size: c, DOff: dOff, DSize: d}
		off += c
		dOff += d
	}
	if off != size-tableLen {
		return nil, nil
	}
	return frames, nil
}

// Reader decompresses the frames of a seekable zstd archive on every core and
// reads them out in order. It starts with the first frame alone and reads further ahead
// only as the reader goes on, so that one that stops in the first frame (the manifest)
// has read nothing else of the file.
type Reader struct {
	ctx     context.Context
	cancel  context.CancelFunc
	r       io.ReaderAt
	frames  []Frame
	dec     *zstd.Decoder
	workers int
	next    int                // next frame to start
	given   int                // frames handed to the reader so far
	queue   []chan frameResult // started, in order
	cur     []byte
	curBuf  []byte   // the buffer cur is in
	spareIn [][]byte // buffers of frames read out: their input
	spare   [][]byte // and their decompressed bytes
	err     error
	wg      sync.WaitGroup
}

type frameResult struct {
	data, in []byte
	err      error
}

// buffer is a buffer of spare of at least n bytes, or a new one: a reader holds as
// many as frames in flight, not one per frame.
func buffer(spare *[][]byte, n int64) []byte {
	for i, b := range *spare {
		if int64(cap(b)) >= n {
			*spare = slices.Delete(*spare, i, i+1)
			return b[:0]
		}
	}
	return make([]byte, 0, n)
}

// errFrame marks a frame that does not hold what the seek table says: the archive is
// damaged (the extractor gives it ErrCorrupt).
var errFrame = errors.New("zstd frame")

// maxReadWorkers caps the frames a reader decompresses at once, and so its memory
// (FrameSize each): more cores than that outrun the one goroutine that checks, hashes
// and writes the entries.
const maxReadWorkers = 8

func NewReader(ctx context.Context, r io.ReaderAt, frames []Frame, workers int) (*Reader, error) {
	if workers <= 0 {
		workers = min(runtime.NumCPU(), maxReadWorkers)
	}
	dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(workers), zstd.WithDecoderMaxWindow(MaxWindow), zstd.WithDecoderMaxMemory(maxFrameDecoded))
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	return &Reader{ctx: ctx, cancel: cancel, r: r, frames: frames, dec: dec, workers: workers}, nil
}

// start starts the next frame's read and decompression.
func (fr *Reader) start() {
	f := fr.frames[fr.next]
	fr.next++
	ch := make(chan frameResult, 1)
	fr.queue = append(fr.queue, ch)
	in, out := buffer(&fr.spareIn, f.Size)[:f.Size], buffer(&fr.spare, f.DSize)
	fr.wg.Go(func() {
		if err := fr.ctx.Err(); err != nil {
			ch <- frameResult{err: err}
			return
		}
		if _, err := fr.r.ReadAt(in, f.Off); err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			ch <- frameResult{err: err}
			return
		}
		out, err := fr.dec.DecodeAll(in, out)
		switch {
		case err != nil:
			err = fmt.Errorf("%w at offset %d: %w", errFrame, f.Off, err)
		case int64(len(out)) != f.DSize:
			err = fmt.Errorf("%w at offset %d: %d bytes, its seek table says %d", errFrame, f.Off, len(out), f.DSize)
		}
		ch <- frameResult{data: out, in: in, err: err}
	})
}

func (fr *Reader) Read(p []byte) (int, error) {
	for len(fr.cur) == 0 {
		if fr.err != nil {
			return 0, fr.err
		}
		if fr.given == len(fr.frames) {
			fr.err = io.EOF
			return 0, io.EOF
		}
		// ahead: as many frames as were read so far, up to one per worker
		for fr.next < len(fr.frames) && fr.next-fr.given < min(fr.given+1, fr.workers) {
			fr.start()
		}
		if fr.curBuf != nil {
			fr.spare = append(fr.spare, fr.curBuf)
			fr.curBuf = nil
		}
		res := <-fr.queue[0]
		fr.queue = fr.queue[1:]
		fr.given++
		if res.err != nil {
			fr.err = res.err
			return 0, res.err
		}
		fr.spareIn = append(fr.spareIn, res.in)
		fr.cur, fr.curBuf = res.data, res.data
	}
	n := copy(p, fr.cur)
	fr.cur = fr.cur[n:]
	return n, nil
}

// Close stops the frames in flight and waits for them.
func (fr *Reader) Close() {
	fr.cancel()
	fr.wg.Wait()
	fr.dec.Close()
}
