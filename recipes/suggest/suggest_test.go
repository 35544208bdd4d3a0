package suggest

import (
	"slices"
	"testing"
)

func TestDistance(t *testing.T) {
	for _, c := range []struct {
		a, b string
		d    int
	}{{"", "", 0}, {"a", "", 1}, {"contain", "contains", 1}, {"R99", "R9", 1}, {"kitten", "sitting", 3}} {
		if got := Distance(c.a, c.b); got != c.d {
			t.Errorf("Distance(%q, %q) = %d, want %d", c.a, c.b, got, c.d)
		}
	}
}

func TestClosestAndTypo(t *testing.T) {
	ids := []string{"R1", "R9", "R41", "R18"}
	if got := Closest("r99", ids, 2); !slices.Equal(got, []string{"R9", "R1"}) {
		t.Errorf("Closest = %v", got)
	}
	if got := Typo("contain", []string{"file", "contains", "symbol"}); got != "contains" {
		t.Errorf("Typo = %q", got)
	}
	if got := Typo("zzzz", []string{"file", "contains"}); got != "" {
		t.Errorf("an unrelated word is no typo: %q", got)
	}
}
