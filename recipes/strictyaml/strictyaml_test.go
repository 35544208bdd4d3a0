package strictyaml

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

type doc struct {
	Name  string            `json:"name"`
	Items []map[string]any  `json:"items,omitempty"`
	Env   map[string]string `json:"env,omitempty"`
	Deep  any               `json:"deep,omitempty"`
}

// allocated runs f and returns the bytes it allocated.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// bomb is the classic alias bomb: 9 levels of 9 aliases each, 1.9 KB that expands to
// 9^9 (387 million) scalars.
func bomb() string {
	var b strings.Builder
	b.WriteString("name: x\ndeep:\n  a0: &a0 [x, x, x, x, x, x, x, x, x]\n")
	for i := 1; i <= 9; i++ {
		fmt.Fprintf(&b, "  a%d: &a%d [", i, i)
		for j := 0; j < 9; j++ {
			if j > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "*a%d", i-1)
		}
		b.WriteString("]\n")
	}
	return b.String()
}

// Hostile documents are refused in bounded memory, with the limit named.
func TestHostileDocumentsAreRefusedCheaply(t *testing.T) {
	cases := []struct {
		name, body, want string
		line             int
	}{
		{"alias bomb", bomb(), "MaxAliasNodes", 7},
		{"flow nesting, 100k levels", "name: x\ndeep: " + strings.Repeat("[", 100000) + strings.Repeat("]", 100000) + "\n", "MaxNodes", 2},
		{"flow nesting, 9k levels", "name: x\ndeep: " + strings.Repeat("[", 9000) + strings.Repeat("]", 9000) + "\n", "MaxDepth", 2},
		{"block sequence nesting, 100k levels", "name: x\ndeep:\n" + strings.Repeat("- ", 100000) + "x\n", "MaxNodes", 3},
		{"block sequence nesting, 9k levels", "name: x\ndeep:\n" + strings.Repeat("- ", 9000) + "x\n", "MaxDepth", 3},
		{"block mapping nesting", "name: x\ndeep:\n" + deepMapping(1000), "MaxDepth", 0},
		{"flat flow sequence", "name: x\ndeep: [" + strings.Repeat("[],", 300000) + "]\n", "MaxNodes", 2},
		{"huge description", "name: " + strings.Repeat("x", 50<<20) + "\n", "MaxBytes", 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "alias bomb" && len(tc.body) > 2000 {
				t.Fatalf("the bomb is %d bytes, want under 2 KB", len(tc.body))
			}
			var err error
			var v doc
			data := []byte(tc.body)
			n := allocated(func() { _, err = Decode("x.yaml", data, &v) })
			var ye *Error
			if !errors.As(err, &ye) || !strings.Contains(ye.Msg, tc.want) || ye.File != "x.yaml" || ye.ExitCode() != 2 {
				t.Fatalf("error %v, want an *Error naming %s", err, tc.want)
			}
			if tc.line > 0 && ye.Line != tc.line {
				t.Errorf("located at line %d, want %d: %v", ye.Line, tc.line, ye)
			}
			// the whole document is a few hundred KB at most (the 50 MB one is refused by
			// its length): loading must cost no more than a small multiple of that
			if n > 64<<20 {
				t.Errorf("refusing it allocated %d MiB", n>>20)
			}
			t.Logf("%s: refused after allocating %.1f MiB: %v", tc.name, float64(n)/(1<<20), firstLine(err.Error()))
		})
	}
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}

func deepMapping(levels int) string {
	var b strings.Builder
	for i := 0; i < levels; i++ {
		fmt.Fprintf(&b, "%sk%d:\n", strings.Repeat(" ", i+2), i)
	}
	fmt.Fprintf(&b, "%sv: 1\n", strings.Repeat(" ", levels+2))
	return b.String()
}

// A file larger than the limit is refused without reading it whole.
func TestReadFileStopsAtTheLimit(t *testing.T) {
	p := filepath.Join(t.TempDir(), "big.yaml")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(50 << 20); err != nil {
		t.Fatal(err)
	}
	f.Close()
	l := Loader{Limits: DefaultLimits()}
	var got []byte
	n := allocated(func() { got, err = l.ReadFile(p) })
	if err == nil || !strings.Contains(err.Error(), "larger than 1 MiB") || got != nil {
		t.Fatalf("ReadFile of 50 MiB: %v", err)
	}
	if n > 8<<20 {
		t.Errorf("refusing a 50 MiB file allocated %d MiB", n>>20)
	}
	small := filepath.Join(t.TempDir(), "ok.yaml")
	os.WriteFile(small, []byte("name: a\n"), 0o644)
	if b, err := l.ReadFile(small); err != nil || string(b) != "name: a\n" {
		t.Fatalf("ReadFile of a small file: %q %v", b, err)
	}
}

// What epbuild's own files do stays allowed: nesting well past theirs, a few aliases and
// merge keys.
func TestOrdinaryDocumentsLoad(t *testing.T) {
	body := "name: x\nenv: &env {A: \"1\", B: \"2\"}\nitems:\n  - {<<: *env, C: \"3\"}\n  - *env\ndeep:\n" + deepMapping(40)
	var v doc
	d, err := Decode("x.yaml", []byte(body), &v)
	if err != nil {
		t.Fatal(err)
	}
	if v.Name != "x" || len(v.Items) != 2 || v.Items[0]["C"] != "3" || v.Items[1]["A"] != "1" {
		t.Errorf("decoded %+v", v)
	}
	if l, c := d.Pos("$.items[1]"); l != 5 || c != 5 {
		t.Errorf("items[1] at %d:%d", l, c)
	}
	// block sequences beside their keys, and back to the outer mapping
	compact := "name: x\nitems:\n- a: 1\n  b:\n  - 1\n  - 2\n- c: 3\nenv:\n  A: \"1\"\n"
	l := Loader{Limits: Limits{MaxBytes: 1 << 20, MaxDepth: 4, MaxNodes: 100, MaxAliasNodes: 10}}
	if _, err := l.Decode("c.yaml", []byte(compact), &v); err != nil {
		t.Errorf("a document 4 levels deep under a depth limit of 4: %v", err)
	}
	l.Limits.MaxDepth = 3
	if _, err := l.Decode("c.yaml", []byte(compact), &v); err == nil || !strings.Contains(err.Error(), "c.yaml:5:3: nesting deeper than 3") {
		t.Errorf("under a depth limit of 3: %v", err)
	}
}

// Strict decoding: errors carry file:line:col and the offending line; Pos and ErrorAt
// locate problems found after decoding.
func TestStrictErrorsAndPositions(t *testing.T) {
	var v doc
	l := Loader{Limits: DefaultLimits(), UnknownFieldHint: "see the schema"}
	for _, tc := range []struct{ body, want string }{
		{"name: x\nnmae: y\n", `x.yaml:2:1: unknown field "nmae" (see the schema)`},
		{"name: x\nname: y\n", `x.yaml:2:1: mapping key "name" already defined`},
		{"name: [1]\n", "x.yaml:1:7: "},
		{"name: x\n  bad: indentation\n", "x.yaml:1:7: mapping value is not allowed"},
	} {
		_, err := l.Decode("x.yaml", []byte(tc.body), &v)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.body, err, tc.want)
		}
	}
	body := "name: x\nitems:\n  - a: 1\n    b: two\nenv:\n  A: \"1\"\n"
	d, err := Decode("x.yaml", []byte(body), &v)
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string][2]int{
		"$.items[0].b":      {4, 8},
		"$.items[0]":        {3, 5},
		"$.items[0].nope.x": {3, 5}, // the nearest existing parent
		"$.env.A":           {6, 6},
		"$":                 {1, 1},
		"$.missing":         {1, 1},
	} {
		if l, c := d.Pos(path); l != want[0] || c != want[1] {
			t.Errorf("Pos(%s) = %d:%d, want %d:%d", path, l, c, want[0], want[1])
		}
	}
	e := d.Errorf("$.items[0].b", "%q is not a number", "two")
	if e.Line != 4 || !strings.Contains(e.Error(), `x.yaml:4:8: "two" is not a number`) || !strings.Contains(e.Source, "b: two") {
		t.Errorf("ErrorAt: %v", e)
	}
}

func FuzzDecode(f *testing.F) {
	for _, s := range []string{"name: x\n", bomb(), "a: [[[[]]]]\n", "- - - x\n", "a: &a {b: *a}\n", "name: !x y\n"} {
		f.Add([]byte(s))
	}
	l := Loader{Limits: Limits{MaxBytes: 64 << 10, MaxDepth: 32, MaxNodes: 5000, MaxAliasNodes: 1000}}
	f.Fuzz(func(t *testing.T, b []byte) {
		var v any
		_, _ = l.Decode("f.yaml", b, &v)
	})
}
