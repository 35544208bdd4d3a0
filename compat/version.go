// Package compat owns versions with vendor meaning and the compatibility rules.
//
// NVIDIA's versions are not semver: "3.2.5-1" is package revision 1 of 3.2.5 (raw semver
// reads it as a prerelease that sorts below 3.2.5), "12.9" means 12.9.0, and
// "2.10.0+cu129" carries the CUDA it was built for. Every comparison of vendor version
// strings in epbuild goes through this file.
package compat

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/Masterminds/semver/v3"
)

// Version is a vendor version: a core X.Y.Z, an optional package revision (-N) and an
// optional local part (+cu129). The zero value is not a valid version.
type Version struct {
	raw    string
	major  uint64
	minor  uint64
	patch  uint64
	rev    uint64
	hasRev bool
	local  string
}

// ParseVersion reads "3.2.5-1", "v3.5.19-1", "12.9", "2.10.0+cu129", "2.22.3-1".
func ParseVersion(s string) (Version, error) {
	v := Version{raw: s}
	t := strings.TrimSpace(s)
	if t != s || t == "" {
		return Version{}, fmt.Errorf("version %q: empty or surrounded by spaces", s)
	}
	t = strings.TrimPrefix(t, "v")
	if i := strings.IndexByte(t, '+'); i >= 0 {
		v.local = t[i+1:]
		t = t[:i]
		if v.local == "" || !isLocal(v.local) {
			return Version{}, fmt.Errorf("version %q: local part after '+' must be letters, digits and dots", s)
		}
	}
	if i := strings.IndexByte(t, '-'); i >= 0 {
		r, err := parseNum(t[i+1:])
		if err != nil {
			return Version{}, fmt.Errorf("version %q: package revision after '-' must be a number (e.g. 3.2.5-1): %w", s, err)
		}
		v.rev, v.hasRev = r, true
		t = t[:i]
	}
	parts := strings.Split(t, ".")
	if len(parts) > 3 {
		return Version{}, fmt.Errorf("version %q: at most three numeric parts (X.Y.Z)", s)
	}
	nums := [3]uint64{}
	for i, p := range parts {
		n, err := parseNum(p)
		if err != nil {
			return Version{}, fmt.Errorf("version %q: part %d: %w", s, i+1, err)
		}
		nums[i] = n
	}
	v.major, v.minor, v.patch = nums[0], nums[1], nums[2]
	return v, nil
}

// MustVersion is ParseVersion for constants in code and tests.
func MustVersion(s string) Version {
	v, err := ParseVersion(s)
	if err != nil {
		panic(err)
	}
	return v
}

func parseNum(s string) (uint64, error) {
	if s == "" {
		return 0, fmt.Errorf("missing number")
	}
	if len(s) > 1 && s[0] == '0' {
		return 0, fmt.Errorf("number %q has a leading zero", s)
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("%q is not a number", s)
		}
	}
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil {
		return 0, fmt.Errorf("number %q is too large", s)
	}
	return n, nil
}

func isLocal(s string) bool {
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.') {
			return false
		}
	}
	return true
}

// String gives the version as it was written.
func (v Version) String() string { return v.raw }

// Canonical gives X.Y.Z[-N][+local], the form used in keys and output.
func (v Version) Canonical() string {
	s := fmt.Sprintf("%d.%d.%d", v.major, v.minor, v.patch)
	if v.hasRev {
		s += fmt.Sprintf("-%d", v.rev)
	}
	if v.local != "" {
		s += "+" + v.local
	}
	return s
}

// Core is X.Y.Z without revision or local part.
func (v Version) Core() string { return fmt.Sprintf("%d.%d.%d", v.major, v.minor, v.patch) }

// Revision is the package revision; a version written without one is revision 0,
// so 3.4.5 and 3.4.5-0 (NVSHMEM's tag v3.4.5-0) name the same release.
func (v Version) Revision() uint64 { return v.rev }

// Local is the part after '+', e.g. "cu129".
func (v Version) Local() string { return v.local }

// IsZero reports whether v is the zero value.
func (v Version) IsZero() bool { return v.raw == "" }

// Compare orders by core, then revision, then local part (byte order), so that the
// order is total: versions equal only when all three are.
func (v Version) Compare(o Version) int {
	for _, p := range [][2]uint64{{v.major, o.major}, {v.minor, o.minor}, {v.patch, o.patch}, {v.rev, o.rev}} {
		if p[0] != p[1] {
			if p[0] < p[1] {
				return -1
			}
			return 1
		}
	}
	return strings.Compare(v.local, o.local)
}

// Less reports v < o.
func (v Version) Less(o Version) bool { return v.Compare(o) < 0 }

// Equal reports v == o, local part included (raw semver ignores "+cu129").
func (v Version) Equal(o Version) bool { return v.Compare(o) == 0 }

// SameRelease reports v == o ignoring the local part.
func (v Version) SameRelease(o Version) bool {
	return v.major == o.major && v.minor == o.minor && v.patch == o.patch && v.rev == o.rev
}

// CUDA gives the CUDA version in a local part such as "cu129" (12.9) or "cu130" (13.0).
func (v Version) CUDA() (Version, bool) {
	for _, part := range strings.Split(v.local, ".") {
		if !strings.HasPrefix(part, "cu") || len(part) < 4 {
			continue
		}
		d := part[2:]
		if _, err := strconv.Atoi(d); err != nil {
			continue
		}
		// the last digit is the minor version: cu118 = 11.8, cu129 = 12.9, cu130 = 13.0
		cv, err := ParseVersion(d[:len(d)-1] + "." + d[len(d)-1:])
		if err == nil {
			return cv, true
		}
	}
	return Version{}, false
}

func (v Version) semver() *semver.Version {
	return semver.New(v.major, v.minor, v.patch, "", "")
}

// Constraint is a set of version conditions such as ">=3.2.5,<3.3" or ">=2.22 || ~2.21.5".
// Plain comparisons use Compare (so revisions count: 3.2.5-1 satisfies >3.2.5); the
// range operators ~, ^ and wildcards are evaluated by Masterminds/semver on the core.
type Constraint struct {
	raw string
	or  [][]clause
}

type clause struct {
	op  string
	ver Version
	sem *semver.Constraints
}

// ParseConstraint reads a constraint; "," (or a space) joins conditions, "||" alternatives.
func ParseConstraint(s string) (Constraint, error) {
	c := Constraint{raw: s}
	if strings.TrimSpace(s) == "" {
		return Constraint{}, fmt.Errorf("constraint %q is empty", s)
	}
	for _, alt := range strings.Split(s, "||") {
		var and []clause
		for _, piece := range strings.Split(alt, ",") {
			fields := strings.Fields(piece)
			if len(fields) == 0 {
				return Constraint{}, fmt.Errorf("constraint %q: empty condition (a stray ',' or '||'?)", s)
			}
			for _, f := range fields {
				cl, err := parseClause(f)
				if err != nil {
					return Constraint{}, fmt.Errorf("constraint %q: %w", s, err)
				}
				and = append(and, cl)
			}
		}
		if len(and) == 0 {
			return Constraint{}, fmt.Errorf("constraint %q: an alternative of '||' is empty", s)
		}
		c.or = append(c.or, and)
	}
	return c, nil
}

func parseClause(f string) (clause, error) {
	op := ""
	for _, o := range []string{">=", "<=", "!=", "==", ">", "<", "="} {
		if strings.HasPrefix(f, o) {
			op = o
			break
		}
	}
	rest := f[len(op):]
	if op == "" && (strings.HasPrefix(f, "~") || strings.HasPrefix(f, "^") || strings.ContainsAny(f, "xX*")) {
		sc, err := semver.NewConstraint(f)
		if err != nil {
			return clause{}, fmt.Errorf("condition %q: %w", f, err)
		}
		return clause{op: "semver", sem: sc}, nil
	}
	if op == "" || op == "==" {
		op = "="
	}
	v, err := ParseVersion(rest)
	if err != nil {
		return clause{}, fmt.Errorf("condition %q: %w", f, err)
	}
	return clause{op: op, ver: v}, nil
}

// String gives the constraint as written.
func (c Constraint) String() string { return c.raw }

// Check reports whether v satisfies the constraint.
func (c Constraint) Check(v Version) bool {
	for _, and := range c.or {
		ok := true
		for _, cl := range and {
			if !cl.check(v) {
				ok = false
				break
			}
		}
		if ok {
			return true
		}
	}
	return false
}

func (cl clause) check(v Version) bool {
	if cl.op == "semver" {
		return cl.sem.Check(v.semver())
	}
	// the local part (+cu129) never decides a range check: 2.10.0+cu129 satisfies >=2.10
	w := v
	w.local = ""
	c := w.Compare(cl.ver)
	if cl.ver.local != "" {
		c = v.Compare(cl.ver)
	}
	switch cl.op {
	case "=":
		return c == 0
	case "!=":
		return c != 0
	case ">":
		return c > 0
	case ">=":
		return c >= 0
	case "<":
		return c < 0
	case "<=":
		return c <= 0
	}
	return false
}

// Satisfies parses constraint and checks v against it.
func (v Version) Satisfies(constraint string) (bool, error) {
	c, err := ParseConstraint(constraint)
	if err != nil {
		return false, err
	}
	return c.Check(v), nil
}
