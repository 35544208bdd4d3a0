package inspect

import (
	"bufio"
	"fmt"
	"github.com/epbuild/epbuild/builder/check"
	"io"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// NVSHMEMVersionHeader is where an NVSHMEM install records its version and
// build variables, relative to the prefix.
const NVSHMEMVersionHeader = "include/non_abi/nvshmem_version.h"

// NVSHMEMInfo is what an NVSHMEM install says about itself, read without a
// GPU: from its version header, or from `nvshmem-info -a` output.
type NVSHMEMInfo struct {
	// Version is "MAJOR.MINOR.PATCH" ("3.4.5").
	Version string `json:"version"`
	// Package is the vendor package revision (NVSHMEM_VENDOR_PACKAGE_VERSION,
	// CMake's PROJECT_VERSION_TWEAK); empty when not recorded, as in
	// nvshmem-info output.
	Package string `json:"package,omitempty"`
	// BuildVars are the CMake variables NVSHMEM records at configure time
	// (NVSHMEM_BUILD_VARS): "NVSHMEM_IBGDA_SUPPORT" -> "ON".
	BuildVars map[string]string `json:"build_vars"`
	// Build holds nvshmem-info's other "Build Information" lines
	// ("CUDA API" -> "13000", "CUDA Driver", "Build Timestamp").
	Build map[string]string `json:"build,omitempty"`
	// Source names what was parsed.
	Source string `json:"source"`
}

// FullVersion is Version with the package revision, "3.4.5-0", the way
// NVIDIA tags releases.
func (i *NVSHMEMInfo) FullVersion() string {
	if i.Package == "" {
		return i.Version
	}
	return i.Version + "-" + i.Package
}

// ReadNVSHMEMPrefix reads the version header of an NVSHMEM install prefix.
func ReadNVSHMEMPrefix(prefix string) (*NVSHMEMInfo, error) {
	return ReadNVSHMEMVersionHeader(filepath.Join(prefix, NVSHMEMVersionHeader))
}

// ReadNVSHMEMVersionHeader reads an installed nvshmem_version.h.
func ReadNVSHMEMVersionHeader(path string) (*NVSHMEMInfo, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read NVSHMEM version header: %w", err)
	}
	defer f.Close()
	info, err := ParseNVSHMEMVersionHeader(f)
	if err != nil {
		return nil, fmt.Errorf("read NVSHMEM version header %s: %w", path, err)
	}
	info.Source = path
	return info, nil
}

var defineRE = regexp.MustCompile(`^[ \t]*#[ \t]*define[ \t]+([A-Za-z_][A-Za-z0-9_]*)(?:[ \t]+(.*?))?[ \t]*$`)

// ParseNVSHMEMVersionHeader parses nvshmem_version.h as CMake renders it
// from src/include/non_abi/nvshmem_version.h.in: NVSHMEM_VENDOR_MAJOR_VERSION,
// _MINOR_, _PATCH_, _PACKAGE_VERSION, and NVSHMEM_BUILD_VARS, a string
// literal of space-separated KEY=VALUE pairs (cmake_config/NVSHMEMEnv.cmake,
// INFO_BUILD_VARS). An unrendered template ("@PROJECT_VERSION_MAJOR@") is an
// error.
func ParseNVSHMEMVersionHeader(r io.Reader) (*NVSHMEMInfo, error) {
	defs := map[string]string{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		if m := defineRE.FindStringSubmatch(sc.Text()); m != nil {
			defs[m[1]] = m[2]
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	var parts [3]string
	for i, k := range []string{"NVSHMEM_VENDOR_MAJOR_VERSION", "NVSHMEM_VENDOR_MINOR_VERSION", "NVSHMEM_VENDOR_PATCH_VERSION"} {
		v, ok := defs[k]
		if !ok {
			return nil, fmt.Errorf("no #define %s", k)
		}
		if _, err := strconv.ParseUint(v, 10, 32); err != nil {
			return nil, fmt.Errorf("#define %s %q is not a number", k, v)
		}
		parts[i] = v
	}
	info := &NVSHMEMInfo{Version: strings.Join(parts[:], "."), BuildVars: map[string]string{}}
	if v := defs["NVSHMEM_VENDOR_PACKAGE_VERSION"]; v != "" {
		if _, err := strconv.ParseUint(v, 10, 32); err != nil {
			return nil, fmt.Errorf("#define NVSHMEM_VENDOR_PACKAGE_VERSION %q is not a number", v)
		}
		info.Package = v
	}
	lit, ok := defs["NVSHMEM_BUILD_VARS"]
	if !ok {
		return nil, fmt.Errorf("no #define NVSHMEM_BUILD_VARS")
	}
	s, err := strconv.Unquote(lit)
	if err != nil {
		return nil, fmt.Errorf("#define NVSHMEM_BUILD_VARS %.40q...: not a string literal: %w", lit, err)
	}
	if info.BuildVars, err = parseBuildVars(s); err != nil {
		return nil, fmt.Errorf("NVSHMEM_BUILD_VARS: %w", err)
	}
	return info, nil
}

// parseBuildVars splits NVSHMEM's "K=V K=V" string. A word without "=" is
// taken to continue the previous value: CMake substitutes values verbatim,
// so a path with a space in it splits there.
func parseBuildVars(s string) (map[string]string, error) {
	vars := map[string]string{}
	last := ""
	for _, w := range strings.Fields(s) {
		k, v, ok := strings.Cut(w, "=")
		if !ok || k == "" || strings.ContainsAny(k, "/") {
			if last == "" {
				return nil, fmt.Errorf("word %q is not KEY=VALUE", w)
			}
			vars[last] += " " + w
			continue
		}
		vars[k] = v
		last = k
	}
	if len(vars) == 0 {
		return nil, fmt.Errorf("no KEY=VALUE pairs in %q", s)
	}
	return vars, nil
}

const infoSource = "nvshmem-info"

var infoVersionRE = regexp.MustCompile(`^NVSHMEM v([0-9]+\.[0-9]+\.[0-9]+)\s*$`)

// ParseNVSHMEMInfo parses the output of `nvshmem-info -a` (or -n -b), as
// src/bin/nvshmem-info.cpp prints it: "NVSHMEM vX.Y.Z", then
// "Build Information:" with two-space-indented "%-28s value" lines, and
// "Build Variables" followed by NVSHMEM_BUILD_VARS wrapped at 80 columns,
// each line starting with a tab, ended by an empty line. The environment
// variable listing that -a appends is not read. The wrapping
// (nvshmemu_wrap) loses the word before a space that lands exactly on
// column 80, so prefer the version header where there is one.
func ParseNVSHMEMInfo(r io.Reader) (*NVSHMEMInfo, error) {
	info := &NVSHMEMInfo{Source: infoSource, Build: map[string]string{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	const (
		outside = iota
		build
		vars
	)
	state := outside
	var words []string
	seenVars := false
	for sc.Scan() {
		line := sc.Text()
		switch state {
		case outside:
			if m := infoVersionRE.FindStringSubmatch(line); m != nil && info.Version == "" {
				info.Version = m[1]
			} else if l := strings.TrimSpace(line); l == "Build Information:" || l == "NVSHMEM configuration:" {
				// The second heading is what the library itself prints at
				// start-up with NVSHMEM_DEBUG set; the block is the same.
				state = build
			}
		case build:
			switch {
			case strings.TrimSpace(line) == "":
				state = outside
			case strings.TrimSpace(line) == "Build Variables":
				state, seenVars = vars, true
			case strings.HasPrefix(line, "  "):
				// "  %-28s %s": the key is padded, so split at the value.
				k, v := strings.TrimSpace(line[:min(len(line), 30)]), ""
				if len(line) > 30 {
					v = strings.TrimSpace(line[30:])
				}
				info.Build[k] = v
			}
		case vars:
			if !strings.HasPrefix(line, "\t") {
				state = outside
				continue
			}
			words = append(words, strings.Fields(line)...)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read nvshmem-info output: %w", err)
	}
	if info.Version == "" {
		return nil, fmt.Errorf("nvshmem-info output: no \"NVSHMEM vX.Y.Z\" line (run it with -a or -n)")
	}
	if !seenVars {
		return nil, fmt.Errorf("nvshmem-info output: no \"Build Variables\" section (run it with -a or -b)")
	}
	var err error
	if info.BuildVars, err = parseBuildVars(strings.Join(words, " ")); err != nil {
		return nil, fmt.Errorf("nvshmem-info output: Build Variables: %w", err)
	}
	return info, nil
}

// CheckNVSHMEMBuildVars checks that every variable in want has its value.
// Where want is a CMake boolean (ON/OFF, 1/0, TRUE/FALSE, YES/NO, and "" or
// *-NOTFOUND for false), any spelling of the same truth value matches, so
// want "ON" accepts a build configured with =1. A key NVSHMEM does not
// record fails: ask for NVSHMEM_USE_GDRCOPY, not NVSHMEM_GDRCOPY_SUPPORT.
func CheckNVSHMEMBuildVars(info *NVSHMEMInfo, want map[string]string) check.Result {
	keys := slices.Sorted(maps.Keys(want))
	r := check.Result{ID: "nvshmem.build-vars"}
	var exp, found, why []string
	for _, k := range keys {
		exp = append(exp, k+"="+want[k])
	}
	r.Expected = strings.Join(exp, " ")
	if info == nil {
		r.Status, r.Found, r.Why = check.Fail, "no NVSHMEM information", "NVSHMEM build variables were not read"
		return r
	}
	if info.Source != "" {
		r.ID += ":" + filepath.Base(info.Source)
	}
	for _, k := range keys {
		got, ok := info.BuildVars[k]
		if !ok {
			found = append(found, k+" absent")
			msg := fmt.Sprintf("NVSHMEM %s records no %s", info.Version, k)
			if info.Source == infoSource {
				// nvshmemu_wrap drops the word before a space that falls
				// exactly at column 80, so the output can lose a variable.
				msg += " in nvshmem-info output, whose line wrapping can drop a variable; the version header " + NVSHMEMVersionHeader + " is authoritative"
			}
			why = append(why, msg)
			continue
		}
		found = append(found, k+"="+got)
		if !buildVarMatches(want[k], got) {
			why = append(why, fmt.Sprintf("%s is %q, want %q", k, got, want[k]))
		}
	}
	r.Found = strings.Join(found, " ")
	r.Status = check.Pass
	if len(why) > 0 {
		r.Status = check.Fail
		r.Why = strings.Join(why, "; ")
	}
	return r
}

func buildVarMatches(want, got string) bool {
	if want == got {
		return true
	}
	wb, wok := cmakeBool(want)
	gb, gok := cmakeBool(got)
	return wok && gok && wb == gb
}

// cmakeBool interprets a constant the way CMake's if() does; ok is false
// for values that are not boolean constants (paths, names).
func cmakeBool(s string) (v, ok bool) {
	switch strings.ToUpper(s) {
	case "1", "ON", "YES", "TRUE", "Y":
		return true, true
	case "0", "OFF", "NO", "FALSE", "N", "IGNORE", "NOTFOUND", "":
		return false, true
	}
	if strings.HasSuffix(strings.ToUpper(s), "-NOTFOUND") {
		return false, true
	}
	if n, err := strconv.ParseFloat(s, 64); err == nil {
		return n != 0, true
	}
	return false, false
}
