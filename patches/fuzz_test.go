package patches

import (
	"os"
	"path/filepath"
	"testing"
	"testing/fstest"
)

// FuzzLoadSet: any set.yaml loads or is refused with an error; never a panic, a hang or
// an allocation beyond the loader's limits (make fuzz runs it under a memory limit).
func FuzzLoadSet(f *testing.F) {
	seeds, _ := filepath.Glob("*/set.yaml")
	for _, s := range seeds {
		if b, err := os.ReadFile(s); err == nil {
			f.Add(b)
		}
	}
	sum := sha256Hex([]byte(localPatch))
	f.Add([]byte("name: x\ndescription: d\ncomponent: deepep\npatches:\n  - name: 0001\n    file: p.patch\n    sha256: " + sum + "\n  - name: b\n    file: ./p.patch\n    sha256: " + sum + "\neffects:\n  - kind: contain\n    file: a\n"))
	f.Add([]byte("name: x\npatches: &a [*a]\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		fsys := fstest.MapFS{
			"x/set.yaml": {Data: b},
			"x/p.patch":  {Data: []byte(localPatch)},
		}
		c, err := loadFiles([]setFileRef{{fsys: fsys, file: "x/set.yaml", root: "patches", limits: Limits{SetBytes: 64 << 10, PatchBytes: 1 << 20}}})
		if err == nil {
			if _, ok := c.Get("x"); !ok {
				t.Fatal("a set loaded without error is not in the catalog")
			}
		}
	})
}
