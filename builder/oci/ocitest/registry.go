// Package ocitest runs a real OCI registry for tests: CNCF distribution's registry
// server (Debian's docker-registry package, which .ci/run installs) on a free loopback
// port, storing under a temporary directory that tests may read and damage.
//
// A binary rather than distribution as a Go dependency: it is the registry users run,
// untouched by our build, it needs no module graph of its own (distribution pulls in
// dozens of modules), and it is one apt package on a fresh Debian machine.
package ocitest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// Registry is a running registry.
type Registry struct {
	// Addr is host:port on 127.0.0.1.
	Addr string
	// Root is the storage directory (distribution's filesystem driver layout:
	// docker/registry/v2/blobs/sha256/<2>/<hex>/data).
	Root string
	cmd  *exec.Cmd
	done chan struct{}
	log  *lockedBuffer
}

// lockedBuffer collects the server's output, written by exec's copier while the test
// may read it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Options configure the registry.
type Options struct {
	// Htpasswd, when set, is the content of an htpasswd file (bcrypt entries): every
	// request must then carry basic-auth credentials from it.
	Htpasswd string
}

// binary finds the registry server: docker-registry (Debian) or registry (upstream).
func binary() string {
	for _, n := range []string{"docker-registry", "registry"} {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	return ""
}

// Start runs a registry for the test and stops it at the test's end. Without the binary
// the test is skipped, except under CI, where .ci/run installs it: there it fails.
func Start(t testing.TB, opts Options) *Registry {
	t.Helper()
	bin := binary()
	if bin == "" {
		msg := "no OCI registry server (docker-registry or registry) on PATH: apt-get install docker-registry"
		if os.Getenv("CI") != "" {
			t.Fatal(msg + " (.ci/run installs it)")
		}
		t.Skip(msg)
	}
	dir := t.TempDir()
	var last error
	// a free port can be taken between choosing it and the registry binding it: retry
	for range 3 {
		r, err := start(bin, dir, opts)
		if err == nil {
			t.Cleanup(r.Stop)
			return r
		}
		last = err
	}
	t.Fatalf("start %s: %v", bin, last)
	return nil
}

func start(bin, dir string, opts Options) (*Registry, error) {
	addr, err := FreeAddr()
	if err != nil {
		return nil, err
	}
	r := &Registry{Addr: addr, Root: filepath.Join(dir, "storage-"+strings.ReplaceAll(addr, ":", "-")), done: make(chan struct{}), log: &lockedBuffer{}}
	cfg := fmt.Sprintf(`version: 0.1
log:
  level: warn
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: %s
  delete:
    enabled: true
  maintenance:
    uploadpurging:
      enabled: false
http:
  addr: %s
`, r.Root, addr)
	if opts.Htpasswd != "" {
		hp := filepath.Join(dir, "htpasswd")
		if err := os.WriteFile(hp, []byte(opts.Htpasswd), 0o600); err != nil {
			return nil, err
		}
		cfg += fmt.Sprintf("auth:\n  htpasswd:\n    realm: epbuild-test\n    path: %s\n", hp)
	}
	cfgPath := filepath.Join(dir, "config-"+strings.ReplaceAll(addr, ":", "-")+".yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	r.cmd = exec.Command(bin, "serve", cfgPath)
	r.cmd.Stdout, r.cmd.Stderr = r.log, r.log
	if err := r.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { _ = r.cmd.Wait(); close(r.done) }()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-r.done:
			return nil, fmt.Errorf("the registry exited: %s", r.log.String())
		case <-time.After(50 * time.Millisecond):
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/v2/", nil)
		resp, err := http.DefaultClient.Do(req)
		cancel()
		if err == nil {
			resp.Body.Close()
			// 200 open, 401 with auth: either way it serves
			if resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusUnauthorized {
				return r, nil
			}
		}
	}
	r.Stop()
	return nil, fmt.Errorf("the registry did not answer on %s: %s", addr, r.log.String())
}

// Stop ends the registry (idempotent); its storage stays until the test ends.
func (r *Registry) Stop() {
	select {
	case <-r.done:
		return
	default:
	}
	_ = r.cmd.Process.Kill()
	<-r.done
}

// Blob is the path of a blob's data in the registry's storage.
func (r *Registry) Blob(digest string) string {
	hex := strings.TrimPrefix(digest, "sha256:")
	return filepath.Join(r.Root, "docker", "registry", "v2", "blobs", "sha256", hex[:2], hex, "data")
}

// FreeAddr returns a loopback address with a port that nothing listens on now.
func FreeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}
