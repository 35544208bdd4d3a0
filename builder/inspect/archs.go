package inspect

import (
	"fmt"
	"github.com/epbuild/epbuild/builder/check"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Target is a compilation target as nvcc names it: a real architecture
// ("sm_90a", code a GPU runs) or a virtual one ("compute_90", PTX).
type Target struct {
	PTX     bool
	SM      int
	Variant Variant // VariantBase, VariantArch or VariantFamily
}

var targetRE = regexp.MustCompile(`^(sm|compute)_([0-9]{2,3})([af]?)$`)

// ParseTarget parses "sm_90", "sm_90a", "sm_100f", "compute_90".
func ParseTarget(s string) (Target, error) {
	m := targetRE.FindStringSubmatch(s)
	if m == nil {
		return Target{}, fmt.Errorf("CUDA target %q: want sm_NN[a|f] or compute_NN[a|f]", s)
	}
	sm, _ := strconv.Atoi(m[2])
	return Target{PTX: m[1] == "compute", SM: sm, Variant: suffixVariant([]byte(m[3]))}, nil
}

func (t Target) String() string {
	kind := KindCubin
	if t.PTX {
		kind = KindPTX
	}
	return archName(kind, t.SM, t.Variant)
}

// Coverage says how a file provides code for a target.
type Coverage struct {
	Target string `json:"target"`
	// By lists the entries that provide it, cubins first.
	By []string `json:"by,omitempty"`
	// JIT is set when only PTX provides it: the driver compiles it when the
	// library loads (slow first start, and no arch-specific features unless
	// the PTX itself is arch-specific).
	JIT bool `json:"jit,omitempty"`
	// Uncertain lists entries that would provide it if their variant were
	// known, with the reason it is not.
	Uncertain []string `json:"uncertain,omitempty"`
}

// OK reports whether some entry provides the target.
func (c Coverage) OK() bool { return len(c.By) > 0 }

// family groups SMs whose family-specific ("f") code is interchangeable:
// the major version, except sm_101, which NVIDIA put in a family of its own
// (it lacks features the rest of sm_10x has).
func family(sm int) int {
	if sm == 101 {
		return sm
	}
	return sm / 10
}

// Covers reports whether the file carries code for target. A real target
// ("sm_90", "sm_100a") means "a GPU of that architecture can run it", by
// CUDA's compatibility rules:
//   - a base cubin sm_XY runs on X.Z for Z >= Y (same major);
//   - an "a" cubin runs only on exactly its SM;
//   - an "f" cubin runs on later SMs of its family;
//   - PTX is JIT-compiled for any later SM (base), exactly its SM ("a"), or
//     later SMs of its family ("f").
//
// A target with a suffix asks for that variant's features: "sm_90a" needs
// sm_90a code (cubin or compute_90a PTX); base code does not satisfy it. A
// virtual target ("compute_90") needs exactly that PTX.
func (a *ArchInfo) Covers(target string) (Coverage, error) {
	t, err := ParseTarget(target)
	if err != nil {
		return Coverage{}, err
	}
	c := Coverage{Target: target}
	var jit []string
	for _, e := range a.Entries {
		isPTX := e.Kind == KindPTX
		if e.Kind != KindCubin && !isPTX {
			continue
		}
		if t.PTX && !isPTX {
			continue
		}
		if e.Variant == VariantUnknown {
			if e.SM == t.SM || (!t.PTX && family(e.SM) == family(t.SM) && e.SM < t.SM) {
				u := e.Arch
				if e.Note != "" {
					u += " (" + e.Note + ")"
				}
				c.Uncertain = append(c.Uncertain, u)
			}
			continue
		}
		if !provides(e, isPTX, t) {
			continue
		}
		if isPTX && !t.PTX {
			jit = append(jit, e.Arch)
		} else {
			c.By = append(c.By, e.Arch)
		}
	}
	if len(c.By) == 0 && len(jit) > 0 {
		c.By, c.JIT = jit, true
	}
	slices.Sort(c.By)
	c.By = slices.Compact(c.By)
	slices.Sort(c.Uncertain)
	c.Uncertain = slices.Compact(c.Uncertain)
	return c, nil
}

func provides(e CodeEntry, isPTX bool, t Target) bool {
	if t.PTX {
		return e.SM == t.SM && e.Variant == t.Variant
	}
	sameFamilyUpTo := family(e.SM) == family(t.SM) && e.SM <= t.SM
	switch t.Variant {
	case VariantArch:
		return e.Variant == VariantArch && e.SM == t.SM
	case VariantFamily:
		return e.Variant == VariantFamily && sameFamilyUpTo
	}
	switch e.Variant {
	case VariantArch:
		return e.SM == t.SM
	case VariantFamily:
		return sameFamilyUpTo
	}
	if isPTX {
		return e.SM <= t.SM
	}
	return e.SM/10 == t.SM/10 && e.SM <= t.SM
}

// CheckArchs checks that path carries code for every target in want
// (see ArchInfo.Covers). A target met only by PTX the driver must JIT, or
// only by entries whose variant is unknown, is a warning; with native, a target met
// only by PTX fails.
func CheckArchs(path string, want []string, native bool) check.Result {
	info, err := CUDAArchs(path)
	if err != nil {
		return failed(archResult(path, want), err)
	}
	return info.Check(want, native)
}

func archResult(path string, want []string) check.Result {
	return check.Result{
		ID:       "cuda.archs:" + filepath.Base(path),
		Expected: "device code for " + strings.Join(want, ", "),
	}
}

// Check is CheckArchs on an already read file.
func (a *ArchInfo) Check(want []string, native bool) check.Result {
	r := archResult(a.Path, want)
	if len(a.Entries) == 0 {
		r.Status, r.Found = check.Fail, "no device code"
		r.Why = fmt.Sprintf("%s has no %s or %s section with fat binary entries", a.Path, SectionFatbin, SectionRelFatbin)
		return r
	}
	r.Found = strings.Join(a.Archs(), ", ")
	r.Status = check.Pass
	var why []string
	worse := func(s check.Status) {
		if s == check.Fail || r.Status == check.Pass {
			r.Status = s
		}
	}
	for _, w := range want {
		c, err := a.Covers(w)
		switch {
		case err != nil:
			worse(check.Fail)
			why = append(why, err.Error())
		case c.OK() && !c.JIT:
		case c.OK() && native:
			worse(check.Fail)
			why = append(why, fmt.Sprintf("%s: only PTX %s, and the recipe wants machine code for it (native: true): add the arch to the build's list (TORCH_CUDA_ARCH_LIST, CMAKE_CUDA_ARCHITECTURES)", w, strings.Join(c.By, ", ")))
		case c.OK():
			worse(check.Warn)
			why = append(why, fmt.Sprintf("%s: only PTX %s, which the driver JIT-compiles at load", w, strings.Join(c.By, ", ")))
		case len(c.Uncertain) > 0:
			worse(check.Warn)
			why = append(why, fmt.Sprintf("%s: only entries of unknown variant: %s", w, strings.Join(c.Uncertain, "; ")))
		default:
			worse(check.Fail)
			why = append(why, fmt.Sprintf("%s: no cubin or PTX provides it", w))
		}
	}
	r.Why = strings.Join(why, "; ")
	return r
}
