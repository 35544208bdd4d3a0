package oci

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"oras.land/oras-go/v2/registry/remote/retry"
)

// newHTTPClient is the client a Client speaks through when the caller gives none: a
// transport that waits at most d.Response for a response's headers, oras-go's retries
// of 5xx and 429 (not of timeouts: a registry that kept us waiting once is not given
// five more chances), and a watchdog on every response body that cuts off a transfer
// slower than d.MinBytes per d.Window.
func newHTTPClient(d Deadlines) *http.Client {
	base := http.DefaultTransport.(*http.Transport).Clone()
	base.ResponseHeaderTimeout = d.Response
	base.TLSHandshakeTimeout = min(base.TLSHandshakeTimeout, d.Response)
	dialer := &net.Dialer{Timeout: min(30*time.Second, d.Response), KeepAlive: 30 * time.Second}
	base.DialContext = dialer.DialContext
	policy := &retry.GenericPolicy{Retryable: retryable, Backoff: retry.DefaultBackoff, MinWait: 200 * time.Millisecond, MaxWait: 3 * time.Second, MaxRetry: 5}
	rt := &retry.Transport{Base: base, Policy: func() retry.Policy { return policy }}
	return &http.Client{Transport: &watchdog{base: rt, d: d}}
}

// retryable is oras-go's predicate without its retry of timeouts.
func retryable(resp *http.Response, err error) (bool, error) {
	if err != nil {
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			return false, err
		}
		if errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.ErrUnexpectedEOF) {
			return true, nil
		}
		return false, err
	}
	return resp.StatusCode == http.StatusRequestTimeout || resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500, nil
}

// watchdog wraps every response body in a stallBody.
type watchdog struct {
	base http.RoundTripper
	d    Deadlines
}

func (w *watchdog) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := w.base.RoundTrip(req)
	if err != nil || resp.Body == nil || resp.Body == http.NoBody {
		return resp, err
	}
	resp.Body = newStallBody(resp.Body, w.d, req.URL.Host)
	return resp, nil
}

// stallBody is a response body that is closed, and reads as a *StallError, when fewer
// than MinBytes arrive within one Window. The windows count bytes the reader took: a
// reader that does not read is not the registry's fault, but every reader here reads
// as fast as it writes a file.
type stallBody struct {
	rc      io.ReadCloser
	d       Deadlines
	host    string
	n       atomic.Int64 // bytes in this window
	stalled atomic.Bool
	once    sync.Once
	timer   *time.Timer
}

func newStallBody(rc io.ReadCloser, d Deadlines, host string) *stallBody {
	b := &stallBody{rc: rc, d: d, host: host}
	b.timer = time.AfterFunc(d.Window, b.tick)
	return b
}

func (b *stallBody) tick() {
	if b.n.Swap(0) >= b.d.MinBytes {
		b.timer.Reset(b.d.Window)
		return
	}
	b.stalled.Store(true)
	b.once.Do(func() { _ = b.rc.Close() }) // unblocks a Read under way
}

func (b *stallBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	b.n.Add(int64(n))
	if err != nil && err != io.EOF && b.stalled.Load() {
		err = &StallError{Host: b.host, Deadlines: b.d}
	}
	if err == io.EOF {
		b.timer.Stop()
	}
	return n, err
}

func (b *stallBody) Close() error {
	b.timer.Stop()
	var err error
	b.once.Do(func() { err = b.rc.Close() })
	return err
}

// StallError is a transfer the registry let stall: fewer than MinBytes within Window.
type StallError struct {
	Host string
	Deadlines
}

func (e *StallError) Error() string {
	return fmt.Sprintf("%s sent fewer than %d bytes within %s", e.Host, e.MinBytes, e.Window)
}

// Timeout reports true: a stall is a timeout (net.Error).
func (e *StallError) Timeout() bool   { return true }
func (e *StallError) Temporary() bool { return false }

// TimeoutError is a registry that did not answer, or sent too slowly, within the
// deadlines: exit 3, as for a registry that cannot be reached (a build cache logs it
// and builds here).
type TimeoutError struct {
	Registry string
	Op       string
	Err      error
}

func (e *TimeoutError) Error() string {
	return fmt.Sprintf("%s: registry %s did not answer in time: %v; it may be overloaded or misbehaving; "+
		"--registry-timeout (EPBUILD_REGISTRY_TIMEOUT) bounds the wait for an answer, --registry-stall (EPBUILD_REGISTRY_STALL) "+
		"the time a transfer may go without %d KiB", e.Op, e.Registry, e.Err, DefaultStallBytes>>10)
}
func (e *TimeoutError) Unwrap() error { return e.Err }
func (e *TimeoutError) ExitCode() int { return exitEnv }

// small bounds a small exchange (a tag, an OCI manifest, a list) by the response
// deadline as a whole: its body is bounded in size too, so it has no reason to be slow.
func (c *Client) small(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, c.opts.Deadlines.Response)
}
