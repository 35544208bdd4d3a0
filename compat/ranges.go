package compat

import "fmt"

// tri is a three-valued truth: a condition over facts that are not known (a commit the
// ancestry source has never seen, a host not probed, a recipe that allows a range of
// CUDA versions) is unknown, never silently false.
type tri int8

const (
	no tri = iota
	yes
	unknown
)

func (t tri) String() string {
	switch t {
	case yes:
		return "true"
	case no:
		return "false"
	}
	return "unknown"
}

func triOf(b bool) tri {
	if b {
		return yes
	}
	return no
}

// decideVersion decides whether a fact satisfies cond. A fact is a version ("12.9",
// "3.5.19-1") or, at plan stage, a constraint the recipe sets (">=12.3"): then the answer
// is yes when every version it allows satisfies cond, no when none does, and unknown
// when some do.
func decideVersion(what, fact string, cond Constraint) (tri, string) {
	if fact == "" {
		return unknown, fmt.Sprintf("%s: no version known", what)
	}
	if v, err := ParseVersion(fact); err == nil {
		if cond.Check(v) {
			return yes, fmt.Sprintf("%s %s satisfies %s", what, fact, cond)
		}
		return no, fmt.Sprintf("%s %s does not satisfy %s", what, fact, cond)
	}
	fc, err := ParseConstraint(fact)
	if err != nil {
		return unknown, fmt.Sprintf("%s %q is neither a version nor a constraint", what, fact)
	}
	fs, ok1 := intervals(fc)
	cs, ok2 := intervals(cond)
	if !ok1 || !ok2 {
		return unknown, fmt.Sprintf("%s %s: cannot compare with %s", what, fact, cond)
	}
	all, none := true, true
	for _, f := range fs {
		if f.empty() {
			continue
		}
		inOne := false
		for _, c := range cs {
			if f.overlaps(c) {
				none = false
			}
			if f.within(c) {
				inOne = true
			}
		}
		if !inOne {
			all = false
		}
	}
	switch {
	case none:
		return no, fmt.Sprintf("no %s allowed by %s satisfies %s", what, fact, cond)
	case all:
		return yes, fmt.Sprintf("every %s allowed by %s satisfies %s", what, fact, cond)
	}
	return unknown, fmt.Sprintf("%s %s allows versions that satisfy %s and versions that do not", what, fact, cond)
}

// interval is a range of versions; a nil bound is unbounded. Local parts (+cu129) are
// dropped, as Constraint.Check drops them for range checks.
type interval struct {
	lo, hi         *Version
	loIncl, hiIncl bool
}

// intervals turns a constraint into one interval per "||" alternative; false when it uses
// an operator that is not a range (!=, ~, ^, wildcards).
func intervals(c Constraint) ([]interval, bool) {
	out := make([]interval, 0, len(c.or))
	for _, and := range c.or {
		var iv interval
		for _, cl := range and {
			v := cl.ver
			v.local = ""
			switch cl.op {
			case ">=":
				iv.raiseLo(v, true)
			case ">":
				iv.raiseLo(v, false)
			case "<=":
				iv.lowerHi(v, true)
			case "<":
				iv.lowerHi(v, false)
			case "=":
				iv.raiseLo(v, true)
				iv.lowerHi(v, true)
			default:
				return nil, false
			}
		}
		out = append(out, iv)
	}
	return out, true
}

func (iv *interval) raiseLo(v Version, incl bool) {
	switch {
	case iv.lo == nil || v.Compare(*iv.lo) > 0:
		iv.lo, iv.loIncl = &v, incl
	case v.Compare(*iv.lo) == 0:
		iv.loIncl = iv.loIncl && incl
	}
}

func (iv *interval) lowerHi(v Version, incl bool) {
	switch {
	case iv.hi == nil || v.Compare(*iv.hi) < 0:
		iv.hi, iv.hiIncl = &v, incl
	case v.Compare(*iv.hi) == 0:
		iv.hiIncl = iv.hiIncl && incl
	}
}

func (iv interval) empty() bool {
	if iv.lo == nil || iv.hi == nil {
		return false
	}
	c := iv.lo.Compare(*iv.hi)
	return c > 0 || c == 0 && !(iv.loIncl && iv.hiIncl)
}

func (iv interval) overlaps(o interval) bool {
	x := iv
	if o.lo != nil {
		x.raiseLo(*o.lo, o.loIncl)
	}
	if o.hi != nil {
		x.lowerHi(*o.hi, o.hiIncl)
	}
	return !x.empty()
}

// within reports whether every version of iv is in o.
func (iv interval) within(o interval) bool {
	if o.lo != nil {
		if iv.lo == nil {
			return false
		}
		c := iv.lo.Compare(*o.lo)
		if c < 0 || c == 0 && iv.loIncl && !o.loIncl {
			return false
		}
	}
	if o.hi != nil {
		if iv.hi == nil {
			return false
		}
		c := iv.hi.Compare(*o.hi)
		if c > 0 || c == 0 && iv.hiIncl && !o.hiIncl {
			return false
		}
	}
	return true
}
