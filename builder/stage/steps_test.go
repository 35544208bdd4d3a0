package stage

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/epbuild/epbuild/builder/internal/fixture"
	"github.com/epbuild/epbuild/builder/verify"

	"github.com/epbuild/epbuild/builder/check"
	"github.com/epbuild/epbuild/builder/plan"
	"github.com/epbuild/epbuild/builder/toolchain"
	"github.com/epbuild/epbuild/recipes"
)

// argvRecorder writes a compiler wrapper that appends each call's arguments, NUL
// separated and ended by an empty one, to log, then runs gcc.
func argvRecorder(t *testing.T, dir, log string) string {
	t.Helper()
	cc := filepath.Join(dir, "cc-recorder")
	script := "#!/bin/sh\n{ for a in \"$@\"; do printf '%s\\0' \"$a\"; done; printf '\\0'; } >> '" + log + "'\nexec gcc \"$@\"\n"
	if err := os.WriteFile(cc, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return cc
}

// calls reads what argvRecorder logged: one argument list per call.
func calls(t *testing.T, log string) [][]string {
	t.Helper()
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]string
	var cur []string
	for _, a := range bytes.Split(bytes.TrimSuffix(b, []byte{0}), []byte{0}) {
		if len(a) == 0 {
			out = append(out, cur)
			cur = nil
			continue
		}
		cur = append(cur, string(a))
	}
	return append(out, cur)
}

// shWord quotes s as one word for recipes.SplitFlags (and sh).
func shWord(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func newTestStep(t *testing.T, ninja bool) *stepEnv {
	t.Helper()
	root := t.TempDir()
	s := &stepEnv{component: "fixture", src: filepath.Join(root, "src"), work: filepath.Join(root, "work"), out: filepath.Join(root, "work"),
		prefix: filepath.Join(root, "prefix"), destdir: filepath.Join(root, "destdir"), logs: filepath.Join(root, "logs"),
		env: os.Environ(), jobs: 2, ninja: ninja, python: "python3"}
	for _, d := range []string{s.src, s.work, s.logs, s.destdir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// A CMAKE_C_FLAGS flag holding backquotes, $(), ;, blanks, quotes and backslashes
// reaches the compiler as one literal argument under Ninja and make alike (make only
// where it can: no $, \ or '), and no shell runs any of it; any other option's value
// reaches CMake as it was written.
func TestCMakeValuesReachTheCompilerLiterally(t *testing.T) {
	if _, err := exec.LookPath("cmake"); err != nil {
		t.Skip("no cmake")
	}
	gens := []bool{false}
	if _, err := exec.LookPath("ninja"); err == nil {
		gens = append(gens, true)
	}
	for _, ninja := range gens {
		name := "make"
		if ninja {
			name = "ninja"
		}
		t.Run(name, func(t *testing.T) {
			s := newTestStep(t, ninja)
			canary := filepath.Join(t.TempDir(), "canary")
			if err := os.Mkdir(canary, 0o755); err != nil {
				t.Fatal(err)
			}
			hostile := "`touch " + canary + "/c1`; touch " + canary + "/c3 && touch " + canary + "/c4 | \"dq\" * ? < > #h %p"
			if ninja {
				hostile += " $(touch " + canary + "/c2) 'sq' \\bs $HOME $$"
			}
			flag := "-DEPBUILD_CANARY=" + hostile
			other := "'quoted' `touch " + canary + "/c5` $(touch " + canary + "/c6); x " // ends in a blank
			fixture.WriteFile(t, filepath.Join(s.src, "CMakeLists.txt"), "cmake_minimum_required(VERSION 3.13)\nproject(fixture C)\n"+
				"add_library(fixture SHARED fixture.c)\ninstall(TARGETS fixture DESTINATION lib)\n"+
				"file(WRITE \"${CMAKE_BINARY_DIR}/seen.txt\" \"${EPBUILD_OTHER}\")\n")
			fixture.WriteFile(t, filepath.Join(s.src, "fixture.c"), "int fixture(void) { return 1; }\n")
			log := filepath.Join(t.TempDir(), "argv")
			cc := argvRecorder(t, t.TempDir(), log)
			st := &recipes.CMakeStep{Options: map[string]string{
				"CMAKE_C_COMPILER": cc, "CMAKE_C_FLAGS": "-O2 " + shWord(flag), "EPBUILD_OTHER": other}}
			if err := s.cmake(context.Background(), 0, st, nil); err != nil {
				t.Fatalf("cmake step: %v", err)
			}
			var compiled bool
			for _, c := range calls(t, log) {
				if !slices.ContainsFunc(c, func(a string) bool { return strings.HasSuffix(a, "fixture.c") }) {
					continue
				}
				compiled = true
				if !slices.Contains(c, flag) || !slices.Contains(c, "-O2") {
					t.Errorf("the compiler got %q; want the flag %q as one argument", c, flag)
				}
			}
			if !compiled {
				t.Fatalf("fixture.c was never compiled: %q", calls(t, log))
			}
			if ents, _ := os.ReadDir(canary); len(ents) > 0 {
				t.Errorf("a shell ran a command from an option value: %s/%s exists", canary, ents[0].Name())
			}
			if b, err := os.ReadFile(filepath.Join(s.work, "cmake-build-0", "seen.txt")); err != nil || string(b) != other {
				t.Errorf("EPBUILD_OTHER reached CMake as %q (%v), want %q", b, err, other)
			}
		})
	}
	// without Ninja, a flag with $, \ or ' cannot be passed literally: exit 3, nothing run
	s := newTestStep(t, false)
	st := &recipes.CMakeStep{Options: map[string]string{"CMAKE_C_FLAGS": shWord("-DX=$HOME")}}
	err := s.cmake(context.Background(), 0, st, nil)
	var pe *toolchain.PreflightError
	if !errors.As(err, &pe) || pe.ExitCode() != 3 || !strings.Contains(err.Error(), "ninja") {
		t.Fatalf("a $ flag without Ninja: %v", err)
	}
	if _, err := os.Stat(filepath.Join(s.logs, "00-cmake.log")); !os.IsNotExist(err) {
		t.Errorf("cmake ran: %v", err)
	}
}

// A command step's arguments and env, and a python-extension step's env, arrive as they
// were written: no shell stands between epbuild and the program.
func TestCommandAndPythonStepsPassValuesLiterally(t *testing.T) {
	canary := filepath.Join(t.TempDir(), "canary")
	if err := os.Mkdir(canary, 0o755); err != nil {
		t.Fatal(err)
	}
	hostile := "`touch " + canary + "/c1` $(touch " + canary + "/c2); touch " + canary + "/c3 'sq' \"dq\" \\ $HOME"
	s := newTestStep(t, false)
	out := filepath.Join(t.TempDir(), "out")
	st := &recipes.CommandStep{Run: []string{"python3", "-c",
		"import os, sys; open(sys.argv[1], 'w').write(sys.argv[2] + '\\0' + os.environ['HOSTILE'])", out, hostile},
		Env: map[string]string{"HOSTILE": hostile}}
	if err := s.command(context.Background(), 0, st, nil); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(out); string(b) != hostile+"\x00"+hostile {
		t.Errorf("the command got %q", b)
	}
	fixture.WriteFile(t, filepath.Join(s.src, "setup.py"), "import os\nfrom setuptools import setup\n"+
		"open(os.environ['OUT'], 'w').write(os.environ['HOSTILE'])\nsetup(name='fixture', version='1', py_modules=['fixture'])\n")
	fixture.WriteFile(t, filepath.Join(s.src, "fixture.py"), "X = 1\n")
	pe := &recipes.PythonExtensionStep{Env: map[string]string{"HOSTILE": hostile, "OUT": out}}
	if err := s.pythonExtension(context.Background(), 1, pe, nil); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(out); string(b) != hostile {
		t.Errorf("setup.py got %q", b)
	}
	if ents, _ := os.ReadDir(canary); len(ents) > 0 {
		t.Errorf("a shell ran a command from a value: %s/%s exists", canary, ents[0].Name())
	}
}

// A step dir that leaves the tree, by .. or through a symlink, is refused at build time.
func TestStepDirStaysInTheTree(t *testing.T) {
	s := newTestStep(t, false)
	outside := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(s.src, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(s.src, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	for dir, want := range map[string]string{
		"../../elsewhere": "not a directory inside the source tree",
		"/etc":            "not a directory inside the source tree",
		"link":            "leads outside the source tree",
		"sub/../link":     "leads outside the source tree",
	} {
		err := s.command(context.Background(), 0, &recipes.CommandStep{Run: []string{"true"}, Dir: dir}, nil)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("dir %q: %v, want %q", dir, err, want)
		}
	}
	if err := s.command(context.Background(), 0, &recipes.CommandStep{Run: []string{"true"}, Dir: "sub"}, nil); err != nil {
		t.Errorf("dir sub: %v", err)
	}
}

// A check's file pattern finds nothing outside the prefix, whether it says ../ or goes
// through a symlink: a plan read from an installed manifest is not trusted to stay in.
func TestCheckFilesStayInThePrefix(t *testing.T) {
	prefix := t.TempDir()
	outside := t.TempDir()
	fixture.WriteFile(t, filepath.Join(outside, "secret"), "x")
	fixture.WriteFile(t, filepath.Join(prefix, "lib", "libok.so"), "x")
	if err := os.Symlink(filepath.Join(outside, "secret"), filepath.Join(prefix, "lib", "libescape.so")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("libok.so", filepath.Join(prefix, "lib", "libalias.so")); err != nil {
		t.Fatal(err)
	}
	rel, _ := filepath.Rel(prefix, filepath.Join(outside, "secret"))
	pc := &plan.PlanComponent{Component: recipes.Component{Name: "c", Checks: []recipes.Check{
		{File: filepath.ToSlash(rel)}, {File: "/etc/passwd"}, {File: "lib/libescape.so"}, {File: "lib/libalias.so"}, {File: "lib/lib*.so"},
	}}}
	res := verify.CheckComponent(context.Background(), verify.Checks(), check.Staged, &verify.Subject{Component: pc, Root: prefix})
	want := []string{"fail", "fail", "fail", "pass", "pass"}
	if len(res) != len(want) {
		t.Fatalf("results %+v", res)
	}
	for i, r := range res {
		if string(r.Status) != want[i] {
			t.Errorf("%s: %s (%s), want %s", r.ID, r.Status, r.Found, want[i])
		}
	}
	if found := res[4].Found; strings.Contains(found, "libescape") || !strings.Contains(found, "libok.so") {
		t.Errorf("lib/lib*.so matched %q", found)
	}
}

// Under the reproducibility measures a python-extension step keeps the interpreter's own
// compiler flags (-g, -DNDEBUG): setuptools 72 and later put an environment's CFLAGS in
// their place, so CFLAGS holding the prefix map alone would drop them. A user's CFLAGS
// are theirs and stay as they are.
func TestPythonStepKeepsInterpreterCFLAGS(t *testing.T) {
	sysOut, err := exec.Command("python3", "-c", `import sysconfig; print(sysconfig.get_config_var("CFLAGS") or "")`).Output()
	if err != nil {
		t.Skip("no python3")
	}
	sys := strings.Join(strings.Fields(string(sysOut)), " ")
	if sys == "" {
		t.Skip("this python3 has no CFLAGS of its own: nothing to keep")
	}
	const mapFlag = "-ffile-prefix-map=/tmp/epbuild-fixture-0123456789ab=fixture"
	for _, tc := range []struct {
		name, user string
		want       string
	}{
		{"measures only", "", sys + " " + mapFlag},
		{"user CFLAGS", "-O1 " + mapFlag, "-O1 " + mapFlag},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newTestStep(t, false)
			s.mapFlag = mapFlag
			cflags := mapFlag
			if tc.user != "" {
				cflags = tc.user
			}
			s.env = append(slices.DeleteFunc(slices.Clone(s.env), func(kv string) bool {
				return strings.HasPrefix(kv, "CFLAGS=") || strings.HasPrefix(kv, "CXXFLAGS=")
			}), "CFLAGS="+cflags, "CXXFLAGS="+mapFlag)
			out := filepath.Join(t.TempDir(), "flags")
			fixture.WriteFile(t, filepath.Join(s.src, "setup.py"), "import os\nfrom setuptools import setup\n"+
				"open(os.environ['OUT'], 'w').write(os.environ['CFLAGS'] + '\\n' + os.environ['CXXFLAGS'])\n"+
				"setup(name='fixture', version='1', py_modules=['fixture'])\n")
			fixture.WriteFile(t, filepath.Join(s.src, "fixture.py"), "X = 1\n")
			if err := s.pythonExtension(context.Background(), 0, &recipes.PythonExtensionStep{Env: map[string]string{"OUT": out}}, nil); err != nil {
				t.Fatal(err)
			}
			b, _ := os.ReadFile(out)
			got := strings.Split(string(b), "\n")
			if len(got) != 2 || got[0] != tc.want || got[1] != sys+" "+mapFlag {
				t.Errorf("setup.py saw CFLAGS, CXXFLAGS %q; want %q, %q", got, tc.want, sys+" "+mapFlag)
			}
		})
	}
}

func TestTailFileNamesFirstErrors(t *testing.T) {
	var b strings.Builder
	b.WriteString("nvcc -c internode.cu\n")
	b.WriteString("nvlink error   : Undefined reference to 'nvshmemi_ibgda_device_state_d' in 'internode.o'\n")
	for i := 0; i < 100; i++ {
		b.WriteString("  File \"x.py\", line 1, in run\n")
	}
	b.WriteString("RuntimeError: Error compiling objects for extension\n")
	p := filepath.Join(t.TempDir(), "log")
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	tail := tailFile(p, 40)
	if !strings.Contains(tail, "Undefined reference to 'nvshmemi_ibgda_device_state_d'") || !strings.HasSuffix(tail, "Error compiling objects for extension") {
		t.Errorf("tail lacks the cause or the end:\n%s", tail)
	}
}
