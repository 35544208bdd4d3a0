package patches

import "testing"

func TestLoadNamed(t *testing.T) {
	c, err := LoadNamed("deepep-pr466", "no-such-set", "../x", "deepep-pr466")
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Names(); len(got) != 1 || got[0] != "deepep-pr466" {
		t.Fatalf("LoadNamed read %v, want only deepep-pr466", got)
	}
	all, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range all.Names() {
		one, err := LoadNamed(n)
		if err != nil {
			t.Fatal(err)
		}
		if s, ok := one.Get(n); !ok || s.Component != mustGet(t, all, n).Component || len(s.Patches) != len(mustGet(t, all, n).Patches) {
			t.Errorf("set %s reads differently alone", n)
		}
	}
}

func mustGet(t *testing.T, c *Catalog, n string) *Set {
	t.Helper()
	s, ok := c.Get(n)
	if !ok {
		t.Fatalf("no set %s", n)
	}
	return s
}
