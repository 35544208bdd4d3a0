package source

import "fmt"

// Kind classifies a failure so that the command line can map it to an exit code.
type Kind int

// The kinds.
const (
	// KindBadPin: the input is wrong (short SHA, a ref or tag pointing elsewhere, a sha256
	// that does not match): exit 2, the user must change the recipe.
	KindBadPin Kind = iota + 1
	// KindFetch: the fetch failed (unreachable, corrupted, absent from the mirror): exit 1.
	KindFetch
)

func (k Kind) String() string {
	switch k {
	case KindBadPin:
		return "bad pin"
	case KindFetch:
		return "fetch failed"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Error is a classified failure. errors.Is(err, ErrBadPin) and errors.Is(err, ErrFetch)
// match any *Error of that kind.
type Error struct {
	Kind Kind
	Msg  string // what was being done to what, and what went wrong
	Err  error  // the cause, if any
}

// Sentinels for errors.Is. They carry only a kind; never modify them.
var (
	ErrBadPin = &Error{Kind: KindBadPin, Msg: "bad pin"}
	ErrFetch  = &Error{Kind: KindFetch, Msg: "fetch failed"}
)

func (e *Error) Error() string {
	if e.Err != nil {
		return e.Msg + ": " + e.Err.Error()
	}
	return e.Msg
}

func (e *Error) Unwrap() error { return e.Err }

// Is matches by kind, so that callers test the class, not the instance.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Kind == e.Kind
}

func badPin(err error, format string, args ...any) error {
	return &Error{Kind: KindBadPin, Msg: fmt.Sprintf(format, args...), Err: err}
}

func fetchErr(err error, format string, args ...any) error {
	return &Error{Kind: KindFetch, Msg: fmt.Sprintf(format, args...), Err: err}
}

// ExitCode: a bad pin is bad input (2); a failed fetch, a failed job (1).
func (e *Error) ExitCode() int {
	if e.Kind == KindBadPin {
		return 2
	}
	return 1
}
