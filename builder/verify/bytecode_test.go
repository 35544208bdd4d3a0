package verify

import (
	"fmt"
	"testing"
)

func TestBytecodeSource(t *testing.T) {
	for rel, want := range map[string]string{
		"a/b/__pycache__/mod.cpython-312.pyc":       "a/b/mod.py cpython-312 0",
		"a/__pycache__/mod.cpython-312.opt-2.pyc":   "a/mod.py cpython-312 2",
		"__pycache__/top.pypy39.pyc":                "top.py pypy39 0",
		"a/__pycache__/mod.pyc":                     "",
		"a/__pycache__/mod.cpython-312.opt-x.pyc":   "",
		"a/__pycache__/mod.cpython-312.opt-0.pyc":   "",
		"a/__pycache__/.cpython-312.pyc":            "",
		"a/__pycache__/a.b.cpython-312.opt-1.x.pyc": "",
	} {
		src, tag, opt, ok := bytecodeSource(rel)
		got := ""
		if ok {
			got = fmt.Sprintf("%s %s %d", src, tag, opt)
		}
		if got != want {
			t.Errorf("%s: %q, want %q", rel, got, want)
		}
	}
}
