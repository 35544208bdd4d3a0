package compat

import (
	"testing"
)

func TestVersionOrder(t *testing.T) {
	cases := []struct {
		a, b string
		want int
	}{
		{"3.2.5-1", "3.2.5", 1},
		{"3.2.5", "3.2.5-0", 0},
		{"v3.5.19-1", "3.5.19-1", 0},
		{"12.9", "12.9.0", 0},
		{"12.9", "12.10", -1},
		{"3.3.9", "3.3.20", -1},
		{"2.22.3-1", "2.22", 1},
		{"2.10.0+cu129", "2.10.0", 1},
		{"2.10.0+cu128", "2.10.0+cu129", -1},
		{"3.4.5-0", "3.5.19-1", -1},
	}
	for _, c := range cases {
		a, b := MustVersion(c.a), MustVersion(c.b)
		if got := a.Compare(b); got != c.want {
			t.Errorf("Compare(%s, %s) = %d, want %d", c.a, c.b, got, c.want)
		}
		if got := b.Compare(a); got != -c.want {
			t.Errorf("Compare(%s, %s) = %d, want %d", c.b, c.a, got, -c.want)
		}
	}
}

func TestVersionSatisfies(t *testing.T) {
	cases := []struct {
		v, c string
		want bool
	}{
		{"3.2.5-1", ">=3.2.5", true},
		{"3.2.5-1", ">=3.2.5,<3.3", true},
		{"3.2.5-1", ">3.2.5", true},
		{"3.2.5", ">3.2.5", false},
		{"3.3.9", ">=3.2.5,<3.3", false},
		{"2.22.3-1", ">=2.22", true},
		{"2.21.5-1", ">=2.22", false},
		{"2.10.0+cu129", ">=2.10", true},
		{"2.10.0+cu129", "=2.10.0+cu129", true},
		{"2.10.0+cu128", "=2.10.0+cu129", false},
		{"2.10.0+cu129", "=2.10.0", true},
		{"3.5.19-1", "~3.5", true},
		{"3.4.5", "^3.2", true},
		{"4.0.0", "^3.2", false},
		{"3.3.24", "3.3.x", true},
		{"12.8", "<12.9 || >=13", true},
		{"12.9", "<12.9 || >=13", false},
	}
	for _, c := range cases {
		got, err := MustVersion(c.v).Satisfies(c.c)
		if err != nil {
			t.Fatalf("Satisfies(%s, %s): %v", c.v, c.c, err)
		}
		if got != c.want {
			t.Errorf("%s satisfies %q = %v, want %v", c.v, c.c, got, c.want)
		}
	}
}

func TestVersionCUDA(t *testing.T) {
	for in, want := range map[string]string{"2.10.0+cu129": "12.9.0", "2.11.0+cu130": "13.0.0", "2.4.0+cu118": "11.8.0"} {
		cv, ok := MustVersion(in).CUDA()
		if !ok || cv.Canonical() != want {
			t.Errorf("%s: CUDA() = %s %v, want %s", in, cv.Canonical(), ok, want)
		}
	}
	if _, ok := MustVersion("2.10.0").CUDA(); ok {
		t.Errorf("2.10.0 has no CUDA part")
	}
	if v := MustVersion("2.10.0+cu129"); v.Local() != "cu129" || v.Canonical() != "2.10.0+cu129" {
		t.Errorf("local part lost: %q %q", v.Local(), v.Canonical())
	}
}

func TestVersionParseErrors(t *testing.T) {
	for _, bad := range []string{"", " 3.2", "3.2.5.1", "3..5", "3.2.x", "3.2.5-", "3.2.5-rc1", "3.2.5+", "3.2.5+cu/1", "03.2", "abc"} {
		if _, err := ParseVersion(bad); err == nil {
			t.Errorf("ParseVersion(%q) accepted a bad version", bad)
		}
	}
	for _, bad := range []string{"", ">=", ">=3.2.5,", "||", ">=bad"} {
		if _, err := ParseConstraint(bad); err == nil {
			t.Errorf("ParseConstraint(%q) accepted a bad constraint", bad)
		}
	}
}

// FuzzVersionOrder checks that the order is total and consistent: antisymmetric,
// transitive, and that Canonical round-trips.
func FuzzVersionOrder(f *testing.F) {
	for _, s := range [][3]string{
		{"3.2.5-1", "3.2.5", "3.3"},
		{"2.10.0+cu129", "2.10.0", "2.10.0+cu130"},
		{"v3.5.19-1", "12.9", "0.0.0"},
	} {
		f.Add(s[0], s[1], s[2])
	}
	f.Fuzz(func(t *testing.T, sa, sb, sc string) {
		a, errA := ParseVersion(sa)
		b, errB := ParseVersion(sb)
		c, errC := ParseVersion(sc)
		if errA != nil || errB != nil || errC != nil {
			return
		}
		if a.Compare(a) != 0 {
			t.Fatalf("%s != itself", sa)
		}
		if a.Compare(b) != -b.Compare(a) {
			t.Fatalf("not antisymmetric: %s %s", sa, sb)
		}
		if a.Compare(b) <= 0 && b.Compare(c) <= 0 && a.Compare(c) > 0 {
			t.Fatalf("not transitive: %s <= %s <= %s but %s > %s", sa, sb, sc, sa, sc)
		}
		r, err := ParseVersion(a.Canonical())
		if err != nil || r.Compare(a) != 0 {
			t.Fatalf("Canonical %q of %q does not round-trip: %v", a.Canonical(), sa, err)
		}
		if ok, _ := a.Satisfies(">=" + a.Canonical()); !ok {
			t.Fatalf("%s does not satisfy >= itself", sa)
		}
	})
}
