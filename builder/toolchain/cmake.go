package toolchain

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/epbuild/epbuild/builder/plan"
)

// CMake packages a build finds with find_package: protobuf (>= 22 needs Abseil) and
// GTest. They are looked up in the plan's CMAKE_PREFIX_PATH entries first, then in the
// system prefixes, the order CMake searches.

// protobufAbseilMin is the first protobuf release built on Abseil: its generated code
// and CMake package need absl:: targets and utf8_range (protobuf v22.0 release notes).
const protobufAbseilMin = 22

// NeedsCMakePackages says whether the plan needs the CMake package probe.
func NeedsCMakePackages(p *plan.Plan) bool {
	n := NeedsOf(p)
	return n.Protobuf || n.GTest
}

// CMakePrefixPath lists the CMAKE_PREFIX_PATH entries the plan's cmake steps pass.
func CMakePrefixPath(p *plan.Plan) []string {
	var out []string
	for _, c := range p.Components {
		for _, s := range c.Build {
			if s.CMake == nil {
				continue
			}
			for _, e := range strings.Split(s.CMake.Options["CMAKE_PREFIX_PATH"], ";") {
				if e != "" && !strings.Contains(e, "{{") {
					out = append(out, e)
				}
			}
		}
	}
	return out
}

var protobufVersionRe = regexp.MustCompile(`(?m)^#define\s+GOOGLE_PROTOBUF_VERSION\s+(\d+)`)

// probeCMakePackages fills the protobuf, Abseil and GTest facts from the first of
// prefixes that has each.
func (t *Toolchain) probeCMakePackages(prefixes []string) {
	for _, pre := range prefixes {
		if t.Protobuf == "" {
			hdr := filepath.Join(pre, "include", "google", "protobuf", "stubs", "common.h")
			if b, err := os.ReadFile(hdr); err == nil {
				if m := protobufVersionRe.FindSubmatch(b); m != nil {
					n, _ := strconv.Atoi(string(m[1]))
					// 3021012 is C++ 3.21.12, release 21.12; 7036002 is C++ 7.36.2, release 36.2
					t.Protobuf = fmt.Sprintf("%d.%d", n/1000%1000, n%1000)
					t.ProtobufCpp = fmt.Sprintf("%d.%d.%d", n/1000000, n/1000%1000, n%1000)
					t.ProtobufHeader = hdr
				}
			}
		}
		if t.Abseil == "" {
			t.Abseil = cmakeConfig(pre, "absl", "abslConfig.cmake")
		}
		if t.GTest == "" {
			t.GTest = cmakeConfig(pre, "GTest", "GTestConfig.cmake")
		}
	}
}

// cmakeConfig finds <pre>/lib*/cmake/<dir>/<file> or the multiarch lib/<triplet>/cmake/...
func cmakeConfig(pre, dir, file string) string {
	for _, pat := range []string{"lib*/cmake", "lib/*/cmake", "share/cmake"} {
		m, _ := filepath.Glob(filepath.Join(pre, pat, dir, file))
		if len(m) > 0 {
			return m[0]
		}
	}
	return ""
}

// protobufDebsFix says how to get protobuf >= 22 where no distribution package is new
// enough (Ubuntu through 26.04 and Debian up to sid ship 3.21.12; Debian experimental has
// 36.2): Debian's packages unpacked beside the build, not installed.
const protobufDebsFix = "Debian/Ubuntu: libprotobuf-dev (>= 22) and libabsl-dev; no Ubuntu release through 26.04 and no Debian release but experimental ships one, so " +
	"apt-get download protobuf-compiler libprotoc36 libprotobuf-dev libprotobuf36 libprotobuf-lite36 libutf8-range-dev libutf8-range0 " +
	"libutf8-validity-dev libutf8-validity0 (Debian experimental, 36.2-3) libabsl-dev libabsl20260526 (Debian sid, 20260526.0-2+b1), " +
	"unpack each with dpkg-deb -x DEB DIR, and --set COMPONENT.options.CMAKE_PREFIX_PATH=DIR/usr (they need glibc >= 2.38: Ubuntu 24.04)"

// preflightCMakePackages adds what the CMake packages the plan needs lack.
func preflightCMakePackages(n Needs, t *Toolchain, add func(what, need, found, fix string)) {
	if n.Protobuf {
		release, _ := strconv.Atoi(strings.SplitN(t.Protobuf, ".", 2)[0])
		switch {
		case t.Protobuf == "":
			add("protobuf (CMake: google/protobuf headers)", fmt.Sprintf(">= %d with Abseil", protobufAbseilMin), "", protobufDebsFix)
		case release < protobufAbseilMin:
			add("protobuf", fmt.Sprintf(">= %d with Abseil", protobufAbseilMin), t.Protobuf+" (C++ "+t.ProtobufCpp+", "+t.ProtobufHeader+")", protobufDebsFix)
		case t.Abseil == "":
			add("Abseil (CMake package abslConfig.cmake)", "beside protobuf "+t.Protobuf, "", protobufDebsFix)
		}
	}
	if n.GTest && t.GTest == "" {
		add("GTest (CMake package GTestConfig.cmake)", "any version", "", "Debian/Ubuntu: libgtest-dev (googletest); or turn the tests off (--set COMPONENT.options.NET_GPUDIRECTTCPX_BUILD_TESTS=OFF)")
	}
}
