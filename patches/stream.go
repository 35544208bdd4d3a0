package patches

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/bluekeyes/go-gitdiff/gitdiff"
)

// A patch is read, parsed and applied piece by piece: its messages one after the other,
// and each message's file diffs by the workers that apply them, each piece dropped once
// applied. go-gitdiff parses a piece's lines as substrings of it, without copying them.
// The patch is never whole in memory, parsed or not.

// piece is a part of a message: one file diff, or text with none (a preamble); or, from
// a patch parsed already, file diffs.
type piece struct {
	text string
	msg  int // the message it belongs to, 0-based
	line int // the line of its message where text starts, 1-based
	// files, when parsed, are the piece's file diffs, their paths checked (text is then
	// empty).
	files  []*gitdiff.File
	parsed bool
}

// pieceSource yields the pieces of a patch in order, each message's after the last
// message's; false at the end of the patch.
type pieceSource interface {
	piece() (piece, bool, error)
}

// parsedPieces yields a patch parsed already (a held set, a reversed patch) as pieces of
// one file diff each.
type parsedPieces struct {
	msgs      [][]*gitdiff.File
	msg, file int
}

func (p *parsedPieces) piece() (piece, bool, error) {
	for p.msg < len(p.msgs) && p.file >= len(p.msgs[p.msg]) {
		p.msg, p.file = p.msg+1, 0
	}
	if p.msg >= len(p.msgs) {
		return piece{}, false, nil
	}
	f := p.msgs[p.msg][p.file]
	p.file++
	return piece{msg: p.msg, files: []*gitdiff.File{f}, parsed: true}, true, nil
}

// chunker cuts a patch into pieces as it reads it: a new message at each line
// "From <40-hex> " but the first (text before the first belongs to the first message,
// where the parser takes it for a preamble), and a new piece at each line that starts a
// git file diff. go-gitdiff parses a concatenated series without error into one merged
// patch, which would apply a file's later commits against its original text: each
// message must be parsed and applied on its own, in order.
type chunker struct {
	br      *bufio.Reader
	buf     []byte // the piece being read, reused
	next    []byte // the line that starts the next piece
	msg     int
	line    int // of the message, of the next line read
	sawFrom bool
	done    bool
}

func newChunker(r io.Reader) *chunker {
	return &chunker{br: bufio.NewReaderSize(r, 64<<10), line: 1}
}

// piece returns the next piece; false at the end of the patch.
func (c *chunker) piece() (piece, bool, error) {
	if c.done {
		return piece{}, false, nil
	}
	p := piece{msg: c.msg, line: c.line}
	c.buf = append(c.buf[:0], c.next...)
	if len(c.next) > 0 {
		c.next = c.next[:0]
		c.line++
	}
	for {
		// A line longer than the reader's buffer comes in parts; only a line's first part
		// can start a piece.
		line, err := c.br.ReadSlice('\n')
		lineStart := len(c.buf) == 0 || c.buf[len(c.buf)-1] == '\n'
		if len(line) > 0 && lineStart {
			switch {
			case isMessageStart(line) && c.sawFrom:
				c.next, c.msg, c.line = append(c.next, line...), c.msg+1, 1
				p.text = string(c.buf)
				c.finishLine(line, err)
				return p, true, nil
			case isMessageStart(line):
				c.sawFrom = true
			case len(c.buf) > 0 && bytes.HasPrefix(line, []byte("diff --git ")):
				c.next = append(c.next, line...)
				p.text = string(c.buf)
				c.finishLine(line, err)
				return p, true, nil
			}
		}
		c.buf = append(c.buf, line...)
		if len(line) > 0 && line[len(line)-1] == '\n' {
			c.line++
		}
		if err == io.EOF {
			c.done = true
			p.text = string(c.buf)
			return p, true, nil
		}
		if err != nil && err != bufio.ErrBufferFull {
			return piece{}, false, err
		}
	}
}

// finishLine reads the rest of a line that starts the next piece and is longer than the
// reader's buffer.
func (c *chunker) finishLine(line []byte, err error) {
	for err == bufio.ErrBufferFull {
		line, err = c.br.ReadSlice('\n')
		c.next = append(c.next, line...)
	}
}

// isMessageStart says whether line is "From <40-hex> ...".
func isMessageStart(line []byte) bool {
	if len(line) < 46 || string(line[:5]) != "From " || line[45] != ' ' {
		return false
	}
	for _, c := range line[5:45] {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// lineReader hands go-gitdiff the lines of a string as substrings of it.
type lineReader struct{ s string }

func (r *lineReader) ReadString(delim byte) (string, error) {
	if r.s == "" {
		return "", io.EOF
	}
	i := strings.IndexByte(r.s, delim)
	if i < 0 {
		line := r.s
		r.s = ""
		return line, io.EOF
	}
	line := r.s[:i+1]
	r.s = r.s[i+1:]
	return line, nil
}

func (*lineReader) Read([]byte) (int, error) { return 0, errors.New("lineReader: use ReadString") }

// parsePiece parses one piece and refuses any path epbuild will not write. A parse error
// names the line of the message (go-gitdiff counts from the piece's start). A piece
// parsed already is returned as it is.
func parsePiece(patch string, p piece) ([]*gitdiff.File, error) {
	if p.parsed {
		return p.files, nil
	}
	files, _, err := gitdiff.Parse(&lineReader{s: p.text})
	if err != nil {
		return nil, parseError{shiftLine(err, p.line-1)}
	}
	for _, f := range files {
		if err := checkFile(patch, f); err != nil {
			return nil, err
		}
		// The names outlive the parse (in results and the state's keys): copies, so that
		// they do not hold the piece's text.
		f.OldName, f.NewName = strings.Clone(f.OldName), strings.Clone(f.NewName)
	}
	return files, nil
}

// parseError marks an error of parsing, which messageError names with its message.
type parseError struct{ err error }

func (e parseError) Error() string { return e.err.Error() }
func (e parseError) Unwrap() error { return e.err }

// shiftLine adds by to the line number of a go-gitdiff error ("gitdiff: line N: ...").
func shiftLine(err error, by int) error {
	const prefix = "gitdiff: line "
	msg := err.Error()
	if by == 0 || !strings.HasPrefix(msg, prefix) {
		return err
	}
	rest := msg[len(prefix):]
	i := strings.IndexByte(rest, ':')
	if i < 0 {
		return err
	}
	n, perr := strconv.Atoi(rest[:i])
	if perr != nil {
		return err
	}
	return errors.New(prefix + strconv.Itoa(n+by) + rest[i:])
}

// messageError names a parse error with its message: "parse message 2 of 18".
func messageError(patch string, i, n int, err error) error {
	var pe parseError
	if !errors.As(err, &pe) {
		return err
	}
	if n > 1 {
		return fmt.Errorf("patch %s: parse message %d of %d: %w", patch, i+1, n, pe.err)
	}
	return fmt.Errorf("patch %s: parse: %w", patch, pe.err)
}

// inputError is a patch that is malformed or names a path epbuild refuses: bad input,
// whatever the tree holds.
type inputError struct{ err error }

func (e *inputError) Error() string { return e.err.Error() }
func (e *inputError) Unwrap() error { return e.err }

// applyStream applies a patch read from src, message by message. Within one message, as in
// git, every file diff reads the tree as it was before that message. An input error (a
// malformed patch, a refused path) anywhere in the patch comes back as an *inputError,
// before any conflict; else the first conflict, as applyFile or mergeMessage say it.
// With apply false, it only parses.
func applyStream(st *state, patch string, c pieceSource, maxOffset int, apply bool) (*state, []FileResult, error) {
	first, more, err := c.piece()
	if err != nil {
		return nil, nil, err
	}
	var (
		results []FileResult
		files   int
		failed  error // the first conflict
		bad     error // the first input error
		badMsg  int
	)
	cur := st
	for msg := 0; more; msg++ {
		m := startMessage(cur, patch, maxOffset, apply && failed == nil && bad == nil)
		for more && first.msg == msg {
			if bad == nil {
				m.add(first)
			}
			if first, more, err = c.piece(); err != nil {
				m.wait()
				return nil, nil, err
			}
		}
		changes, n, err := m.wait()
		files += n
		var ie *inputError
		switch {
		case bad != nil: // counting the messages, for the error
		case errors.As(err, &ie):
			bad, badMsg = ie.err, msg
		case failed != nil || !apply:
		case err != nil:
			failed = err
		default:
			if cur, err = mergeMessage(cur, patch, changes); err != nil {
				failed = err
				continue
			}
			for _, ch := range changes {
				results = append(results, ch.result)
			}
		}
		if !more {
			if bad != nil {
				return nil, nil, &inputError{messageError(patch, badMsg, msg+1, bad)}
			}
		}
	}
	if files == 0 {
		return nil, nil, &inputError{fmt.Errorf("patch %s: no file changes found (is it a diff?)", patch)}
	}
	if failed != nil {
		return nil, nil, failed
	}
	return cur, results, nil
}

// messageRun parses the pieces of one message, as they come, and computes their file
// diffs against st, several at once: each reads only st, and reading the tree is most of
// the work.
type messageRun struct {
	st        *state
	patch     string
	maxOffset int
	apply     bool
	work      chan indexed
	wg        sync.WaitGroup
	mu        sync.Mutex
	results   []pieceResult
	failedAt  atomic.Int64 // the first piece that failed to apply, as far as known
	n         int
}

type indexed struct {
	i int
	p piece
}

type pieceResult struct {
	changes []fileChange
	files   int
	err     error
}

func startMessage(st *state, patch string, maxOffset int, apply bool) *messageRun {
	m := &messageRun{st: st, patch: patch, maxOffset: maxOffset, apply: apply, work: make(chan indexed, maxAppliers)}
	m.failedAt.Store(1 << 62)
	for range min(runtime.GOMAXPROCS(0), maxAppliers) {
		m.wg.Go(func() {
			for w := range m.work {
				r := m.do(w.i, w.p)
				m.mu.Lock()
				m.results[w.i] = r
				m.mu.Unlock()
			}
		})
	}
	return m
}

func (m *messageRun) add(p piece) {
	m.mu.Lock()
	m.results = append(m.results, pieceResult{})
	m.mu.Unlock()
	m.work <- indexed{m.n, p}
	m.n++
}

func (m *messageRun) do(i int, p piece) pieceResult {
	files, err := parsePiece(m.patch, p)
	r := pieceResult{files: len(files)}
	if err != nil {
		r.err = &inputError{err}
		return r
	}
	if !m.apply || int64(i) > m.failedAt.Load() {
		return r // parsed still: a later malformed piece is bad input
	}
	for _, f := range files {
		c, err := applyFile(m.st, m.patch, f, m.maxOffset)
		if err != nil {
			r.err = err
			lowerTo(&m.failedAt, int64(i))
			break
		}
		r.changes = append(r.changes, c)
	}
	return r
}

// wait returns the message's changes in order and how many file diffs it has. The first
// input error in order wins over any conflict; else the first conflict in order.
func (m *messageRun) wait() ([]fileChange, int, error) {
	close(m.work)
	m.wg.Wait()
	n := 0
	var ie *inputError
	var inputErr, conflict error
	for _, r := range m.results {
		n += r.files
		switch {
		case r.err == nil:
		case errors.As(r.err, &ie):
			if inputErr == nil {
				inputErr = r.err
			}
		case conflict == nil:
			conflict = r.err
		}
	}
	if inputErr != nil {
		return nil, n, inputErr
	}
	if conflict != nil {
		return nil, n, conflict
	}
	var out []fileChange
	for _, r := range m.results {
		out = append(out, r.changes...)
	}
	return out, n, nil
}

// mergeMessage makes the state after one message from its changes, computed against st.
func mergeMessage(st *state, patch string, changes []fileChange) (*state, error) {
	freed := map[string]bool{}
	for _, c := range changes {
		if c.remove != "" {
			freed[c.remove] = true
		}
	}
	next := st.fork()
	for _, c := range changes {
		if c.remove != "" {
			next.changes[c.remove] = absentNode()
		}
	}
	written := map[string]bool{}
	for _, c := range changes {
		if c.target == "" {
			continue
		}
		if written[c.target] {
			return nil, &ConflictError{Patch: patch, File: c.target, Reason: "the patch writes this file twice"}
		}
		written[c.target] = true
		if c.fresh {
			if err := checkFresh(st, next, patch, c.target, freed[c.target]); err != nil {
				return nil, err
			}
		}
		next.changes[c.target] = c.node
	}
	return next, nil
}
