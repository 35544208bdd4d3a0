package lock

import (
	"testing"

	"github.com/epbuild/epbuild/recipes"
)

// The key depends on what is built, not on how it was asked for.
func TestSealKeysWhatIsBuilt(t *testing.T) {
	p := &Plan{Recipe: "r", Components: []Component{{Component: recipes.Component{Name: "deepep", Version: "1.2.1"}}}}
	if err := p.Seal(); err != nil || len(p.Key) != 64 {
		t.Fatalf("key %q, %v", p.Key, err)
	}
	q := *p
	q.File, q.Overrides = "elsewhere.yaml", []string{"deepep.version=1.2.1"}
	if err := q.Seal(); err != nil || q.Key != p.Key {
		t.Errorf("the file and the overrides changed the key: %s vs %s", q.Key, p.Key)
	}
	q.Components = []Component{{Component: recipes.Component{Name: "deepep", Version: "1.2.2"}}}
	if err := q.Seal(); err != nil || q.Key == p.Key {
		t.Error("another version kept the key")
	}
	if c, ok := p.Component("deepep"); !ok || c.Version != "1.2.1" {
		t.Errorf("Component: %+v %v", c, ok)
	}
	if _, ok := p.Component("nvshmem"); ok {
		t.Error("found a component the plan lacks")
	}
}
