package check

import (
	"context"
	"slices"
	"strings"
	"testing"
)

type subject struct{ name string }

type decl struct{ want string }

func ids(rs []Result) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.ID
	}
	return out
}

func TestRegistryRunsDeclaredThenOwnKindsInOrder(t *testing.T) {
	one := func(id string) func(context.Context, *subject) []Result {
		return func(_ context.Context, s *subject) []Result { return []Result{{ID: id + "@" + s.name, Status: Pass}} }
	}
	reg, err := NewRegistry(
		Kind[*subject]{Name: "b", Targets: []Target{Host}, Explain: "b", Run: one("b")},
		Declared("d", []Target{Staged, Installed}, "declared", func(_ context.Context, s *subject, d *decl) []Result {
			return []Result{{ID: "d:" + d.want, Status: Fail}}
		}),
		Kind[*subject]{Name: "a", Targets: []Target{Host, Staged}, Explain: "a", Run: one("a")},
	)
	if err != nil {
		t.Fatal(err)
	}
	s := &subject{name: "n"}
	got := reg.Run(context.Background(), Staged, s, []Spec{{Kind: "d", Value: &decl{"x"}}, {Kind: "d", Value: &decl{"y"}}})
	if want := []string{"d:x", "d:y", "a@n"}; !slices.Equal(ids(got), want) {
		t.Errorf("staged: %v, want %v", ids(got), want)
	}
	if !Failed(got) {
		t.Error("a failed result does not fail the run")
	}
	// a declaration whose kind does not apply to the target is passed over
	if got := reg.Run(context.Background(), Host, s, []Spec{{Kind: "d", Value: &decl{"x"}}}); !slices.Equal(ids(got), []string{"b@n", "a@n"}) {
		t.Errorf("host: %v", ids(got))
	}
	// an unknown kind, and a declaration of the wrong type, fail with a reason
	got = reg.Run(context.Background(), Staged, s, []Spec{{Kind: "nope", Value: 1}, {Kind: "d", Value: "not a *decl"}})
	if len(got) != 3 || got[0].ID != "check.nope" || got[0].Status != Fail || got[1].Status != Fail || !strings.Contains(got[1].Why, "*check.decl") {
		t.Errorf("bad declarations: %+v", got)
	}
	// a cancelled run stops with one skipped result
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	got = reg.Run(ctx, Host, s, nil)
	if len(got) != 1 || got[0].ID != "host.cancelled" || got[0].Status != Skip {
		t.Errorf("cancelled: %+v", got)
	}
	if k, ok := reg.Kind("d"); !ok || !k.IsDeclared() || !k.Applies(Installed) || k.Applies(Host) {
		t.Errorf("kind d: %+v %v", k, ok)
	}
	if r, ok := Find(got, "host.cancelled"); !ok || !r.OK() {
		t.Errorf("Find: %+v %v", r, ok)
	}
}

func TestNewRegistryRefusesIncompleteKinds(t *testing.T) {
	run := func(context.Context, int) []Result { return nil }
	for _, tc := range []struct {
		kinds []Kind[int]
		want  string
	}{
		{[]Kind[int]{{Targets: []Target{Host}, Explain: "x", Run: run}}, "no name"},
		{[]Kind[int]{{Name: "a", Explain: "x", Run: run}}, "no target"},
		{[]Kind[int]{{Name: "a", Targets: []Target{Host}, Run: run}}, "no explanation"},
		{[]Kind[int]{{Name: "a", Targets: []Target{Host}, Explain: "x"}}, "exactly one run function"},
		{[]Kind[int]{{Name: "a", Targets: []Target{Host}, Explain: "x", Run: run}, {Name: "a", Targets: []Target{Host}, Explain: "x", Run: run}}, "twice"},
	} {
		if _, err := NewRegistry(tc.kinds...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.kinds, err, tc.want)
		}
	}
}

// Kinds written for a part of a subject run on the whole, and not at all without it.
func TestLift(t *testing.T) {
	type node struct{ id string }
	type whole struct{ n *node }
	inner := []Kind[*node]{
		{Name: "x", Targets: []Target{Host}, Explain: "x", Run: func(_ context.Context, n *node) []Result { return []Result{{ID: "x:" + n.id}} }},
		Declared("y", []Target{Host}, "y", func(_ context.Context, n *node, v int) []Result { return []Result{{ID: "y:" + n.id}} }),
	}
	reg, err := NewRegistry(Lift(inner, func(w *whole) (*node, bool) { return w.n, w.n != nil })...)
	if err != nil {
		t.Fatal(err)
	}
	got := reg.Run(context.Background(), Host, &whole{n: &node{"1"}}, []Spec{{Kind: "y", Value: 3}})
	if !slices.Equal(ids(got), []string{"y:1", "x:1"}) {
		t.Errorf("lifted: %v", ids(got))
	}
	if got := reg.Run(context.Background(), Host, &whole{}, []Spec{{Kind: "y", Value: 3}}); len(got) != 0 {
		t.Errorf("without the part: %v", ids(got))
	}
}
