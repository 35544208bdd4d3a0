// Command rulescheck (`make rules-check`) reads again, from a mirror of the upstream
// repositories, every file:line the rules cite in machine-checkable form (cites: in
// compat/rules.yaml) and fails when the cited lines no longer say what the rule quotes.
// The mirror is EPBUILD_RULES_MIRROR=DIR (or -mirror DIR) laid out as
// DIR/github.com/OWNER/REPO.git, bare repositories; without one it says so and exits 0.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/epbuild/epbuild/builder/quote"
	"github.com/epbuild/epbuild/compat"
)

// Exit codes, as epbuild's: 1 a citation no longer holds, 2 bad input (the rules), 3 the
// environment lacks something (git, or a mirror directory that is not one).
const (
	exitFailed = 1
	exitInput  = 2
	exitEnv    = 3
)

func main() {
	mirror := flag.String("mirror", os.Getenv("EPBUILD_RULES_MIRROR"), "the mirror directory (DIR/github.com/OWNER/REPO.git); default $EPBUILD_RULES_MIRROR")
	flag.Parse()
	rules, err := compat.LoadRules()
	if err != nil {
		fmt.Fprintln(os.Stderr, "rulescheck:", err)
		os.Exit(exitInput)
	}
	os.Exit(run(context.Background(), os.Stdout, rules, *mirror))
}

// result is one citation's verdict.
type result struct {
	rule string
	cite compat.Cite
	// skip says why the citation was not checked (its repository is not in the mirror).
	skip string
	// fail says why it does not hold.
	fail string
}

// run checks every citation and prints one line each, then a summary; it returns the
// exit code.
func run(ctx context.Context, w io.Writer, rules *compat.Rules, mirror string) int {
	if mirror == "" {
		fmt.Fprintln(w, "rulescheck: skipped: no mirror (set EPBUILD_RULES_MIRROR=DIR, with DIR/github.com/OWNER/REPO.git bare repositories)")
		return 0
	}
	if st, err := os.Stat(mirror); err != nil || !st.IsDir() {
		fmt.Fprintf(w, "rulescheck: mirror %s is not a directory: %v\n", quote.Term(mirror), err)
		return exitEnv
	}
	if _, err := exec.LookPath("git"); err != nil {
		fmt.Fprintln(w, "rulescheck: the git CLI is needed to read the mirror:", err)
		return exitEnv
	}
	var ok, skipped, failed int
	for _, r := range rules.All() {
		for _, c := range r.Cites {
			res := check(ctx, mirror, r.ID, c)
			switch {
			case res.fail != "":
				failed++
				fmt.Fprintf(w, "FAIL %s %s (%s:%d): %s\n", r.ID, quote.Term(c.String()), rules.File, c.Line(), quote.Term(res.fail))
			case res.skip != "":
				skipped++
				fmt.Fprintf(w, "skip %s %s: %s\n", r.ID, quote.Term(c.String()), quote.Term(res.skip))
			default:
				ok++
				fmt.Fprintf(w, "ok   %s %s\n", r.ID, quote.Term(c.String()))
			}
		}
	}
	fmt.Fprintf(w, "rulescheck: %d citations hold, %d fail, %d not in the mirror\n", ok, failed, skipped)
	if failed > 0 {
		return exitFailed
	}
	return 0
}

// check reads the cited blob from the mirror and looks for the quoted text in the cited
// lines, whitespace runs compared as one space (indentation is not the claim).
func check(ctx context.Context, mirror, rule string, c compat.Cite) result {
	res := result{rule: rule, cite: c}
	rest := strings.TrimPrefix(c.Repo, "https://")
	gitDir := filepath.Join(mirror, filepath.FromSlash(rest)+".git")
	if st, err := os.Stat(gitDir); err != nil || !st.IsDir() {
		res.skip = "no " + filepath.ToSlash(rest) + ".git in the mirror"
		return res
	}
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, "git", "--git-dir", gitDir, "show", c.Commit+":"+c.Path)
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_TERMINAL_PROMPT=0")
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			res.fail = fmt.Sprintf("git show %s:%s: %s", c.Commit, c.Path, strings.TrimSpace(errb.String()))
			return res
		}
		res.fail = fmt.Sprintf("git show %s:%s: %v", c.Commit, c.Path, err)
		return res
	}
	first, last, err := c.Range()
	if err != nil {
		res.fail = err.Error()
		return res
	}
	lines := strings.Split(out.String(), "\n")
	if last > len(lines) {
		res.fail = fmt.Sprintf("the file has %d lines, the citation names %s", len(lines), c.Lines)
		return res
	}
	got := strings.Join(strings.Fields(strings.Join(lines[first-1:last], "\n")), " ")
	want := strings.Join(strings.Fields(c.Says), " ")
	if !strings.Contains(got, want) {
		res.fail = fmt.Sprintf("lines %s do not say %q", c.Lines, want)
	}
	return res
}
