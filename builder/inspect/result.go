package inspect

// Result statuses. A check never panics or returns an error: a file it cannot
// read is a failed check whose Why says what went wrong.
const (
	StatusPass = "pass"
	StatusFail = "fail"
	StatusWarn = "warn"
	StatusSkip = "skip"
)

// Result is one check's outcome in the shape the report renders.
type Result struct {
	// ID is stable across runs so reports can be compared; it names the
	// check kind, the file (base name) and the subject.
	ID string `json:"id"`
	// Status is one of StatusPass, StatusFail, StatusWarn, StatusSkip.
	Status   string `json:"status"`
	Expected string `json:"expected"`
	Found    string `json:"found"`
	// Why explains a status other than pass (and a pass that needed a
	// fallback, such as PTX the driver must JIT).
	Why string `json:"why,omitempty"`
}

// OK reports whether the result does not fail the job.
func (r Result) OK() bool { return r.Status != StatusFail }
