package recipes

import (
	"errors"
	"strings"
	"testing"
)

// hostileBase has every kind of path a recipe holds: a cmake step dir, a command step
// dir, a check file, a ref, an LD_PRELOAD.
const hostileBase = `name: t
cluster: test
description: a test recipe
components:
  - name: nvshmem
    source:
      git:
        url: https://github.com/NVIDIA/nvshmem
        commit: 131da55f643ac87c810ba0bc51d359258bf433a1
        ref: v3.4.5-0
    build:
      - cmake:
          dir: cmake
          options:
            CMAKE_C_FLAGS: "-O2 '-DMSG=a b'"
    checks:
      - file: lib/libnvshmem_host.so.3
      - symbol: {file: lib/libnvshmem_host.so.3, name: nvshmem_init}
  - name: deepep
    source:
      git:
        url: https://github.com/deepseek-ai/DeepEP
        commit: 29d31c095796f3c8ece47ee9cdcc167051bbeed9
    depends: [nvshmem]
    build:
      - python-extension:
          env:
            NVSHMEM_DIR: "{{nvshmem.prefix}}"
      - command:
          run: [python3, x.py]
          dir: tools
env:
  LD_PRELOAD: "{{nvshmem.prefix}}/lib/libnvshmem_host.so.3"
  DEMO: "{{prefix}}/share"
`

// Hostile recipes are refused by validate (exit 2), each at the file:line:col (or the
// --set flag) of the value, saying what is wrong and what to write instead.
func TestHostileRecipesRefused(t *testing.T) {
	cases := []struct {
		name      string
		from, to  string
		sets      []string
		want      string
		line, col int
	}{
		{name: "cmake dir leaves the tree", from: "dir: cmake", to: `dir: "../../../../elsewhere"`,
			want: `dir "../../../../elsewhere" is not a directory inside the source tree`, line: 13, col: 16},
		{name: "cmake dir absolute", from: "dir: cmake", to: "dir: /etc", want: `dir "/etc" is not a directory inside the source tree`, line: 13, col: 16},
		{name: "command dir leaves the tree", from: "dir: tools", to: "dir: src/../..", want: `dir "src/../.." is not a directory inside the source tree`, line: 31, col: 16},
		{name: "check file outside", from: "- file: lib/libnvshmem_host.so.3", to: "- file: ../../../../etc/passwd",
			want: `"../../../../etc/passwd" is not a file pattern inside the component's prefix`, line: 17, col: 15},
		{name: "symbol file absolute", from: "symbol: {file: lib/libnvshmem_host.so.3", to: "symbol: {file: /etc/passwd",
			want: `"/etc/passwd" is not a file pattern inside the component's prefix`, line: 18, col: 24},
		{name: "check file bad glob", from: "- file: lib/libnvshmem_host.so.3", to: "- file: 'lib/[x'", want: `"lib/[x" is not a file pattern`, line: 17, col: 15},
		{name: "ref leaves refs/", from: "ref: v3.4.5-0", to: "ref: ../../../etc/passwd", want: `ref "../../../etc/passwd" is not a valid git ref name: it holds ..`, line: 10, col: 14},
		{name: "ref .lock", from: "ref: v3.4.5-0", to: "ref: v1/x.lock", want: "ends with .lock", line: 10, col: 14},
		{name: "ref control character", from: "ref: v3.4.5-0", to: `ref: "v1\x01"`, want: "control character", line: 10, col: 14},
		{name: "env newline", from: `DEMO: "{{prefix}}/share"`, to: `DEMO: "a\nexport EVIL=1"`, want: `environment variable DEMO holds a control character ('\n' at byte 1)`, line: 34, col: 9},
		{name: "LD_PRELOAD outside the install", from: `"{{nvshmem.prefix}}/lib/libnvshmem_host.so.3"`, to: `"/usr/lib/x86_64-linux-gnu/libnvshmem_host.so.3"`,
			want: `LD_PRELOAD entry "/usr/lib/x86_64-linux-gnu/libnvshmem_host.so.3" is outside the install`, line: 33, col: 15},
		{name: "LD_PRELOAD leaves the install", from: `"{{nvshmem.prefix}}/lib/libnvshmem_host.so.3"`, to: `"{{nvshmem.prefix}}/../../../lib/evil.so"`,
			want: "leaves the install", line: 33, col: 15},
		{name: "LD_PRELOAD second entry outside", from: `"{{nvshmem.prefix}}/lib/libnvshmem_host.so.3"`, to: `"{{nvshmem.prefix}}/lib/a.so:/tmp/evil.so"`,
			want: `LD_PRELOAD entry "/tmp/evil.so" is outside the install`, line: 33, col: 15},
		{name: "runtime template with no value on the nodes", from: `"{{prefix}}/share"`, to: `"{{deepep.src}}/share"`,
			want: "template {{deepep.src}} has no value on the nodes", line: 34, col: 9},
		{name: "flags with an open quote", from: `"-O2 '-DMSG=a b'"`, to: `"-O2 '-DMSG=a b"`,
			want: "CMake option CMAKE_C_FLAGS: unterminated single quote", line: 15, col: 28},
		{name: "option with a newline", from: `CMAKE_C_FLAGS: "-O2 '-DMSG=a b'"`, to: `CMAKE_BUILD_TYPE: "Release\n-DX=1"`,
			want: "CMake option CMAKE_BUILD_TYPE holds a control character", line: 15, col: 31},
		{name: "set ref", sets: []string{"nvshmem.ref=../../../etc/passwd"}, want: "--set nvshmem.ref=../../../etc/passwd: component nvshmem: ref"},
		{name: "set LD_PRELOAD", sets: []string{"env.LD_PRELOAD=/tmp/evil.so"}, want: `--set env.LD_PRELOAD=/tmp/evil.so: LD_PRELOAD entry "/tmp/evil.so" is outside the install`},
		{name: "set flags", sets: []string{`nvshmem.options.CMAKE_C_FLAGS=-O2 "-DX`}, want: "unterminated double quote"},
		{name: "set env newline", sets: []string{"deepep.env.X=a\nb"}, want: "environment variable X holds a control character"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			body := hostileBase
			if c.from != "" {
				if !strings.Contains(body, c.from) {
					t.Fatalf("the base recipe has no %q", c.from)
				}
				body = strings.Replace(body, c.from, c.to, 1)
			}
			err := loadAndValidate(t, body, c.sets...)
			if err == nil {
				t.Fatal("accepted")
			}
			var es Errors
			if !errors.As(err, &es) || es.ExitCode() != 2 {
				t.Fatalf("not bad input: %T %v", err, err)
			}
			var e *Error
			for _, x := range es {
				if strings.Contains(x.Error(), c.want) {
					e = x
				}
			}
			if e == nil {
				t.Fatalf("error %q does not say %q", err, c.want)
			}
			if c.line > 0 && (e.Line != c.line || e.Col != c.col) {
				t.Errorf("located at %s:%d:%d, want line %d col %d", e.File, e.Line, e.Col, c.line, c.col)
			}
		})
	}
	if err := loadAndValidate(t, hostileBase); err != nil {
		t.Fatalf("the base recipe: %v", err)
	}
}
