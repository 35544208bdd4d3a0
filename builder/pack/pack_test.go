package pack

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/epbuild/epbuild/builder/archive"
	"github.com/epbuild/epbuild/builder/envsh"
	"github.com/epbuild/epbuild/builder/manifest"
	"github.com/epbuild/epbuild/builder/toolchain"
)

// twoPassPackage is the package stage as it was before it packed in one pass: lay out,
// HashTree for the manifest, Pack with env.sh as an extra file and the manifest made
// beforehand.
func twoPassPackage(t *testing.T, in Input) []byte {
	p := in.Plan
	t.Helper()
	ctx := context.Background()
	sde, err := sourceDateEpoch(in.SourceDateEpoch, in.Components)
	if err != nil {
		t.Fatal(err)
	}
	tree := filepath.Join(t.TempDir(), "tree")
	for _, c := range in.Components {
		if err := linkTree(c.Prefix, filepath.Join(tree, c.Name)); err != nil {
			t.Fatal(err)
		}
	}
	script, err := envsh.EnvScript(p, tree, installedComponents(p, in.Components))
	if err != nil {
		t.Fatal(err)
	}
	entries, err := archive.HashTree(ctx, tree)
	if err != nil {
		t.Fatal(err)
	}
	entries = append(entries, archive.Entry{Path: manifest.EnvName, Type: archive.TypeFile, Mode: envsh.EnvMode, Size: int64(len(script)), SHA256: manifest.SHA256Hex([]byte(script))})
	sort.Slice(entries, func(i, j int) bool { return entries[i].Path < entries[j].Path })
	plan := *p
	plan.File = ""
	m := manifest.Manifest{
		Format: manifest.ManifestFormat, Recipe: p.Recipe, PlanKey: p.Key, Plan: &plan,
		SourceDateEpoch: sde, Toolchain: in.Toolchain, Components: in.Components, Env: p.Env, Findings: in.Findings, Files: entries,
	}
	mb, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := archive.Pack(ctx, tree, &buf, archive.PackOptions{
		ModTime: time.Unix(sde, 0),
		Level:   zstdLevel,
		Extra:   []archive.File{{Name: manifest.EnvName, Mode: envsh.EnvMode, Data: []byte(script)}},
		// the manifest made above, where the package stage puts it: first
		Late: &archive.LateFile{Name: manifest.ManifestName, Mode: 0o644, Data: func([]archive.Entry) ([]byte, error) { return append(mb, '\n'), nil }},
	}); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestPackageStageSameBytes: the one-pass package stage writes the artifact the two-pass
// stage wrote, byte for byte, for components on both sides of manifest.json in the
// archive, and its .sha256 file names the artifact's hash.
func TestPackageStageSameBytes(t *testing.T) {
	plan, err := mustResolver(t).Resolve("demo", nil)
	if err != nil {
		t.Fatal(err)
	}
	// the stand-in prefixes below carry no package metadata to make wheels of, and no
	// patch outcomes for the SBOM: the artifact's bytes are what this test is about
	for i := range plan.Components {
		plan.Components[i].PatchSets = nil
		for _, st := range plan.Components[i].Build {
			if st.PythonExtension != nil {
				st.PythonExtension.Wheel = false
			}
		}
	}
	tmp := t.TempDir()
	in := Input{Plan: plan, Version: "test", Toolchain: &toolchain.Toolchain{OS: "linux"}}
	for i, c := range plan.Components {
		// libdemo sorts before manifest.json, pydemo after it.
		prefix := filepath.Join(tmp, c.Name)
		for j := range 30 {
			p := filepath.Join(prefix, "lib", fmt.Sprintf("m%02d", j%3), fmt.Sprintf("f%02d.py", j))
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			body := strings.Repeat(fmt.Sprintf("x_%d_%d = %d\n", i, j, j*j), 40+j*300)
			if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.MkdirAll(filepath.Join(prefix, "python"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("m00", filepath.Join(prefix, "lib", "current")); err != nil {
			t.Fatal(err)
		}
		in.Components = append(in.Components, manifest.ComponentResult{Name: c.Name, Prefix: prefix, CommitTime: 1700000000 + int64(i)})
	}
	want := twoPassPackage(t, in)
	out := t.TempDir()
	if err := Write(context.Background(), in, out, nil); err != nil {
		t.Fatal(err)
	}
	art := filepath.Join(out, ArtifactName(plan))
	got, err := os.ReadFile(art)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("artifact differs from the two-pass stage's: %d bytes (sha256 %s), want %d bytes (sha256 %s)", len(got), manifest.SHA256Hex(got), len(want), manifest.SHA256Hex(want))
	}
	sum, err := ReadSum(art)
	if err != nil {
		t.Fatal(err)
	}
	if sum != manifest.SHA256Hex(got) {
		t.Errorf("%s.sha256 says %s, the artifact hashes to %s", filepath.Base(art), sum, manifest.SHA256Hex(got))
	}
}

// linkTree mirrors src at dst with hard links (a copy where links fail), as the package
// stage laid out its tree before it packed the prefixes in place.
func linkTree(src, dst string) error {
	return filepath.Walk(src, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		t := filepath.Join(dst, rel)
		switch {
		case fi.IsDir():
			return os.MkdirAll(t, 0o755)
		case fi.Mode()&os.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(target, t)
		case fi.Mode().IsRegular():
			if os.Link(p, t) == nil {
				return nil
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			return os.WriteFile(t, b, fi.Mode().Perm())
		}
		return nil
	})
}
