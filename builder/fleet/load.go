// Package fleet compares many nodes' verify-install reports: the failure this tool exists
// to prevent (one node whose installed copy, NVSHMEM, NCCL or NIC mapping differs from
// the others) is only visible across nodes. It reads the reports, finds each check whose
// status differs between nodes and each node that differs from the majority, and says
// how to fix each. The command line only prints what Compare returns.
package fleet

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/epbuild/epbuild/builder"
)

// Node is one node's report as read.
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
	ManifestSHA256 string               `json:"manifest_sha256,omitempty"`
	Report         builder.VerifyReport `json:"-"`
}

// reportFile is what verify-install --json (and host check --json) print: the report, its
// verdict, and the fields that name the node and the writer.
type reportFile struct {
	OK             *bool           `json:"ok"`
	Hostname       string          `json:"hostname"`
	SchemaVersion  json.RawMessage `json:"schema_version"`
	EpbuildVersion string          `json:"epbuild_version"`
	ManifestSHA256 string          `json:"manifest_sha256"`
	builder.VerifyReport
}

// InputError is a report that cannot be read: bad input, exit 2.
type InputError struct {
	File string
	Err  error
}

func (e *InputError) Error() string { return fmt.Sprintf("%s: %v", e.File, e.Err) }
func (e *InputError) Unwrap() error { return e.Err }
func (e *InputError) ExitCode() int { return 2 }

// maxReport bounds one report file; a node's report is tens of KiB.
const maxReport = 64 << 20

// Load reads the reports in paths: files, and the *.json files of directories (not
// recursive), in name order.
func Load(paths []string) ([]Node, error) {
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
		if len(m) == 0 {
			return nil, &InputError{File: p, Err: errors.New("no *.json reports in this directory")}
		}
		sort.Strings(m)
		files = append(files, m...)
	}
	if len(files) == 0 {
		return nil, &InputError{File: "-", Err: errors.New("no reports given")}
	}
	nodes := make([]Node, 0, len(files))
	for _, f := range files {
		n, err := readNode(f)
		if err != nil {
			return nil, err
		}
		nodes = append(nodes, n)
	}
	// two reports with one hostname stay apart, by file (Compare reports the duplicate)
	count := map[string]int{}
	for _, n := range nodes {
		count[n.Name]++
	}
	for i := range nodes {
		if count[nodes[i].Name] > 1 {
			nodes[i].Name += " (" + filepath.Base(nodes[i].File) + ")"
		}
	}
	return nodes, nil
}

func readNode(file string) (Node, error) {
	st, err := os.Stat(file)
	switch {
	case err != nil:
		return Node{}, &InputError{File: file, Err: err}
	case !st.Mode().IsRegular():
		return Node{}, &InputError{File: file, Err: errors.New("not a regular file")}
	case st.Size() > maxReport:
		return Node{}, &InputError{File: file, Err: fmt.Errorf("%d bytes: a verify-install report is far smaller", st.Size())}
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return Node{}, &InputError{File: file, Err: err}
	}
	var rf reportFile
	if err := json.Unmarshal(b, &rf); err != nil {
		return Node{}, &InputError{File: file + where(b, err), Err: fmt.Errorf("not JSON: %v; write it with epbuild verify-install --json > FILE", err)}
	}
	if len(rf.Checks) == 0 {
		return Node{}, &InputError{File: file, Err: errors.New("no checks: not a verify-install --json report")}
	}
	for i, c := range rf.Checks {
		if c.ID == "" || c.Status == "" {
			return Node{}, &InputError{File: file, Err: fmt.Errorf("check %d has no id or status: not a verify-install --json report", i+1)}
		}
	}
	n := Node{File: file, Hostname: strings.TrimSpace(rf.Hostname), EpbuildVersion: rf.EpbuildVersion,
		ManifestSHA256: rf.ManifestSHA256, SchemaVersion: strings.Trim(string(rf.SchemaVersion), `"`), Report: rf.VerifyReport}
	n.Name = n.Hostname
	if n.Name == "" {
		n.Name = strings.TrimSuffix(filepath.Base(file), ".json")
	}
	return n, nil
}

// where gives ":line:col" for a JSON syntax error.
func where(b []byte, err error) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	off := int64(-1)
	switch {
	case errors.As(err, &se):
		off = se.Offset
	case errors.As(err, &te):
		off = te.Offset
	}
	if off < 0 || off > int64(len(b)) {
		return ""
	}
	line := bytes.Count(b[:off], []byte("\n")) + 1
	col := off - int64(bytes.LastIndexByte(b[:off], '\n'))
	return fmt.Sprintf(":%d:%d", line, col)
}
