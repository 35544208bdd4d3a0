package builder

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestForcedRunsShareOneCache runs forced demo builds side by side on one cache, some
// killed at random moments: every run that is not killed succeeds with the reference
// artifact, and a plain run afterwards finds every stage whole and cached.
func TestForcedRunsShareOneCache(t *testing.T) {
	if os.Getenv("EPBUILD_TEST_CHILD") == "forced" {
		force := strings.Split(os.Getenv("EPBUILD_TEST_FORCE"), ",")
		res, err := demoRun(t, os.Getenv("EPBUILD_TEST_DIR"), os.Getenv("EPBUILD_TEST_OUT"), force...)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Println("ARTIFACT", res.SHA256)
		return
	}
	// the reference, and a cache holding every stage, as a cold run leaves it
	w := warmBuild(t)
	ref, dir, full := w.res, warmCache(t), w.took
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 2))
	t.Logf("seed %d; one run takes %v", seed, full)
	forces := []string{"all", "patch", "build", "check,package"}
	const rounds, perRound = 2, 4
	for round := range rounds {
		type child struct {
			cmd    *exec.Cmd
			out    bytes.Buffer
			killed bool
		}
		var kids []*child
		for i := range perRound {
			c := &child{cmd: exec.Command(os.Args[0], "-test.run=^TestForcedRunsShareOneCache$")}
			c.cmd.Env = append(os.Environ(), "EPBUILD_TEST_CHILD=forced", "GORACE=atexit_sleep_ms=0", "EPBUILD_TEST_DIR="+dir,
				"EPBUILD_TEST_OUT="+filepath.Join(dir, "..", fmt.Sprintf("out-%d-%d", round, i)),
				"EPBUILD_TEST_FORCE="+forces[(round+i)%len(forces)], "TMPDIR="+t.TempDir())
			c.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			c.cmd.Stdout, c.cmd.Stderr = &c.out, &c.out
			if err := c.cmd.Start(); err != nil {
				t.Fatal(err)
			}
			kids = append(kids, c)
		}
		// one child per round is killed at a random moment of its run
		victim := kids[rng.IntN(perRound)]
		time.Sleep(time.Duration(rng.Float64() * 2 * float64(full)))
		_ = syscall.Kill(-victim.cmd.Process.Pid, syscall.SIGKILL)
		victim.killed = true
		for i, c := range kids {
			err := c.cmd.Wait()
			if c.killed {
				continue
			}
			if err != nil {
				t.Fatalf("round %d, run %d (--force=%s): %v\n%s", round, i, forces[(round+i)%len(forces)], err, c.out.String())
			}
			if !strings.Contains(c.out.String(), "ARTIFACT "+ref.SHA256) {
				t.Fatalf("round %d, run %d: not the reference artifact %s:\n%s", round, i, ref.SHA256, c.out.String())
			}
		}
	}
	res, err := demoRun(t, dir, t.TempDir())
	if err != nil {
		t.Fatalf("a plain run after the forced ones: %v", err)
	}
	for _, s := range res.Stages {
		if !s.Cached {
			t.Errorf("after the forced runs, %s %s was not whole in the cache", s.Stage, s.Component)
		}
	}
	if res.SHA256 != ref.SHA256 {
		t.Errorf("artifact %s, want %s", res.SHA256, ref.SHA256)
	}
}
