package patches

import (
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/epbuild/epbuild/patches/effect"
	"github.com/epbuild/epbuild/recipes/userfile"
)

// TestDocsPatchSets: docs/patch-sets.md has a table row for every set.yaml field, every
// patch and effect field, and every effect kind, and gives the default limits.
func TestDocsPatchSets(t *testing.T) {
	b, err := os.ReadFile("../docs/patch-sets.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	row := func(what, name string) {
		if !strings.Contains(doc, "| `"+name+"` |") {
			t.Errorf("docs/patch-sets.md has no table row for the %s `%s`", what, name)
		}
	}
	for _, typ := range []reflect.Type{reflect.TypeFor[Set](), reflect.TypeFor[Patch](), reflect.TypeFor[effect.Effect]()} {
		for f := range typ.Fields() {
			name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if name != "" {
				row(typ.Name()+" field", name)
			}
		}
	}
	for _, typ := range []reflect.Type{reflect.TypeFor[Target](), reflect.TypeFor[DiffSpec](), reflect.TypeFor[UpstreamFile](), reflect.TypeFor[Replace]()} {
		for f := range typ.Fields() {
			name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if !strings.Contains(doc, "`"+name+"`") {
				t.Errorf("docs/patch-sets.md does not name the %s field `%s`", typ.Name(), name)
			}
		}
	}
	for _, k := range effect.Kinds() {
		row("effect kind", string(k))
	}
	l := DefaultLimits()
	for _, s := range []string{userfile.Size(int64(l.SetBytes)), userfile.Size(l.PatchBytes)} {
		if !strings.Contains(doc, s) {
			t.Errorf("docs/patch-sets.md does not give the limit %s", s)
		}
	}
}
