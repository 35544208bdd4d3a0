package source

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"syscall"
)

// Kind classifies a failure so that the command line can map it to an exit code.
type Kind int

// The kinds.
const (
	// KindBadPin: the input is wrong (short SHA, a ref or tag pointing elsewhere, a sha256
	// that does not match): exit 2, the user must change the recipe.
	KindBadPin Kind = iota + 1
	// KindFetch: the fetch failed (corrupted, absent from the mirror, refused): exit 1.
	KindFetch
	// KindUnreachable: the host of a source cannot be reached (DNS, no route, connection
	// refused): the environment lacks the network, exit 3; a mirror is the fix.
	KindUnreachable
)

func (k Kind) String() string {
	switch k {
	case KindBadPin:
		return "bad pin"
	case KindFetch:
		return "fetch failed"
	case KindUnreachable:
		return "unreachable"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Error is a classified failure. errors.Is(err, ErrBadPin) and errors.Is(err, ErrFetch)
// match any *Error of that kind.
type Error struct {
	Kind Kind
	Msg  string // what was being done to what, and what went wrong
	Err  error  // the cause, if any
	Host string // KindUnreachable: the host that could not be reached
}

// Sentinels for errors.Is. They carry only a kind; never modify them.
var (
	ErrBadPin = &Error{Kind: KindBadPin, Msg: "bad pin"}
	ErrFetch  = &Error{Kind: KindFetch, Msg: "fetch failed"}
	// ErrUnreachable: a source's host could not be reached.
	ErrUnreachable = &Error{Kind: KindUnreachable, Msg: "unreachable"}
)

// MirrorHint is what a fetch that cannot reach its host tells the user to do.
const MirrorHint = "pass --mirror DIR or set EPBUILD_MIRROR (epbuild mirror RECIPE DIR makes one where there is network)"

func (e *Error) Error() string {
	if e.Kind == KindUnreachable && e.Host != "" {
		s := "cannot reach " + e.Host + " (DNS/connection error): " + MirrorHint
		if e.Msg != "" {
			s += "; " + e.Msg
		}
		if e.Err != nil {
			s += ": " + e.Err.Error()
		}
		return s
	}
	if e.Err != nil {
		return e.Msg + ": " + e.Err.Error()
	}
	return e.Msg
}

func (e *Error) Unwrap() error { return e.Err }

// Is matches by kind, so that callers test the class, not the instance; an unreachable
// host is also a failed fetch.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && (t.Kind == e.Kind || t.Kind == KindFetch && e.Kind == KindUnreachable)
}

func badPin(err error, format string, args ...any) error {
	return &Error{Kind: KindBadPin, Msg: fmt.Sprintf(format, args...), Err: err}
}

// fetchErr is a failed fetch; one that could not reach its host says so (exit 3).
func fetchErr(err error, format string, args ...any) error {
	e := &Error{Kind: KindFetch, Msg: fmt.Sprintf(format, args...), Err: err}
	if host, ok := unreachable(err); ok {
		e.Kind, e.Host = KindUnreachable, host
	}
	return e
}

// unreachable reports whether err is a failure to reach a host (name resolution, no
// route, refused or timed-out connection), with the host when it can be told.
func unreachable(err error) (string, bool) {
	if err == nil {
		return "", false
	}
	var prev *Error
	if errors.As(err, &prev) && prev.Kind == KindUnreachable {
		return prev.Host, true
	}
	var dns *net.DNSError
	var op *net.OpError
	switch {
	case errors.As(err, &dns):
		// the name is the host asked for, whatever the URL's port
	case errors.As(err, &op) && op.Op == "dial",
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ENETUNREACH), errors.Is(err, syscall.EHOSTUNREACH):
	default:
		return "", false
	}
	if dns != nil && dns.Name != "" {
		return dns.Name, true
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		if u, perr := url.Parse(ue.URL); perr == nil && u.Host != "" {
			return u.Host, true
		}
	}
	if op != nil && op.Addr != nil {
		return op.Addr.String(), true
	}
	return "the source's host", true
}

// ExitCode: a bad pin is bad input (2); an unreachable host, the environment (3); a
// failed fetch, a failed job (1).
func (e *Error) ExitCode() int {
	switch e.Kind {
	case KindBadPin:
		return 2
	case KindUnreachable:
		return 3
	}
	return 1
}
