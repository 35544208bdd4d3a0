package recipes

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

func TestSplitFlags(t *testing.T) {
	cases := []struct {
		in   string
		want []string
		err  string
	}{
		{in: "", want: nil},
		{in: "  -O2\t-g  ", want: []string{"-O2", "-g"}},
		{in: `-DMSG='a b'`, want: []string{"-DMSG=a b"}},
		{in: `"-DQ=\"q\"" -DD=\$x`, want: []string{`-DQ="q"`, "-DD=$x"}},
		{in: `'a'"b"c`, want: []string{"abc"}},
		{in: `''`, want: []string{""}},
		{in: "-DX=`touch c` $(touch d);e", want: []string{"-DX=`touch", "c`", "$(touch", "d);e"}},
		{in: `"\a\$"`, want: []string{`\a$`}},
		{in: `'it'\''s'`, want: []string{"it's"}},
		{in: "'open", err: "unterminated single quote"},
		{in: `"open`, err: "unterminated double quote"},
		{in: `trailing\`, err: "backslash at the end"},
	}
	for _, c := range cases {
		got, err := SplitFlags(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("SplitFlags(%q): error %v, want %q", c.in, err, c.err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("SplitFlags(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
}

// The words SplitFlags finds are the words sh finds, wherever the value has no
// expansion for sh to do (sh prints them one per line, through printf).
func TestSplitFlagsAgreesWithSh(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	for _, in := range []string{`-O2 -g`, `-DMSG='a b' -DN=1`, `"-DQ=\"q\""  x\ y`, `'a'"b"c 'it'\''s'`, `"\a\\"`, `-Wl,-rpath,'/opt/x y'`} {
		out, err := exec.Command(sh, "-c", `for a in `+in+`; do printf '%s\n' "$a"; done`).Output()
		if err != nil {
			t.Fatalf("sh: %v", err)
		}
		want := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
		got, err := SplitFlags(in)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("SplitFlags(%q) = %q, %v; sh says %q", in, got, err, want)
		}
	}
}

func TestIsFlagsOption(t *testing.T) {
	for name, want := range map[string]bool{
		"CMAKE_C_FLAGS": true, "CMAKE_CUDA_FLAGS_RELEASE": true, "CMAKE_SHARED_LINKER_FLAGS": true,
		"CMAKE_CXX_FLAGS_INIT": true, "CMAKE_BUILD_TYPE": false, "NVSHMEM_FLAGS": false, "CMAKE_CUDA_ARCHITECTURES": false,
	} {
		if IsFlagsOption(name) != want {
			t.Errorf("IsFlagsOption(%s) = %v", name, !want)
		}
	}
}
