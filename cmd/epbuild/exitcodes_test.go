package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestOfflineFetchSaysMirror: a fetch that cannot resolve its source's host exits 3
// (the environment lacks the network) and says how to do without it, in text and in
// --json. .onion names fail in Go's resolver without a DNS query (RFC 7686), so the
// test sends nothing; a .invalid name fails the same way where a resolver answers.
func TestOfflineFetchSaysMirror(t *testing.T) {
	dir := t.TempDir()
	writeRecipe(t, dir, "offline", gitComponent("a", "https://nonexistent.onion/org/a", strings.Repeat("ab", 20)))
	env := nodeEnv("EPBUILD_CACHE", filepath.Join(t.TempDir(), "cache"))
	code, _, errs := run(t, env, "--recipe-dir", dir, "fetch", "offline")
	if code != exitEnv {
		t.Errorf("fetch: exit %d, want %d\n%s", code, exitEnv, errs)
	}
	want := "cannot reach nonexistent.onion (DNS/connection error): pass --mirror DIR or set EPBUILD_MIRROR (epbuild mirror RECIPE DIR makes one where there is network)"
	if !strings.Contains(errs, want) {
		t.Errorf("fetch does not say %q:\n%s", want, errs)
	}
	code, out, _ := run(t, env, "--recipe-dir", dir, "fetch", "offline", "--json")
	var doc struct {
		OK    *bool `json:"ok"`
		Error struct {
			Code     string `json:"code"`
			ExitCode int    `json:"exit_code"`
			Message  string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("fetch --json: %v\n%s", err, out)
	}
	if code != exitEnv || doc.OK == nil || *doc.OK || doc.Error.Code != "environment" || doc.Error.ExitCode != exitEnv || !strings.Contains(doc.Error.Message, "--mirror DIR") {
		t.Errorf("fetch --json: exit %d\n%s", code, out)
	}
}

// TestEnvironmentErrors: errors that carry no exit code of their own but say the
// environment lacks something (a program, a permission, space, the network) exit 3;
// anything else stays a failed job.
func TestEnvironmentErrors(t *testing.T) {
	notFound := exec.Command("epbuild-no-such-program").Run()
	_, dnsErr := net.Dial("tcp", "nonexistent.onion:443")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	_, refused := net.Dial("tcp", addr)
	perm := &fs.PathError{Op: "open", Path: "/out/x", Err: syscall.EACCES}
	for _, c := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("run cmake: %w", notFound), true},
		{fmt.Errorf("resolve: %w", dnsErr), true},
		{fmt.Errorf("connect: %w", refused), true},
		{fmt.Errorf("write: %w", perm), true},
		{&fs.PathError{Op: "mkdir", Path: "/out", Err: syscall.EROFS}, true},
		{&fs.PathError{Op: "write", Path: "/out/x", Err: syscall.ENOSPC}, true},
		{errors.New("the checks failed"), false},
		{&fs.PathError{Op: "open", Path: "/x", Err: syscall.ENOENT}, false},
	} {
		if c.err == nil {
			t.Fatal("the fixture made no error")
		}
		if got := environmentError(c.err); got != c.want {
			t.Errorf("environmentError(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
