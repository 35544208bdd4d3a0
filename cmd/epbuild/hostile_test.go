package main

import (
	"archive/tar"
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"

	"github.com/epbuild/epbuild/builder/manifest"
	"github.com/epbuild/epbuild/recipes"
)

// The hostile-input suite: recipes, build values, sources, install archives and
// installed trees an attacker (or an unlucky day) hands to epbuild. Each case asserts
// the exit code, the message, and that a canary file outside the tree is untouched.
// (Hostile patches are applied through the builder in builder/hostile_test.go: a patch
// set is embedded, not a command-line input.)

// canary is a file outside every tree a case works on.
type canary struct{ path, content string }

func newCanary(t *testing.T) canary {
	t.Helper()
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	c := canary{path: filepath.Join(t.TempDir(), "canary.txt"), content: hex.EncodeToString(b) + "\n"}
	if err := os.WriteFile(c.path, []byte(c.content), 0o644); err != nil {
		t.Fatal(err)
	}
	return c
}

// intact fails the test unless the canary and its directory are as they were.
func (c canary) intact(t *testing.T) {
	t.Helper()
	b, err := os.ReadFile(c.path)
	if err != nil || string(b) != c.content {
		t.Errorf("the canary %s was changed: %q, %v", c.path, b, err)
	}
	if ents, _ := os.ReadDir(filepath.Dir(c.path)); len(ents) != 1 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("beside the canary: %v", names)
	}
}

func expect(t *testing.T, what string, code, want int, out, errs string, msgs ...string) {
	t.Helper()
	if code != want {
		t.Errorf("%s: exit %d, want %d\nstdout: %s\nstderr: %s", what, code, want, out, errs)
	}
	for _, m := range msgs {
		if !strings.Contains(out+errs, m) {
			t.Errorf("%s: the output does not say %q\nstdout: %s\nstderr: %s", what, m, out, errs)
		}
	}
}

func TestHostileRecipes(t *testing.T) {
	cn := newCanary(t)
	rel, _ := filepath.Rel(t.TempDir(), cn.path) // ../<dir>/canary.txt, from a sibling
	base, err := fs.ReadFile(recipes.Embedded(), "demo.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cases := []struct {
		name, from, to string
		want           string
		at             string // line:col
	}{
		{"cmake dir leaves the source tree", "      - cmake:\n", "      - cmake:\n          dir: \"../../../../elsewhere\"\n",
			`dir "../../../../elsewhere" is not a directory inside the source tree`, ":22:16"},
		{"check file outside the prefix", "      - file: include/demo.h", "      - file: ../../../../" + rel,
			"is not a file pattern inside the component's prefix", ":26:15"},
		{"ref leaves refs/", "        ref: v1.0.0\n    patches: [demo-lib-lanes]", "        ref: ../../../etc/passwd\n    patches: [demo-lib-lanes]",
			`ref "../../../etc/passwd" is not a valid git ref name`, ":18:14"},
		{"env value with a newline", `  DEMO_LANE_MAPPING: "0:2,1:1"`, `  DEMO_LANE_MAPPING: "0:2\nexport LD_PRELOAD=/tmp/evil.so"`,
			"holds a control character", ":%d:22"}, // the line of DEMO_LANE_MAPPING in demo.yaml
		{"LD_PRELOAD outside the install", `  DEMO_LANE_MAPPING: "0:2,1:1"`, `  LD_PRELOAD: "` + cn.path + `"`,
			"is outside the install", ":%d:15"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if !strings.Contains(string(base), c.from) {
				t.Fatalf("demo.yaml has no %q", c.from)
			}
			p := filepath.Join(dir, strings.NewReplacer(" ", "-", "/", "").Replace(c.name)+".yaml")
			if err := os.WriteFile(p, []byte(strings.Replace(string(base), c.from, c.to, 1)), 0o644); err != nil {
				t.Fatal(err)
			}
			at := c.at
			if strings.Contains(at, "%d") {
				// the line the replaced text starts on, however the recipe above it grows
				at = fmt.Sprintf(at, strings.Count(string(base)[:strings.Index(string(base), c.from)], "\n")+1)
			}
			code, out, errs := run(t, nil, "validate", p)
			expect(t, "validate", code, 2, out, errs, c.want, p+at)
			cn.intact(t)
		})
	}
}

// A cmake flag value with shell syntax in it, given by --set or in a recipe file, runs
// nothing: quoted, it reaches the compiler as one literal argument; unquoted (the way
// the reproduction wrote it), its words reach gcc as file names and the build
// fails, with nothing run.
func TestHostileBuildValues(t *testing.T) {
	cn := newCanary(t)
	cdir := filepath.Dir(cn.path)
	logDir := t.TempDir()
	log := filepath.Join(logDir, "argv")
	cc := filepath.Join(logDir, "cc")
	if err := os.WriteFile(cc, []byte("#!/bin/sh\n{ for a in \"$@\"; do printf '%s\\0' \"$a\"; done; printf '\\0'; } >> '"+log+"'\nexec gcc \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	// the demo's stages are made there: each run builds only what its options change
	env := nodeEnv("EPBUILD_CACHE", warmCache(t))
	out := t.TempDir()
	literal := "-DEPBUILD_VALUE=`touch " + cdir + "/a` $(touch " + cdir + "/b); touch " + cdir + "/c \"dq\" 'sq' $HOME"
	quoted := "-O2 '" + strings.ReplaceAll(literal, "'", `'\''`) + "'"

	code, o, e := run(t, env, "recipe", "demo", "-o", out, "--set", "libdemo.options.CMAKE_C_FLAGS=-O2 `touch "+cdir+"/pwned`")
	expect(t, "unquoted --set", code, 1, o, e, "build libdemo", "`touch")
	cn.intact(t)

	for _, route := range []string{"--set", "recipe file"} {
		_ = os.Remove(log)
		args := []string{"recipe", "demo", "-o", out, "--set", "libdemo.options.CMAKE_C_COMPILER=" + cc, "--set", "libdemo.options.CMAKE_C_FLAGS=" + quoted}
		if route == "recipe file" {
			base, _ := fs.ReadFile(recipes.Embedded(), "demo.yaml")
			v, _ := json.Marshal(quoted) // a JSON string is a YAML double-quoted scalar
			c, _ := json.Marshal(cc)
			body := strings.Replace(string(base), `CMAKE_C_FLAGS: "-O2"`, "CMAKE_C_FLAGS: "+string(v)+"\n            CMAKE_C_COMPILER: "+string(c), 1)
			p := filepath.Join(t.TempDir(), "demo.yaml")
			if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
			// the same options as the --set run: the same build key, rebuilt on purpose
			args = []string{"recipe", p, "-o", out, "--force=build"}
		}
		code, o, e := run(t, env, args...)
		expect(t, route, code, 0, o, e, "artifact ")
		cn.intact(t)
		b, err := os.ReadFile(log)
		if err != nil {
			t.Fatalf("%s: the compiler was never called: %v", route, err)
		}
		if !bytes.Contains(b, []byte("\x00"+literal+"\x00")) {
			t.Errorf("%s: the compiler never got %q as one argument:\n%q", route, literal, b)
		}
	}
}

// tarEntry is one entry of a crafted archive.
type tarEntry struct {
	hdr  tar.Header
	data []byte
}

func readArtifact(t *testing.T, art string) []tarEntry {
	t.Helper()
	f, err := os.Open(art)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := zstd.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	tr := tar.NewReader(zr)
	var out []tarEntry
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, tarEntry{hdr: *h, data: b})
	}
}

// writeTar writes entries as a tar stream through compress (zstd or gzip).
func writeTar(t *testing.T, path string, entries []tarEntry, gz bool) {
	t.Helper()
	var buf bytes.Buffer
	var w io.WriteCloser
	if gz {
		w = gzip.NewWriter(&buf)
	} else {
		zw, err := zstd.NewWriter(&buf)
		if err != nil {
			t.Fatal(err)
		}
		w = zw
	}
	tw := tar.NewWriter(w)
	for _, e := range entries {
		h := e.hdr
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(e.data))
		}
		if h.ModTime.IsZero() {
			h.ModTime = time.Unix(1700000000, 0)
		}
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(e.data); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

func reg(name string, data []byte) tarEntry {
	return tarEntry{hdr: tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644}, data: data}
}

func link(name, target string) tarEntry {
	return tarEntry{hdr: tar.Header{Name: name, Typeflag: tar.TypeSymlink, Linkname: target, Mode: 0o777}}
}

// Hostile install archives: refused (exit 2) before the prefix is touched, with nothing
// written outside the staging area and nothing left beside the prefix.
func TestHostileInstallArchives(t *testing.T) {
	good := readArtifact(t, demoArtifact(t))
	var manifestJSON []byte
	for _, e := range good {
		if e.hdr.Name == manifest.ManifestName {
			manifestJSON = e.data
		}
	}
	if manifestJSON == nil {
		t.Fatal("the demo artifact has no manifest")
	}
	cn := newCanary(t)
	canaryRel := func(from string) string {
		r, _ := filepath.Rel(from, cn.path)
		return r
	}
	with := func(extra ...tarEntry) []tarEntry { return append(append([]tarEntry{}, good...), extra...) }
	replaced := func(name string, data []byte) []tarEntry {
		out := append([]tarEntry{}, good...)
		for i := range out {
			if out[i].hdr.Name == name {
				out[i].data = data
			}
		}
		return out
	}
	cases := []struct {
		name    string
		entries func(prefix string) []tarEntry
		want    string
	}{
		{"a bomb with no manifest", func(string) []tarEntry {
			return []tarEntry{reg("zeros", make([]byte, manifest.MinManifestBudget+(1<<20)))}
		},
			"an epbuild artifact carries its manifest within 1000 times its own size"},
		{"more data than the manifest declares", func(string) []tarEntry {
			return replaced("pydemo/python/pydemo/channel.py", make([]byte, 4<<20))
		}, "it holds more than its manifest declares"},
		{"a second, different manifest", func(string) []tarEntry {
			return with(reg(manifest.ManifestName, bytes.Replace(manifestJSON, []byte(`"demo"`), []byte(`"dem0"`), 1)))
		}, "it holds more than one manifest.json"},
		{"a path out of the tree", func(prefix string) []tarEntry {
			return with(reg(canaryRel(filepath.Dir(prefix)), []byte("pwned\n")))
		}, "path escapes the destination"},
		{"an absolute path", func(string) []tarEntry { return with(reg(cn.path, []byte("pwned\n"))) }, "absolute path"},
		{"a write through a symlink", func(string) []tarEntry {
			return with(link("pydemo/out", filepath.Dir(cn.path)), reg("pydemo/out/canary.txt", []byte("pwned\n")))
		}, "unsafe"},
		{"a symlink out of the tree", func(prefix string) []tarEntry {
			return with(link("pydemo/python/evil", "../../../../../../../../../../"+strings.TrimPrefix(cn.path, "/")))
		}, "unsafe"},
		{"manifest.json is a symlink", func(string) []tarEntry {
			out := append([]tarEntry{}, good...)
			for i := range out {
				if out[i].hdr.Name == manifest.ManifestName {
					out[i] = link(manifest.ManifestName, cn.path)
				}
			}
			return out
		}, "manifest.json\": is not a regular file"},
		{"bytecode its manifest does not list", func(string) []tarEntry {
			return with(reg("pydemo/python/pydemo/__pycache__/channel."+pythonCacheTag(t)+".pyc", []byte("\xa7\r\r\n\x01\x00\x00\x00planted!")))
		}, "extra pydemo/python/pydemo/__pycache__/channel."},
		{"a device node", func(string) []tarEntry {
			return with(tarEntry{hdr: tar.Header{Name: "pydemo/null", Typeflag: tar.TypeChar, Devmajor: 1, Devminor: 3, Mode: 0o666}})
		}, "device node"},
	}
	env := nodeEnv()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			prefix := pristineInstall(t) // the good artifact, installed
			parent := filepath.Dir(prefix)
			receipt, _ := os.ReadFile(filepath.Join(prefix, manifest.ReceiptName))
			art := filepath.Join(t.TempDir(), filepath.Base(demoArtifact(t)))
			writeTar(t, art, c.entries(prefix), false)
			code, o, e := run(t, env, "install", art, "--prefix", prefix)
			expect(t, "install", code, 2, o, e, c.want, "nothing was installed")
			cn.intact(t)
			if got, _ := os.ReadFile(filepath.Join(prefix, manifest.ReceiptName)); !bytes.Equal(got, receipt) {
				t.Errorf("the prefix's receipt changed")
			}
			if code, o, e := run(t, env, "verify-install", "--prefix", prefix); code != 0 {
				t.Errorf("the prefix no longer verifies: exit %d\n%s%s", code, o, e)
			}
			if ents, _ := os.ReadDir(parent); len(ents) != 2 {
				t.Errorf("beside the prefix: %d entries, want the prefix and its lock", len(ents))
			}
		})
	}
}

// Hostile source archives, pinned by their sha256 and served from a mirror: refused at
// extraction (exit 2) naming the entry, with nothing written outside the tree.
func TestHostileSourceArchives(t *testing.T) {
	cn := newCanary(t)
	cases := []struct {
		name    string
		entries []tarEntry
		want    string
	}{
		{"a path out of the tree", []tarEntry{reg("src/ok.c", []byte("int x;\n")), reg("../../../../../../../../../.."+cn.path, []byte("pwned\n"))},
			"path escapes the destination"},
		{"a write through a symlink", []tarEntry{link("src/out", filepath.Dir(cn.path)), reg("src/out/canary.txt", []byte("pwned\n"))}, "unsafe"},
		{"a symlink chain out of the tree", []tarEntry{link("src/a", ".."), link("src/a/b", ".."), reg("src/ok.c", nil)}, "unsafe"},
		{"a hard link to a file outside", []tarEntry{{hdr: tar.Header{Name: "src/h", Typeflag: tar.TypeLink, Linkname: cn.path}}}, "unsafe"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			mirror := t.TempDir()
			tgz := filepath.Join(mirror, "hostile.invalid", "src", "evil.tar.gz")
			if err := os.MkdirAll(filepath.Dir(tgz), 0o755); err != nil {
				t.Fatal(err)
			}
			writeTar(t, tgz, c.entries, true)
			b, _ := os.ReadFile(tgz)
			sum := sha256.Sum256(b)
			recipe := fmt.Sprintf(`name: hostile
cluster: test
description: a hostile source archive
components:
  - name: evil
    source:
      archive:
        url: https://hostile.invalid/src/evil.tar.gz
        sha256: %s
`, hex.EncodeToString(sum[:]))
			p := filepath.Join(t.TempDir(), "hostile.yaml")
			if err := os.WriteFile(p, []byte(recipe), 0o644); err != nil {
				t.Fatal(err)
			}
			env := nodeEnv("EPBUILD_CACHE", filepath.Join(t.TempDir(), "cache"))
			code, o, e := run(t, env, "recipe", p, "--mirror", mirror, "-o", t.TempDir())
			expect(t, "recipe", code, 2, o, e, c.want, "evil.tar.gz")
			cn.intact(t)
		})
	}
}

// An installed tree changed after install: verify-install fails naming the path (exit
// 1) and reads nothing through a planted link it would write to; a reinstall replaces a
// changed install without following its links, and refuses one holding foreign files.
func TestHostileInstalledTrees(t *testing.T) {
	cn := newCanary(t)
	env := nodeEnv()
	const file = "pydemo/python/pydemo/channel.py"
	// pwn is Python that writes beside the canary when it runs
	pwned := filepath.Join(filepath.Dir(cn.path), "pwned")
	pwn := fmt.Sprintf("open(%q, 'w').close()\n", pwned)
	tag := pythonCacheTag(t)
	pyc := "pydemo/python/pydemo/__pycache__/channel." + tag + ".pyc"
	// elsewhere replaces a top file of the install by a link to an identical copy
	// outside it
	elsewhere := func(name string) func(*testing.T, string) {
		return func(t *testing.T, p string) {
			b, err := os.ReadFile(filepath.Join(p, name))
			if err != nil {
				t.Fatal(err)
			}
			out := filepath.Join(t.TempDir(), name)
			if err := os.WriteFile(out, b, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Remove(filepath.Join(p, name)); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(out, filepath.Join(p, name)); err != nil {
				t.Fatal(err)
			}
		}
	}
	chmod := func(name string, mode os.FileMode) func(*testing.T, string) {
		return func(t *testing.T, p string) {
			if err := os.Chmod(filepath.Join(p, name), mode); err != nil {
				t.Fatal(err)
			}
		}
	}
	cases := []struct {
		name      string
		mutate    func(t *testing.T, prefix string)
		want      string
		reinstall int      // exit code of an install over it
		says      []string // more the output says
	}{
		{"a file edited", func(t *testing.T, p string) {
			if err := os.WriteFile(filepath.Join(p, file), []byte("# unpatched\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}, "FAIL files.changed:" + file, 0, nil},
		{"a file replaced by a link to the canary", func(t *testing.T, p string) {
			if err := os.Remove(filepath.Join(p, file)); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(cn.path, filepath.Join(p, file)); err != nil {
				t.Fatal(err)
			}
		}, "FAIL files.type:" + file, 0, nil},
		{"a directory replaced by a link out", func(t *testing.T, p string) {
			lib := filepath.Join(p, "libdemo", "include")
			if err := os.RemoveAll(lib); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(filepath.Dir(cn.path), lib); err != nil {
				t.Fatal(err)
			}
		}, "FAIL files.type:libdemo/include", 0, nil},
		{"a file planted", func(t *testing.T, p string) {
			// Python runs it at start-up from any directory on PYTHONPATH: verify-install
			// imports nothing from a prefix whose files fail
			if err := os.WriteFile(filepath.Join(p, "pydemo", "python", "sitecustomize.py"), []byte(pwn), 0o644); err != nil {
				t.Fatal(err)
			}
		}, "FAIL files.extra:pydemo/python/sitecustomize.py", 2, []string{"python.import:pydemo", "not run: the files of this prefix are not what was built"}},
		{"bytecode of another source planted in __pycache__", func(t *testing.T, p string) {
			plantBytecode(t, filepath.Join(p, file), filepath.Join(p, pyc), pwned, "UNCHECKED_HASH")
		}, "FAIL files.bytecode:" + pyc, 0, []string{"unchecked-hash file", "rm " + filepath.Join("PREFIX", pyc)}},
		{"bytecode whose header is forged to match the source", func(t *testing.T, p string) {
			plantBytecode(t, filepath.Join(p, file), filepath.Join(p, pyc), pwned, "TIMESTAMP")
		}, "FAIL files.bytecode:" + pyc, 0, []string{"its code is not what compiling the source gives"}},
		{"the receipt deleted", func(t *testing.T, p string) {
			if err := os.Remove(filepath.Join(p, manifest.ReceiptName)); err != nil {
				t.Fatal(err)
			}
		}, "FAIL install.receipt", 2, []string{"no " + manifest.ReceiptName + " in PREFIX"}},
		{"the receipt edited", func(t *testing.T, p string) {
			b, _ := os.ReadFile(filepath.Join(p, manifest.ReceiptName))
			if err := os.WriteFile(filepath.Join(p, manifest.ReceiptName), bytes.Replace(b, []byte(`"recipe": "demo"`), []byte(`"recipe": "gcp-b200"`), 1), 0o644); err != nil {
				t.Fatal(err)
			}
		}, "FAIL install.receipt", 0, []string{`recipe "gcp-b200", the manifest's is "demo"`}},
		{"the receipt a link to an identical copy outside", elsewhere(manifest.ReceiptName),
			"FAIL install.receipt", 2, []string{filepath.Join("PREFIX", manifest.ReceiptName) + " is a symlink"}},
		{"the manifest a link to an identical copy outside", elsewhere(manifest.ManifestName),
			"FAIL install.manifest", 2, []string{filepath.Join("PREFIX", manifest.ManifestName) + " is a symlink"}},
		{"the receipt made executable", chmod(manifest.ReceiptName, 0o755), "FAIL files.mode:" + manifest.ReceiptName, 0, []string{"chmod 0644 " + filepath.Join("PREFIX", manifest.ReceiptName)}},
		{"the manifest made executable", chmod(manifest.ManifestName, 0o755), "FAIL files.mode:" + manifest.ManifestName, 0, []string{"chmod 0644 " + filepath.Join("PREFIX", manifest.ManifestName)}},
		{"the manifest edited", func(t *testing.T, p string) {
			b, _ := os.ReadFile(filepath.Join(p, manifest.ManifestName))
			if err := os.WriteFile(filepath.Join(p, manifest.ManifestName), bytes.Replace(b, []byte(`"demo"`), []byte(`"dem0"`), 1), 0o644); err != nil {
				t.Fatal(err)
			}
		}, "FAIL install.receipt", 2, nil},
		{"a file made world-writable", func(t *testing.T, p string) {
			if err := os.Chmod(filepath.Join(p, file), 0o666); err != nil {
				t.Fatal(err)
			}
		}, "FAIL files.mode:" + file, 0, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			prefix := pristineInstall(t)
			c.mutate(t, prefix)
			code, o, e := run(t, env, "verify-install", "--prefix", prefix)
			says := []string{c.want, "FAILED: "}
			for _, m := range c.says {
				says = append(says, strings.ReplaceAll(m, "PREFIX", prefix))
			}
			expect(t, "verify-install", code, 1, o, e, says...)
			cn.intact(t)
			code, o, e = run(t, env, "install", demoArtifact(t), "--prefix", prefix)
			expect(t, "reinstall", code, c.reinstall, o, e)
			cn.intact(t)
			if c.reinstall == 0 {
				if code, o, e := run(t, env, "verify-install", "--prefix", prefix); code != 0 {
					t.Errorf("the reinstall does not verify: exit %d\n%s%s", code, o, e)
				}
			} else if !strings.Contains(e, "refused, nothing was moved") {
				t.Errorf("the reinstall does not say it refused: %s", e)
			}
		})
	}
}

func pythonCacheTag(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("python3", "-c", "import sys; print(sys.implementation.cache_tag)").Output()
	if err != nil {
		t.Fatalf("python3: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// plantBytecode writes at pyc the bytecode of a module that creates the file pwned
// (padded to the size of src, with src's mtime: a timestamp header then matches src),
// compiled by python3's py_compile in one of its invalidation modes; and proves that a
// job's import runs it, undoing what it did.
func plantBytecode(t *testing.T, src, pyc, pwned, mode string) {
	t.Helper()
	st, err := os.Stat(src)
	if err != nil {
		t.Fatal(err)
	}
	code := fmt.Sprintf("open(%q, 'w').close()\nChannel = library = None\n", pwned)
	if int64(len(code))+2 > st.Size() {
		t.Fatalf("the planted code is longer than %s", src)
	}
	other := filepath.Join(t.TempDir(), filepath.Base(src))
	code += "#" + strings.Repeat("-", int(st.Size())-len(code)-2) + "\n"
	if err := os.WriteFile(other, []byte(code), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(other, st.ModTime(), st.ModTime()); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("python3", "-c", "import py_compile, sys\n"+
		"py_compile.compile(sys.argv[1], cfile=sys.argv[2], doraise=True, invalidation_mode=py_compile.PycInvalidationMode[sys.argv[3]])", other, pyc, mode)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("py_compile: %v\n%s", err, out)
	}
	// the proof that the case proves something: a job's import runs it
	before, _ := os.ReadDir(filepath.Dir(filepath.Dir(pyc)))
	job := exec.Command("python3", "-c", "import pydemo")
	job.Dir = t.TempDir()
	job.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "PYTHONDONTWRITEBYTECODE=1",
		"PYTHONPATH=" + filepath.Dir(filepath.Dir(filepath.Dir(pyc)))}
	if out, err := job.CombinedOutput(); err != nil {
		t.Fatalf("a job's import of pydemo: %v\n%s", err, out)
	}
	if after, _ := os.ReadDir(filepath.Dir(filepath.Dir(pyc))); len(after) != len(before) {
		t.Fatalf("the job's import wrote into the install")
	}
	if err := os.Remove(pwned); err != nil {
		t.Fatalf("a job's import did not run the planted bytecode: the case proves nothing: %v", err)
	}
}
