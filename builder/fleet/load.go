// Package fleet compares many nodes' verify-install reports: the failure this tool exists
// to prevent (one node whose installed copy, NVSHMEM, NCCL or NIC mapping differs from
// the others) is only visible across nodes. It reads the reports, finds each check whose
// status differs between nodes and each node that differs from the majority, and says
// how to fix each. The command line only prints what Compare returns.
//
// Reports are read as streams and never held whole: a node keeps its report's header and
// one small record per check (interned id, status); the texts of a check (found, fix,
// why) are read again only for the checks that differ. A fleet of large reports thus
// takes about the memory of one report, and the comparison is linear in the checks.
package fleet

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/epbuild/epbuild/builder/acceptance"
	"github.com/epbuild/epbuild/builder/host"
	"github.com/epbuild/epbuild/builder/verify"
)

// Node is one node's report as read, or why there is none to read (Problem).
type Node struct {
	// Name is the report's hostname, else its file name without .json (Slurm and the
	// Kubernetes Job in docs/fleet.md name the files after the node).
	Name string `json:"name"`
	File string `json:"file"`
	// Hostname, SchemaVersion and EpbuildVersion are the report's own fields, when it has
	// them (older reports do not).
	Hostname       string `json:"hostname,omitempty"`
	SchemaVersion  string `json:"schema_version,omitempty"`
	EpbuildVersion string `json:"epbuild_version,omitempty"`
	// ManifestSHA256 is the installed manifest.json's sha256, when the report has it.
	ManifestSHA256 string `json:"manifest_sha256,omitempty"`
	// Problem says why the node has no report to compare: none was written, or it cannot
	// be read (File names it). Such a node is a failing row; the others are still compared.
	Problem   string `json:"problem,omitempty"`
	problemAt string // ":line:col" of a JSON error in the report
	// Unlisted: a host list was given and does not name this node.
	Unlisted bool `json:"unlisted,omitempty"`
	// Tests are the results of `epbuild test --json` on this node, when given; TestsFile
	// is that document.
	Tests     []acceptance.Result `json:"-"`
	TestsFile string              `json:"-"`
	// testsOnly: the node wrote an epbuild test document and no verify-install report
	// was given for it: it takes part in the bandwidths only.
	testsOnly bool
	testDoc   bool // the document read is an epbuild test one
	// Report is the report's header (prefix, recipe, plan, artifact, mapping). Load leaves
	// its Checks nil (they are read as a stream); a node built in memory may carry them.
	Report verify.VerifyReport `json:"-"`

	tab      *table
	checks   []idStatus                    // each check id once, in report order
	facts    map[string]verify.VerifyCheck // the checks a facet reads
	counts   map[string]int
	failed   bool
	maxBytes int64
	stamp    stamp // the file as first read: a report that changes is not compared half-read
}

// idStatus is one check of a node: its id and status, interned in the fleet's table.
type idStatus struct {
	id     int32
	status uint8
}

// table interns check ids and statuses for the whole fleet, so that each node's record of
// its checks is 8 bytes a check however long the ids.
type table struct {
	ids      map[string]int32
	idNames  []string
	statuses map[string]uint8
	stNames  []string
	// visits counts the checks read, over every pass: the measure of the comparison's
	// work, which a test bounds (linear in the checks, never their square).
	visits int
}

func newTable() *table {
	return &table{ids: map[string]int32{}, statuses: map[string]uint8{}}
}

// maxStatuses bounds the distinct statuses (verify-install writes four).
const maxStatuses = 255

func (t *table) id(s string) int32 {
	if i, ok := t.ids[s]; ok {
		return i
	}
	i := int32(len(t.idNames))
	t.ids[s] = i
	t.idNames = append(t.idNames, s)
	return i
}

func (t *table) status(s string) (uint8, error) {
	if i, ok := t.statuses[s]; ok {
		return i, nil
	}
	if len(t.stNames) >= maxStatuses {
		return 0, fmt.Errorf("more than %d distinct check statuses: not a verify-install --json report", maxStatuses)
	}
	i := uint8(len(t.stNames))
	t.statuses[s] = i
	t.stNames = append(t.stNames, s)
	return i, nil
}

// factIDs are the checks whose texts a facet compares (facets()).
var factIDs = map[string]bool{"process.single-nvshmem": true, "host.nccl.version": true}

// reportFile is the header of what verify-install --json (and host check --json) print:
// the fields that name the node and the writer, and the report's own.
type reportFile struct {
	OK             *bool
	Hostname       string
	SchemaVersion  json.RawMessage
	EpbuildVersion string
	ManifestSHA256 string
	Report         verify.VerifyReport
	// Command and Tests are an epbuild test --json document's (command "test").
	Command string
	Tests   []acceptance.Result
}

// testCommand is the envelope's command of an epbuild test --json document.
const testCommand = "test"

// maxTests bounds the tests of one document (a recipe declares a handful).
const maxTests = 4096

// InputError is an argument that cannot be used: bad input, exit 2.
type InputError struct {
	File string
	Err  error
}

func (e *InputError) Error() string { return fmt.Sprintf("%s: %v", e.File, e.Err) }
func (e *InputError) Unwrap() error { return e.Err }
func (e *InputError) ExitCode() int { return 2 }

// DefaultMaxReport bounds one report file; a node's report is tens of KiB.
const DefaultMaxReport = 64 << 20

// LoadOptions says how to read the reports.
type LoadOptions struct {
	// MaxBytes bounds each report (0: DefaultMaxReport); a larger one is a failing row.
	MaxBytes int64
	// Expected are the nodes that must have reported (a host list, the Slurm
	// allocation); nil: whichever reported. A listed node without a report is a failing
	// row, and a report from a node not listed is a difference.
	Expected []string
}

// Load reads the reports in paths: files, and the *.json files of directories (not
// recursive), in name order. A report that cannot be read is a node with a Problem, not
// an error: the error is for paths that do not exist or hold no report at all.
func Load(paths []string, opt LoadOptions) ([]Node, error) {
	if opt.MaxBytes <= 0 {
		opt.MaxBytes = DefaultMaxReport
	}
	var files []string
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			return nil, &InputError{File: p, Err: err}
		}
		if !st.IsDir() {
			files = append(files, p)
			continue
		}
		m, err := filepath.Glob(filepath.Join(p, "*.json"))
		if err != nil {
			return nil, &InputError{File: p, Err: err}
		}
		if len(m) == 0 && opt.Expected == nil {
			return nil, &InputError{File: p, Err: errors.New("no *.json reports in this directory")}
		}
		sort.Strings(m)
		files = append(files, m...)
	}
	if len(files) == 0 && opt.Expected == nil {
		return nil, &InputError{File: "-", Err: errors.New("no reports given")}
	}
	tab := newTable()
	var nodes, tests []Node
	for _, f := range files {
		n := readNode(f, opt.MaxBytes, tab)
		if n.testDoc {
			tests = append(tests, n)
		} else {
			nodes = append(nodes, n)
		}
	}
	// two reports with one hostname stay apart, by file (Compare reports the duplicate)
	apart(nodes)
	apart(tests)
	if opt.Expected != nil {
		if len(nodes) > 0 || len(tests) == 0 {
			nodes = matchExpected(nodes, opt.Expected)
		} else {
			tests = matchExpected(tests, opt.Expected)
		}
	}
	return joinTests(nodes, tests), nil
}

func apart(nodes []Node) {
	count := map[string]int{}
	for _, n := range nodes {
		count[n.Name]++
	}
	for i := range nodes {
		if count[nodes[i].Name] > 1 {
			nodes[i].Name += " (" + filepath.Base(nodes[i].File) + ")"
		}
	}
}

// joinTests gives each node the epbuild test document of its name; a document of a node
// without a verify-install report is a node of its own, that takes part in the
// bandwidths only. A test document that cannot be read is a node with a Problem.
func joinTests(nodes, tests []Node) []Node {
	byName := map[string]int{}
	for i, n := range nodes {
		byName[n.Name] = i
	}
	for _, t := range tests {
		if i, ok := byName[t.Name]; ok && t.Problem == "" && nodes[i].TestsFile == "" {
			nodes[i].Tests, nodes[i].TestsFile = t.Tests, t.File
			continue
		}
		if t.Problem == "" {
			t.testsOnly, t.TestsFile = true, t.File
		}
		nodes = append(nodes, t)
	}
	return nodes
}

// matchExpected pairs each expected host with its report, by hostname or file name,
// whole or up to the first dot (Slurm lists short names; hostname may print the FQDN).
// Hosts without a report are appended as missing nodes; reports of hosts not listed are
// marked Unlisted.
func matchExpected(nodes []Node, expected []string) []Node {
	byKey := map[string][]int{}
	for i, n := range nodes {
		stem := strings.TrimSuffix(filepath.Base(n.File), ".json")
		for _, k := range []string{n.Hostname, stem, shortName(n.Hostname), shortName(stem)} {
			if k != "" {
				byKey[k] = append(byKey[k], i)
			}
		}
	}
	matched := make([]bool, len(nodes))
	seen := map[string]bool{}
	var missing []Node
	for _, h := range expected {
		if h == "" || seen[h] {
			continue
		}
		seen[h] = true
		found := false
		for _, k := range []string{h, shortName(h)} {
			for _, i := range byKey[k] {
				if !matched[i] {
					matched[i], found = true, true
					break
				}
			}
			if found {
				break
			}
		}
		if !found {
			missing = append(missing, Node{Name: h, Problem: "no report"})
		}
	}
	for i := range nodes {
		nodes[i].Unlisted = !matched[i]
	}
	return append(nodes, missing...)
}

func shortName(h string) string {
	s, _, _ := strings.Cut(h, ".")
	return s
}

// readNode reads one report; what goes wrong is the node's Problem.
func readNode(file string, maxBytes int64, tab *table) Node {
	n := Node{File: file, Name: strings.TrimSuffix(filepath.Base(file), ".json"), maxBytes: maxBytes}
	var hdr reportFile
	if err := n.stream(tab, &hdr, nil); err != nil {
		n.Problem = err.Error()
		if pe := (*posError)(nil); errors.As(err, &pe) {
			n.Problem, n.problemAt = pe.err.Error(), pe.pos
		}
		n.checks, n.facts, n.counts = nil, nil, nil
		return n
	}
	n.Hostname, n.EpbuildVersion, n.ManifestSHA256 = strings.TrimSpace(hdr.Hostname), hdr.EpbuildVersion, hdr.ManifestSHA256
	if hdr.Command == testCommand {
		n.testDoc, n.Tests = true, hdr.Tests
		n.checks, n.facts, n.counts = nil, nil, map[string]int{}
		for i := range n.Tests {
			// what fleet shows of a test is its status, reason and bandwidths
			n.Tests[i].Tail, n.Tests[i].Argv = nil, nil
		}
	}
	n.SchemaVersion = strings.Trim(string(hdr.SchemaVersion), `"`)
	n.Report = hdr.Report
	if n.Hostname != "" {
		n.Name = n.Hostname
	}
	return n
}

// posError is a JSON error at a line and column of the report.
type posError struct {
	pos string // ":line:col", or ""
	err error
}

func (e *posError) Error() string { return e.pos + ": " + e.err.Error() }
func (e *posError) Unwrap() error { return e.err }

// stamp identifies a file's contents well enough to see it rewritten between two reads.
type stamp struct {
	size int64
	mod  time.Time
}

// openReport opens a report without blocking on it (a FIFO, a device) and refuses
// anything but a regular file no larger than maxBytes.
func openReport(file string, maxBytes int64) (*os.File, stamp, error) {
	f, err := os.OpenFile(file, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, stamp{}, err
	}
	st, err := f.Stat()
	switch {
	case err != nil:
		f.Close()
		return nil, stamp{}, err
	case !st.Mode().IsRegular():
		f.Close()
		return nil, stamp{}, fmt.Errorf("not a regular file (%s): a report is a file verify-install --json wrote", st.Mode().Type())
	case st.Size() > maxBytes:
		f.Close()
		return nil, stamp{}, fmt.Errorf("%d bytes, over the limit of %d bytes (fleet report --max-report-bytes): a verify-install report is far smaller", st.Size(), maxBytes)
	}
	return f, stamp{size: st.Size(), mod: st.ModTime()}, nil
}

// countReader counts the bytes read, to refuse a file that grows past the limit.
type countReader struct {
	r io.Reader
	n int64
}

func (c *countReader) Read(p []byte) (int, error) {
	k, err := c.r.Read(p)
	c.n += int64(k)
	return k, err
}

// stream reads the node's report once: on the first read (hdr not nil) it records each
// check's id and status in tab and the header in hdr; each, when not nil, gets every check
// in report order. A node built in memory is streamed from its Report.Checks.
func (n *Node) stream(tab *table, hdr *reportFile, each func(verify.VerifyCheck) error) error {
	var seen map[int32]bool
	if hdr != nil || n.tab != tab {
		n.tab, n.checks, n.facts, n.counts, n.failed = tab, nil, map[string]verify.VerifyCheck{}, map[string]int{}, false
		seen = map[int32]bool{}
	}
	i := 0
	visit := func(c verify.VerifyCheck) error {
		i++
		tab.visits++
		if c.ID == "" || c.Status == "" {
			return fmt.Errorf("check %d has no id or status: not a verify-install --json report", i)
		}
		if seen != nil {
			id := tab.id(c.ID)
			n.counts[string(c.Status)]++
			n.failed = n.failed || c.Status == "fail"
			if !seen[id] {
				seen[id] = true
				st, err := tab.status(string(c.Status))
				if err != nil {
					return err
				}
				n.checks = append(n.checks, idStatus{id: id, status: st})
				if factIDs[c.ID] {
					n.facts[c.ID] = c
				}
			}
		}
		if each != nil {
			return each(c)
		}
		return nil
	}
	if n.File == "" || n.Report.Checks != nil {
		for _, c := range n.Report.Checks {
			if err := visit(c); err != nil {
				return err
			}
		}
		if i == 0 {
			return errors.New("no checks: not a verify-install --json report")
		}
		return nil
	}
	max := n.maxBytes
	if max <= 0 {
		max = DefaultMaxReport
	}
	f, st, err := openReport(n.File, max)
	if err != nil {
		return err
	}
	defer f.Close()
	if hdr != nil {
		n.stamp = st
	} else if st != n.stamp {
		return errors.New("the report changed while it was compared: run fleet report again once the nodes have written theirs")
	}
	cr := &countReader{r: io.LimitReader(f, max+1)}
	if hdr == nil {
		hdr = &reportFile{}
	}
	off, err := decodeReport(bufio.NewReaderSize(cr, 64<<10), hdr, visit)
	switch {
	case cr.n > max:
		return fmt.Errorf("grew past the limit of %d bytes (fleet report --max-report-bytes) while read", max)
	case errors.As(err, new(*json.SyntaxError)) || errors.As(err, new(*json.UnmarshalTypeError)) || errors.Is(err, io.ErrUnexpectedEOF):
		return &posError{pos: lineCol(n.File, off), err: fmt.Errorf("not JSON: %v; write it with epbuild verify-install --json > FILE", err)}
	case err != nil:
		return err
	case hdr.Command == testCommand:
		if hdr.Tests == nil {
			return errors.New(`no "tests": not an epbuild test --json document`)
		}
		return nil
	case i == 0:
		return errors.New("no checks: not a verify-install --json report")
	}
	if seen != nil {
		// kept for the whole comparison: no spare capacity, nodes times checks of it
		n.checks = slices.Clone(n.checks)
	}
	return nil
}

// decodeReport reads a report from r as a stream of tokens: the header's fields into hdr
// and each element of "checks", one at a time, to each. It returns the input offset where
// it stopped, for an error's line and column.
func decodeReport(r io.Reader, hdr *reportFile, each func(verify.VerifyCheck) error) (int64, error) {
	dec := json.NewDecoder(r)
	if err := expectDelim(dec, '{'); err != nil {
		return dec.InputOffset(), err
	}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return dec.InputOffset(), err
		}
		key, _ := t.(string)
		var dst any
		switch key {
		case "checks":
			if err := decodeChecks(dec, each); err != nil {
				return dec.InputOffset(), err
			}
			continue
		case "ok":
			dst = &hdr.OK
		case "hostname":
			dst = &hdr.Hostname
		case "schema_version":
			dst = &hdr.SchemaVersion
		case "epbuild_version":
			dst = &hdr.EpbuildVersion
		case "manifest_sha256":
			dst = &hdr.ManifestSHA256
		case "prefix":
			dst = &hdr.Report.Prefix
		case "recipe":
			dst = &hdr.Report.Recipe
		case "plan_key":
			dst = &hdr.Report.PlanKey
		case "artifact":
			dst = &hdr.Report.Artifact
		case "mapping_line":
			dst = &hdr.Report.MappingLine
		case "command":
			dst = &hdr.Command
		case "tests":
			if err := decodeTests(dec, &hdr.Tests); err != nil {
				return dec.InputOffset(), err
			}
			continue
		default:
			dst = new(json.RawMessage) // pairs, facts, traffic...: not compared
		}
		if err := dec.Decode(dst); err != nil {
			return dec.InputOffset(), err
		}
	}
	if err := expectDelim(dec, '}'); err != nil {
		return dec.InputOffset(), err
	}
	if _, err := dec.Token(); err != io.EOF {
		return dec.InputOffset(), &json.SyntaxError{Offset: dec.InputOffset()}
	}
	return dec.InputOffset(), nil
}

func decodeChecks(dec *json.Decoder, each func(verify.VerifyCheck) error) error {
	t, err := dec.Token()
	if err != nil || t == nil {
		return err // null: no checks
	}
	if d, ok := t.(json.Delim); !ok || d != '[' {
		return errors.New(`"checks" is not a list: not a verify-install --json report`)
	}
	for dec.More() {
		var c verify.VerifyCheck
		if err := dec.Decode(&c); err != nil {
			return err
		}
		if err := each(c); err != nil {
			return err
		}
	}
	return expectDelim(dec, ']')
}

// decodeTests reads the "tests" of an epbuild test document, one at a time, at most
// maxTests of them, each with a name and a status.
func decodeTests(dec *json.Decoder, out *[]acceptance.Result) error {
	t, err := dec.Token()
	if err != nil || t == nil {
		return err
	}
	if d, ok := t.(json.Delim); !ok || d != '[' {
		return errors.New(`"tests" is not a list: not an epbuild test --json document`)
	}
	*out = []acceptance.Result{}
	for dec.More() {
		if len(*out) == maxTests {
			return fmt.Errorf("more than %d tests: not an epbuild test --json document", maxTests)
		}
		var r acceptance.Result
		if err := dec.Decode(&r); err != nil {
			return err
		}
		if r.Name == "" || r.Status == "" {
			return fmt.Errorf("test %d has no name or status: not an epbuild test --json document", len(*out)+1)
		}
		*out = append(*out, r)
	}
	return expectDelim(dec, ']')
}

func expectDelim(dec *json.Decoder, want json.Delim) error {
	t, err := dec.Token()
	if err != nil {
		if err == io.EOF {
			return io.ErrUnexpectedEOF
		}
		return err
	}
	if d, ok := t.(json.Delim); !ok || d != want {
		return fmt.Errorf("found %v where %q was expected: not a verify-install --json report", t, string(want))
	}
	return nil
}

// lineCol gives ":line:col" of a byte offset in file, read again for the error only.
func lineCol(file string, off int64) string {
	f, err := os.OpenFile(file, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil || off <= 0 {
		return ""
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return ""
	}
	line, col := 1, int64(1)
	br := bufio.NewReader(io.LimitReader(f, off))
	buf := make([]byte, 64<<10)
	for {
		k, err := br.Read(buf)
		for _, b := range buf[:k] {
			if b == '\n' {
				line, col = line+1, 1
			} else {
				col++
			}
		}
		if err != nil {
			break
		}
	}
	return fmt.Sprintf(":%d:%d", line, col)
}

// maxHostsFile bounds a host list (a name a line: 64 Ki hosts fit many times over).
const maxHostsFile = 16 << 20

// ReadHosts reads the nodes that must have reported: host.ReadHostsFile's format (one host
// a line, '#' comments, Slurm's bracket syntax), with the "node/" that
// `kubectl get nodes -o name` prints before each name taken off. Like a report, it must
// be a regular file (a FIFO is refused, not waited on).
func ReadHosts(file string) ([]string, error) {
	f, _, err := openReport(file, maxHostsFile)
	if err != nil {
		return nil, fmt.Errorf("read the host list: %w", err)
	}
	f.Close()
	hosts, err := host.ReadHostsFile(file)
	if err != nil {
		return nil, err
	}
	for i, h := range hosts {
		hosts[i] = strings.TrimPrefix(h, "node/")
	}
	return hosts, nil
}
