package stage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/epbuild/epbuild/builder/inspect"
	"github.com/epbuild/epbuild/builder/manifest"
	"github.com/epbuild/epbuild/builder/plan"
	"github.com/epbuild/epbuild/builder/quote"
	"github.com/epbuild/epbuild/recipes/userfile"
)

const (
	// ibgdaHeader and versionHeader are where an NVSHMEM include directory (an install's
	// include/, or the wheel's nvidia/nvshmem/include) keeps what the facts are read from.
	ibgdaHeader   = "device_host_transport/nvshmem_common_ibgda.h"
	versionHeader = "non_abi/nvshmem_version.h"
	maxHeaderSize = 4 << 20
	// launchHeader is where a DeepEP v1 tree lists the hidden sizes it compiles.
	launchHeader = "csrc/kernels/launch.cuh"
)

// buildFacts reads the build facts of a run's components: those of the nvshmem
// component from its include directory (the built prefix, or the wheel's package
// directory), the hidden sizes from the deepep component's patched tree. facts holds
// what was read; notes says, by fact, why one is not recorded. Both are nil for a plan
// without NVSHMEM or DeepEP, so its manifest keeps its bytes.
func buildFacts(p *plan.Plan, comps []manifest.ComponentResult) (facts, notes map[string]string) {
	facts, notes = map[string]string{}, map[string]string{}
	for _, c := range comps {
		if _, ok := p.Component(c.Name); !ok {
			continue
		}
		switch c.Name {
		case "nvshmem":
			if c.Prefix == "" {
				notes[manifest.FactRCLayout] = "the nvshmem component installed no files"
				notes[manifest.FactHeaderVersion] = "the nvshmem component installed no files"
				continue
			}
			f, n := nvshmemIncludeFacts(filepath.Join(c.Prefix, "include"))
			maps.Copy(facts, f)
			maps.Copy(notes, n)
		case "deepep":
			if c.Tree == "" {
				continue // taken from the Python environment: no tree was compiled
			}
			if sizes, err := readHiddenSizes(filepath.Join(c.Tree, filepath.FromSlash(launchHeader))); err != nil {
				notes[manifest.FactHiddenSizes] = err.Error()
			} else {
				facts[manifest.FactHiddenSizes] = sizes
			}
		}
	}
	if len(facts) == 0 {
		facts = nil
	}
	if len(notes) == 0 {
		notes = nil
	}
	return facts, notes
}

// readHiddenSizes reads the hidden sizes a DeepEP tree's launch.cuh compiles in.
func readHiddenSizes(path string) (string, error) {
	b, err := userfile.ReadFile(path, maxHeaderSize)
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("no %s in the DeepEP tree: no SWITCH_HIDDEN list to read (DeepEP v1 keeps it there)", launchHeader)
	}
	if err != nil {
		return "", fmt.Errorf("read the hidden sizes: %w", err)
	}
	sizes, err := parseHiddenSizes(b)
	if err != nil {
		return "", fmt.Errorf("%s: %w", launchHeader, err)
	}
	return strings.Join(sizes, ","), nil
}

var (
	switchHiddenRe = regexp.MustCompile(`(?m)^[ \t]*#[ \t]*define[ \t]+SWITCH_HIDDEN\b`)
	hiddenCaseRe   = regexp.MustCompile(`\bcase\s+(\d+)\s*:`)
)

// parseHiddenSizes reads the case labels of DeepEP's SWITCH_HIDDEN macro (the lines the
// #define continues with backslashes), in the order the file lists them. No macro, two
// of them (under #if and #else, say) or a macro without a numeric case is an error, never
// a guess.
func parseHiddenSizes(src []byte) ([]string, error) {
	code := stripCComments(src)
	defs := switchHiddenRe.FindAllIndex(code, -1)
	lineOf := func(off int) int { return bytes.Count(code[:off], []byte("\n")) + 1 }
	switch len(defs) {
	case 0:
		return nil, errors.New("no #define SWITCH_HIDDEN")
	case 1:
	default:
		return nil, fmt.Errorf("undecided: %d definitions of SWITCH_HIDDEN (lines %d and %d); the preprocessor picks one, this reader does not", len(defs), lineOf(defs[0][0]), lineOf(defs[1][0]))
	}
	start, end := defs[0][0], defs[0][0]
	for end < len(code) {
		nl := bytes.IndexByte(code[end:], '\n')
		if nl < 0 {
			end = len(code)
			break
		}
		line := bytes.TrimRight(code[end:end+nl], " \t\r")
		end += nl + 1
		if !bytes.HasSuffix(line, []byte("\\")) {
			break
		}
	}
	var sizes []string
	for _, m := range hiddenCaseRe.FindAllSubmatch(code[start:end], -1) {
		if s := string(m[1]); !slices.Contains(sizes, s) {
			sizes = append(sizes, s)
		}
	}
	if len(sizes) == 0 {
		return nil, fmt.Errorf("line %d: SWITCH_HIDDEN lists no numeric case", lineOf(start))
	}
	return sizes, nil
}

// nvshmemIncludeFacts reads the build facts of an NVSHMEM include directory: the RC-QP
// layout from nvshmem_common_ibgda.h and the version from nvshmem_version.h. A fact that
// cannot be read is left out, with a note naming the file and why.
func nvshmemIncludeFacts(include string) (facts, notes map[string]string) {
	facts, notes = map[string]string{}, map[string]string{}
	path := filepath.Join(include, filepath.FromSlash(ibgdaHeader))
	if layout, err := readRCLayout(path); err != nil {
		notes[manifest.FactRCLayout] = err.Error()
	} else {
		facts[manifest.FactRCLayout] = layout
	}
	if info, err := inspect.ReadNVSHMEMVersionHeader(filepath.Join(include, filepath.FromSlash(versionHeader))); err != nil {
		notes[manifest.FactHeaderVersion] = err.Error()
	} else {
		facts[manifest.FactHeaderVersion] = info.Version
	}
	if len(facts) == 0 {
		facts = nil
	}
	if len(notes) == 0 {
		notes = nil
	}
	return facts, notes
}

func readRCLayout(path string) (string, error) {
	b, err := userfile.ReadFile(path, maxHeaderSize)
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("no IBGDA header %s: this NVSHMEM has no IBGDA device state, so it has no RC-QP layout", path)
	}
	if err != nil {
		return "", fmt.Errorf("read the IBGDA header: %w", err)
	}
	layout, err := parseRCLayout(b)
	if err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	return layout, nil
}

var (
	// the alias NVSHMEM 3.4 and later define: typedef nvshmemi_ibgda_device_state_vN ..._t;
	rcAliasRe = regexp.MustCompile(`\btypedef\s+(?:struct\s+)?nvshmemi_ibgda_device_state_(v1|v2)\s+nvshmemi_ibgda_device_state_t\s*;`)
	// the plain struct of NVSHMEM before the versioned ones: typedef struct {...} ..._t;
	// the old (PE-major) layout, which 3.4 named _v1
	rcPlainRe = regexp.MustCompile(`\}\s*nvshmemi_ibgda_device_state_t\s*;`)
	// any other definition of the name: one this reader does not know
	rcAnyRe = regexp.MustCompile(`\bnvshmemi_ibgda_device_state_t\s*;`)
)

// parseRCLayout reads which layout nvshmem_common_ibgda.h gives
// nvshmemi_ibgda_device_state_t: v1 or v2 for `typedef nvshmemi_ibgda_device_state_v1|v2
// nvshmemi_ibgda_device_state_t;`, v1 for the plain struct of releases before the
// versioned ones. Comments and whitespace do not matter. Two definitions (say, under
// #if and #else) or none of these forms is undecided: an error naming the lines, never
// a guess.
func parseRCLayout(src []byte) (string, error) {
	code := stripCComments(src)
	type def struct {
		layout string
		line   int
	}
	var defs []def
	lineOf := func(off int) int { return bytes.Count(code[:off], []byte("\n")) + 1 }
	for _, m := range rcAliasRe.FindAllSubmatchIndex(code, -1) {
		defs = append(defs, def{string(code[m[2]:m[3]]), lineOf(m[0])})
	}
	for _, m := range rcPlainRe.FindAllIndex(code, -1) {
		defs = append(defs, def{"v1", lineOf(m[0])})
	}
	switch len(defs) {
	case 1:
		return defs[0].layout, nil
	case 0:
		if m := rcAnyRe.FindIndex(code); m != nil {
			return "", fmt.Errorf("line %d: undecided: nvshmemi_ibgda_device_state_t is defined in a form this reader does not know (neither typedef nvshmemi_ibgda_device_state_v1|v2 nor a plain struct)", lineOf(m[0]))
		}
		return "", errors.New("undecided: no typedef of nvshmemi_ibgda_device_state_t")
	}
	var at []string
	for _, d := range defs {
		at = append(at, fmt.Sprintf("line %d (%s)", d.line, d.layout))
	}
	return "", fmt.Errorf("undecided: %d definitions of nvshmemi_ibgda_device_state_t, at %s; the preprocessor picks one, this reader does not", len(defs), strings.Join(at, ", "))
}

// stripCComments blanks /* */ and // comments, keeping newlines (for line numbers).
// String literals are kept as they are: a header's typedefs hold none that matter.
func stripCComments(src []byte) []byte {
	out := bytes.Clone(src)
	for i := 0; i < len(out); i++ {
		switch {
		case out[i] == '"':
			for i++; i < len(out) && out[i] != '"' && out[i] != '\n'; i++ {
				if out[i] == '\\' {
					i++
				}
			}
		case out[i] == '/' && i+1 < len(out) && out[i+1] == '/':
			for ; i < len(out) && out[i] != '\n'; i++ {
				out[i] = ' '
			}
		case out[i] == '/' && i+1 < len(out) && out[i+1] == '*':
			out[i], out[i+1] = ' ', ' '
			for i += 2; i < len(out) && !(out[i] == '*' && i+1 < len(out) && out[i+1] == '/'); i++ {
				if out[i] != '\n' {
					out[i] = ' '
				}
			}
			if i < len(out) {
				out[i], out[i+1] = ' ', ' '
				i++
			}
		}
	}
	return out
}

// recordBuildFacts reads the build facts of the built components for the manifest and,
// when there are any, has the rules evaluated again with them (AfterBuild).
func (r *Runner) recordBuildFacts(ctx context.Context, p *plan.Plan, comps []manifest.ComponentResult) error {
	r.buildFacts, r.buildFactNotes = buildFacts(p, comps)
	for _, k := range slices.Sorted(maps.Keys(r.buildFactNotes)) {
		r.Log.Info("build fact not recorded: "+quote.Term(r.buildFactNotes[k]), "fact", k)
	}
	if len(r.buildFacts) == 0 || r.AfterBuild == nil {
		return nil
	}
	fs, err := r.AfterBuild(ctx, r.Toolchain, r.buildFacts)
	if err != nil {
		return err
	}
	r.Findings = fs
	return nil
}
