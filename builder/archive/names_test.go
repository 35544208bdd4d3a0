package archive

import "testing"

// TestLinkChecks pins both symlink rules on their own: the lexical one applied to each entry
// as it arrives, and the kernel-style resolution through other links applied at the end.
func TestLinkChecks(t *testing.T) {
	for _, c := range []struct {
		link, target string
		ok           bool
	}{
		{"lib/libx.so", "libx.so.3", true},
		{"bin/l", "../lib/libx.so", true},
		{"a/b/c", "../../d", true},
		{"l", ".", true},
		{"a/b/c", "../../../d", false},
		{"l", "..", false},
		{"l", "/etc", false},
		{"l", "", false},
		{"l", "a/../../x", false},
	} {
		if err := checkLinkTarget(c.link, c.target); (err == nil) != c.ok {
			t.Errorf("checkLinkTarget(%q, %q) = %v, want ok=%v", c.link, c.target, err, c.ok)
		}
	}
	tr := tree{
		"d":      {kind: nodeDir},
		"d/up":   {kind: nodeSymlink, target: ".."},
		"d/self": {kind: nodeSymlink, target: "."},
		"loop":   {kind: nodeSymlink, target: "loop"},
		"abs":    {kind: nodeSymlink, target: "/"},
	}
	for _, c := range []struct {
		link, target string
		escapes      bool
	}{
		{"x", "d/up", false},
		{"x", "d/up/d/self/up", false},
		{"x", "d/up/..", true},
		{"x", "d/self/../..", true},
		{"d/x", "up/d/up/..", true},
		{"x", "abs/etc", true},
		{"x", "loop/..", false}, // the kernel stops with ELOOP
		{"x", "missing/../d", false},
	} {
		if got := tr.linkEscapes(c.link, c.target); got != c.escapes {
			t.Errorf("linkEscapes(%q, %q) = %v, want %v", c.link, c.target, got, c.escapes)
		}
	}
}
