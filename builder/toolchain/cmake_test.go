package toolchain

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/epbuild/epbuild/builder/plan"
	"github.com/epbuild/epbuild/recipes"
)

// cmakePrefix lays out what a protobuf and Abseil install (or Debian's packages unpacked
// with dpkg-deb -x, under DIR/usr) gives CMake: the version header protobuf ships and
// the multiarch CMake package files.
func cmakePrefix(t *testing.T, protobufVersion string, absl, gtest bool) string {
	t.Helper()
	pre := filepath.Join(t.TempDir(), "usr")
	write := func(rel, body string) {
		p := filepath.Join(pre, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if protobufVersion != "" {
		write("include/google/protobuf/stubs/common.h", "// Protocol Buffers\n#define GOOGLE_PROTOBUF_VERSION "+protobufVersion+"\n#define GOOGLE_PROTOBUF_VERSION_SUFFIX \"\"\n")
	}
	if absl {
		write("lib/x86_64-linux-gnu/cmake/absl/abslConfig.cmake", "include(${CMAKE_CURRENT_LIST_DIR}/abslTargets.cmake)\n")
	}
	if gtest {
		write("lib/x86_64-linux-gnu/cmake/GTest/GTestConfig.cmake", "\n")
	}
	return pre
}

func tcpxPlan(prefixPath, tests string) *plan.Plan {
	return &plan.Plan{
		Recipe:    "t",
		Toolchain: recipes.Toolchain{Require: []string{"protobuf-absl"}},
		Components: []plan.PlanComponent{{Component: recipes.Component{Name: "tcpx", Build: []recipes.Step{{CMake: &recipes.CMakeStep{
			Options: map[string]string{"CMAKE_PREFIX_PATH": prefixPath, "NET_GPUDIRECTTCPX_BUILD_TESTS": tests},
		}}}}}},
	}
}

func TestProbeCMakePackages(t *testing.T) {
	newer := cmakePrefix(t, "7036002", true, false)
	older := cmakePrefix(t, "3021012", false, true)

	var tc Toolchain
	tc.probeCMakePackages([]string{newer, older})
	if tc.Protobuf != "36.2" || tc.ProtobufCpp != "7.36.2" || !strings.HasPrefix(tc.ProtobufHeader, newer) ||
		!strings.HasSuffix(tc.Abseil, "cmake/absl/abslConfig.cmake") || !strings.HasPrefix(tc.GTest, older) {
		t.Errorf("first prefix wins per package: %+v", tc)
	}
	tc = Toolchain{}
	tc.probeCMakePackages([]string{older, newer})
	if tc.Protobuf != "21.12" || tc.ProtobufCpp != "3.21.12" || !strings.HasPrefix(tc.ProtobufHeader, older) {
		t.Errorf("the old protobuf first on the path: %+v", tc)
	}

	p := tcpxPlan(newer+";"+older, "OFF")
	if got := CMakePrefixPath(p); len(got) != 2 || got[0] != newer || !NeedsCMakePackages(p) {
		t.Errorf("CMakePrefixPath %v, needs %v", got, NeedsCMakePackages(p))
	}
	if NeedsCMakePackages(&plan.Plan{}) {
		t.Error("a plan without the requirement needs the probe")
	}
}

func TestPreflightProtobufAndGTest(t *testing.T) {
	missing := func(p *plan.Plan, tc *Toolchain) []Missing {
		err := Preflight(p, tc)
		var pe *PreflightError
		if err == nil {
			return nil
		}
		if !errors.As(err, &pe) || pe.ExitCode() != 3 {
			t.Fatalf("preflight: %v", err)
		}
		return pe.Missing
	}
	newer := cmakePrefix(t, "7036002", true, false)
	older := cmakePrefix(t, "3021012", false, false)
	noabsl := cmakePrefix(t, "7036002", false, false)
	for _, tc := range []struct {
		name, prefix, tests string
		want                []string // what each missing thing names, in order
	}{
		{"protobuf 36.2 with Abseil", newer, "OFF", nil},
		{"protobuf 3.21.12 (Ubuntu 24.04's)", older, "OFF", []string{"protobuf: need >= 22 with Abseil, found 21.12 (C++ 3.21.12"}},
		{"no Abseil", noabsl, "OFF", []string{"Abseil (CMake package abslConfig.cmake)"}},
		{"tests need GTest", newer, "ON", []string{"GTest (CMake package GTestConfig.cmake)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			chain := Toolchain{GCC: "13.3.0", CMake: "4.4.0"}
			chain.probeCMakePackages([]string{tc.prefix})
			p := tcpxPlan(tc.prefix, tc.tests)
			m := missing(p, &chain)
			if len(m) != len(tc.want) {
				t.Fatalf("missing %+v, want %d", m, len(tc.want))
			}
			for i, w := range tc.want {
				line := m[i].What + ": need " + m[i].Need + ", found " + m[i].Found
				if !strings.Contains(line, w) {
					t.Errorf("missing[%d] = %q, want it to name %q", i, line, w)
				}
			}
			for _, x := range m {
				if strings.HasPrefix(x.What, "GTest") {
					if !strings.Contains(x.Fix, "libgtest-dev") {
						t.Errorf("GTest fix: %s", x.Fix)
					}
					continue
				}
				for _, pkg := range []string{"libprotobuf-dev", "libabsl-dev", "libabsl20260526", "protobuf-compiler", "libutf8-range-dev", "dpkg-deb -x", "CMAKE_PREFIX_PATH=DIR/usr"} {
					if !strings.Contains(x.Fix, pkg) {
						t.Errorf("fix line lacks %q: %s", pkg, x.Fix)
					}
				}
			}
		})
	}
	// nothing found at all
	empty := Toolchain{GCC: "13.3.0", CMake: "4.4.0"}
	empty.probeCMakePackages([]string{t.TempDir()})
	if m := missing(tcpxPlan("", "OFF"), &empty); len(m) != 1 || m[0].Found != "" || !strings.Contains(m[0].What, "protobuf") {
		t.Errorf("no protobuf: %+v", m)
	}
}

// A probe that found no protobuf in a named prefix is not reused once packages are
// unpacked there.
func TestProbeCacheSeesUnpackedPackages(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "usr")
	cache := t.TempDir()
	pr := &Prober{Getenv: func(string) string { return "" }, CMakePackages: true, Prefixes: []string{dir}}
	if tc := pr.ProbeCached(t.Context(), cache); tc.ProtobufHeader != "" && strings.HasPrefix(tc.ProtobufHeader, dir) {
		t.Fatalf("found a protobuf in an empty prefix: %+v", tc)
	}
	pre := cmakePrefix(t, "7036002", true, false)
	if err := os.Rename(pre, dir); err != nil {
		t.Fatal(err)
	}
	if tc := pr.ProbeCached(t.Context(), cache); tc.Protobuf != "36.2" || !strings.HasPrefix(tc.ProtobufHeader, dir) {
		t.Errorf("the cached probe hid the unpacked packages: %+v", tc)
	}
}
