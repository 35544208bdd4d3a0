package source

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log"
	"math/rand"
	"net"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/epbuild/epbuild/builder/cache"
)

// gitEnv isolates the git CLI from the user's configuration and fixes commit dates, so
// fixture commits are the same on every run.
func gitEnv(home string) []string {
	return append(os.Environ(),
		"HOME="+home, "XDG_CONFIG_HOME="+home, "GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME=fixture", "GIT_AUTHOR_EMAIL=fixture@example.com",
		"GIT_COMMITTER_NAME=fixture", "GIT_COMMITTER_EMAIL=fixture@example.com",
		"GIT_AUTHOR_DATE=2024-01-02T03:04:05Z", "GIT_COMMITTER_DATE=2024-01-02T03:04:05Z",
	)
}

func runGit(t testing.TB, dir string, args ...string) string {
	t.Helper()
	out, err := gitOut(dir, nil, args...)
	if err != nil {
		t.Fatalf("git %s in %s: %v\n%s", strings.Join(args, " "), dir, err, out)
	}
	return strings.TrimSpace(out)
}

func gitOut(dir string, stdin []byte, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = gitEnv(os.TempDir())
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func writeFile(t testing.TB, path, content string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
}

// fixture is an upstream repository made with the git CLI.
type fixture struct {
	root   string // directory served over HTTP; the bare repo is root/<name>.git
	name   string // e.g. "org/proj"
	bare   string
	c1     string // first commit; annotated tag v1 points at it
	c2     string // branch "release" points here
	c3     string // main
	c4     string // side commit on c2, only reachable from refs/pull/7/head
	tagObj string // the tag object of v1
}

// newFixture builds a repository with several commits, an annotated tag, a branch and a
// pull-style ref. bulk adds that many bytes of incompressible content to c3, to make
// fetches last long enough to be interrupted.
func newFixture(t testing.TB, bulk int) *fixture {
	t.Helper()
	root := t.TempDir()
	fx := &fixture{root: root, name: "org/proj"}
	work := filepath.Join(t.TempDir(), "work")
	runGit(t, "", "init", "-q", "-b", "main", work)
	writeFile(t, filepath.Join(work, "README.md"), "# proj\n\nline two\nline three\n", 0o644)
	writeFile(t, filepath.Join(work, "src", "main.c"), "int main(void) {\n\treturn 0;\n}\n", 0o644)
	writeFile(t, filepath.Join(work, "tools", "build.sh"), "#!/bin/sh\necho build\n", 0o755)
	writeFile(t, filepath.Join(work, "deep_ep", "buffer.py"), "class Buffer:\n    def __init__(self):\n        pass\n", 0o644)
	writeFile(t, filepath.Join(work, "src", "long.c"), longC(0), 0o644)
	if err := os.Symlink("src/main.c", filepath.Join(work, "main-link.c")); err != nil {
		t.Fatal(err)
	}
	runGit(t, work, "add", "-A")
	runGit(t, work, "commit", "-q", "-m", "one")
	fx.c1 = runGit(t, work, "rev-parse", "HEAD")
	runGit(t, work, "tag", "-a", "v1", "-m", "version 1")
	fx.tagObj = runGit(t, work, "rev-parse", "v1")

	writeFile(t, filepath.Join(work, "README.md"), "# proj\n\nline two, changed\nline three\nline four\n", 0o644)
	writeFile(t, filepath.Join(work, "src", "util.c"), "int util(void) { return 1; }\n", 0o644)
	runGit(t, work, "add", "-A")
	runGit(t, work, "commit", "-q", "-m", "two")
	fx.c2 = runGit(t, work, "rev-parse", "HEAD")
	runGit(t, work, "branch", "release")

	os.Remove(filepath.Join(work, "src", "util.c"))
	writeFile(t, filepath.Join(work, "deep_ep", "buffer.py"), "class Buffer:\n    def __init__(self):\n        self._setup()\n\n    def _setup(self):\n        pass\n", 0o644)
	writeFile(t, filepath.Join(work, "noeol.txt"), "no newline at the end", 0o644)
	writeFile(t, filepath.Join(work, "src", "long.c"), longC(1), 0o644)
	if bulk > 0 {
		rng := rand.New(rand.NewSource(1))
		for i := 0; bulk > 0; i++ {
			n := min(bulk, 64<<10)
			b := make([]byte, n)
			rng.Read(b)
			writeFile(t, filepath.Join(work, "bulk", fmt.Sprintf("blob%03d.bin", i)), string(b), 0o644)
			bulk -= n
		}
	}
	runGit(t, work, "add", "-A")
	runGit(t, work, "commit", "-q", "-m", "three")
	fx.c3 = runGit(t, work, "rev-parse", "HEAD")

	runGit(t, work, "checkout", "-q", "-b", "pr", fx.c2)
	writeFile(t, filepath.Join(work, "src", "main.c"), "int main(void) {\n\treturn 7;\n}\n", 0o644)
	runGit(t, work, "commit", "-q", "-am", "pull request")
	fx.c4 = runGit(t, work, "rev-parse", "HEAD")
	runGit(t, work, "checkout", "-q", "main")

	fx.bare = filepath.Join(root, fx.name+".git")
	runGit(t, "", "clone", "-q", "--bare", work, fx.bare)
	runGit(t, fx.bare, "update-ref", "refs/pull/7/head", fx.c4)
	runGit(t, fx.bare, "branch", "-D", "pr")
	runGit(t, fx.bare, "config", "uploadpack.allowReachableSHA1InWant", "true")
	runGit(t, fx.bare, "config", "http.receivepack", "false")
	return fx
}

// longC is a C file of functions; version 1 changes two of them far apart, so that the
// diff has hunks with git's function-name headings.
func longC(version int) string {
	var b strings.Builder
	for i := 0; i < 12; i++ {
		fmt.Fprintf(&b, "static int function_with_a_rather_long_name_number_%02d_that_goes_past_eighty_columns(int x)\n{\n", i)
		ret := fmt.Sprintf("x + %d", i)
		if version == 1 && (i == 4 || i == 10) {
			ret = fmt.Sprintf("x * %d", i)
		}
		fmt.Fprintf(&b, "\tint y = x;\n\ty += 1;\n\treturn %s;\n}\n\n", ret)
	}
	return b.String()
}

// gitServer serves fixture repositories over git's smart HTTP protocol with the real
// git http-backend, counting requests; it can slow its responses and fail any request.
type gitServer struct {
	*httptest.Server
	fetches  atomic.Int64 // upload-pack POSTs: one per object transfer
	requests atomic.Int64
	forbid   atomic.Bool
	delay    time.Duration // per 8 KiB written
	t        testing.TB
}

func newGitServer(t testing.TB, root string, delay time.Duration) *gitServer {
	t.Helper()
	gitBin, err := exec.LookPath("git")
	if err != nil {
		t.Skip("git CLI not found")
	}
	s := &gitServer{delay: delay, t: t}
	h := &cgi.Handler{
		Path:   gitBin,
		Args:   []string{"http-backend"},
		Stderr: io.Discard, // upload-pack's "not our ref" is expected in some tests
		Logger: log.New(io.Discard, "", 0),
		Env:    []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1", "GIT_CONFIG_NOSYSTEM=1", "HOME=" + root},
	}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.requests.Add(1)
		if s.forbid.Load() {
			t.Errorf("network forbidden, but the git server got %s %s", r.Method, r.URL)
			http.Error(w, "forbidden", http.StatusForbidden)
			return
		}
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/git-upload-pack") {
			s.fetches.Add(1)
		}
		if s.delay > 0 {
			w = &slowWriter{ResponseWriter: w, delay: s.delay}
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *gitServer) url(name string) string { return s.URL + "/" + name }

// slowWriter trickles a response out, so that a transfer can be cut at a random moment.
type slowWriter struct {
	http.ResponseWriter
	delay time.Duration
}

func (w *slowWriter) Write(b []byte) (int, error) {
	n := 0
	for len(b) > 0 {
		c := min(len(b), 8<<10)
		m, err := w.ResponseWriter.Write(b[:c])
		n += m
		if err != nil {
			return n, err
		}
		if f, ok := w.ResponseWriter.(http.Flusher); ok {
			f.Flush()
		}
		time.Sleep(w.delay)
		b = b[c:]
	}
	return n, nil
}

// fileServer serves archives by path, counting GETs per path.
type fileServer struct {
	*httptest.Server
	mu     sync.Mutex
	files  map[string][]byte
	gets   map[string]int
	forbid atomic.Bool
	delay  time.Duration
}

func newFileServer(t testing.TB, delay time.Duration) *fileServer {
	s := &fileServer{files: map[string][]byte{}, gets: map[string]int{}, delay: delay}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.forbid.Load() {
			t.Errorf("network forbidden, but the archive server got %s %s", r.Method, r.URL)
			http.Error(w, "forbidden", http.StatusForbidden)
			return
		}
		s.mu.Lock()
		b, ok := s.files[r.URL.Path]
		s.gets[r.URL.Path]++
		s.mu.Unlock()
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Length", fmt.Sprint(len(b)))
		var out http.ResponseWriter = w
		if s.delay > 0 {
			out = &slowWriter{ResponseWriter: w, delay: s.delay}
		}
		out.Write(b)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *fileServer) put(path string, b []byte) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.files[path] = b
	return s.URL + path
}

func (s *fileServer) count(path string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gets[path]
}

func sha256hex(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// closedPortURL is a loopback URL where nothing listens.
func closedPortURL(t testing.TB, path string) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return "http://" + addr + path
}

func newTestFetcher(t testing.TB, cacheDir, mirror string) *Fetcher {
	t.Helper()
	if cacheDir == "" {
		cacheDir = t.TempDir()
	}
	c, err := cache.Open(cacheDir)
	if err != nil {
		t.Fatal(err)
	}
	f, err := New(Options{Cache: c, Mirror: mirror, Progress: ProgressOff})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// assertNoTemp fails if a fetch left anything under the cache's tmp/.
func assertNoTemp(t testing.TB, f *Fetcher) {
	t.Helper()
	des, err := os.ReadDir(filepath.Join(f.Cache().Dir(), "tmp"))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range des {
		t.Errorf("left in the cache's tmp/: %s", d.Name())
	}
}

// assertUnreachable: a host that cannot be reached is the environment (exit 3), and the
// error tells how to fetch without the network.
func assertUnreachable(t *testing.T, err error) {
	t.Helper()
	var se *Error
	if !errors.As(err, &se) || se.ExitCode() != 3 || !errors.Is(err, ErrUnreachable) {
		t.Fatalf("want an unreachable host (exit 3), got %#v", err)
	}
	for _, want := range []string{"cannot reach ", "--mirror DIR", "EPBUILD_MIRROR", "epbuild mirror RECIPE DIR"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error lacks %q: %v", want, err)
		}
	}
}

// TestUnresolvableHost: a name that does not resolve is an unreachable host named in
// the error, for git and archive sources alike. .onion names are refused by Go's
// resolver without asking a DNS server (RFC 7686), so the test sends nothing.
func TestUnresolvableHost(t *testing.T) {
	ctx := context.Background()
	f := newTestFetcher(t, "", "")
	err := f.FetchGit(ctx, Git{URL: "https://nonexistent.onion/org/proj", Commit: strings.Repeat("ab", 20)})
	assertUnreachable(t, err)
	if !strings.Contains(err.Error(), "cannot reach nonexistent.onion ") {
		t.Errorf("the host is not named: %v", err)
	}
	_, err = f.FetchArchive(ctx, Archive{URL: "https://nonexistent.onion/x.tar.gz", SHA256: strings.Repeat("ab", 32)})
	assertUnreachable(t, err)
}
