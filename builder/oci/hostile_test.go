package oci

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/epbuild/epbuild/builder/manifest"
	"github.com/epbuild/epbuild/builder/pack"
)

// fakeRegistry is a misbehaving registry on 127.0.0.1: it serves one OCI manifest under
// every tag and its blobs, unless a hook answers instead.
type fakeRegistry struct {
	srv      *httptest.Server
	manifest []byte
	blobs    map[digest.Digest][]byte
	// onManifest and onBlob answer instead of the registry when they return true.
	onManifest func(w http.ResponseWriter, r *http.Request) bool
	onBlob     func(w http.ResponseWriter, r *http.Request, d digest.Digest) bool
	blobGets   atomic.Int64
	served     atomic.Int64 // body bytes written by hooks that stream
}

func startFake(t *testing.T, f *fakeRegistry) *fakeRegistry {
	t.Helper()
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := r.URL.Path
		switch {
		case p == "/v2/" || p == "/v2":
			w.WriteHeader(http.StatusOK)
		case strings.Contains(p, "/manifests/"):
			if f.onManifest != nil && f.onManifest(w, r) {
				return
			}
			w.Header().Set("Content-Type", ocispec.MediaTypeImageManifest)
			w.Header().Set("Docker-Content-Digest", digest.FromBytes(f.manifest).String())
			w.Header().Set("Content-Length", fmt.Sprint(len(f.manifest)))
			if r.Method != http.MethodHead {
				_, _ = w.Write(f.manifest)
			}
		case strings.Contains(p, "/blobs/"):
			f.blobGets.Add(1)
			d := digest.Digest(p[strings.LastIndex(p, "/")+1:])
			if f.onBlob != nil && f.onBlob(w, r, d) {
				return
			}
			b, ok := f.blobs[d]
			if !ok {
				http.NotFound(w, r)
				return
			}
			w.Header().Set("Content-Length", fmt.Sprint(len(b)))
			_, _ = w.Write(b)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeRegistry) ref(t *testing.T) Ref {
	return mustRef(t, "oci://"+strings.TrimPrefix(f.srv.URL, "http://")+"/epbuild/cache:"+demoKey(t))
}

// demoKey is the demo artifact's plan key.
func demoKey(t *testing.T) string {
	m, _, _, err := manifest.CheckArtifact(context.Background(), demoArtifact(t))
	if err != nil {
		t.Fatal(err)
	}
	return m.PlanKey
}

// demoOCI is the demo artifact as push stores it: its OCI manifest and blobs; change,
// when set, edits the layer descriptors before the manifest is made.
func demoOCI(t *testing.T, change func([]ocispec.Descriptor)) *fakeRegistry {
	t.Helper()
	art := demoArtifact(t)
	m, raw, _, err := manifest.CheckArtifact(context.Background(), art)
	if err != nil {
		t.Fatal(err)
	}
	data, name := mustRead(t, art), filepath.Base(art)
	f := &fakeRegistry{blobs: map[digest.Digest][]byte{}}
	var layers []ocispec.Descriptor
	for _, l := range []struct {
		mt, title string
		b         []byte
	}{
		{MediaTypeArtifact, name, data},
		{MediaTypeManifest, name + ".manifest.json", raw},
		{MediaTypeSHA256, name + ".sha256", []byte(digest.FromBytes(data).Encoded() + "  " + name + "\n")},
	} {
		d := ocispec.Descriptor{MediaType: l.mt, Digest: digest.FromBytes(l.b), Size: int64(len(l.b)), Annotations: map[string]string{ocispec.AnnotationTitle: l.title}}
		f.blobs[d.Digest] = l.b
		layers = append(layers, d)
	}
	if change != nil {
		change(layers)
	}
	om := ocispec.Manifest{MediaType: ocispec.MediaTypeImageManifest, ArtifactType: ArtifactType, Config: ocispec.DescriptorEmptyJSON, Layers: layers,
		Annotations: map[string]string{AnnotationPlanKey: m.PlanKey, AnnotationRecipe: m.Recipe}}
	om.SchemaVersion = 2
	f.manifest, err = json.Marshal(om)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// tight are deadlines small enough for a test to see them expire.
var tight = Deadlines{Response: 300 * time.Millisecond, Window: 100 * time.Millisecond, MinBytes: 4 << 10}

// assertNothingLeft checks that a failed pull into out left neither files nor out.
func assertNothingLeft(t *testing.T, out string) {
	t.Helper()
	if _, err := os.Lstat(out); !errors.Is(err, os.ErrNotExist) {
		ents, _ := os.ReadDir(out)
		t.Errorf("a failed pull left %s behind: %v", out, ents)
	}
}

// A registry that never answers, or trickles, ends a pull with a timeout naming the
// registry and the flags (exit 3), leaving nothing behind.
func TestPullDeadlines(t *testing.T) {
	hang := func(w http.ResponseWriter, r *http.Request) bool {
		<-r.Context().Done()
		return true
	}
	trickle := func(w http.ResponseWriter, r *http.Request) bool {
		w.WriteHeader(http.StatusOK)
		for {
			if _, err := w.Write([]byte{'{'}); err != nil {
				return true
			}
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				return true
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	for _, tc := range []struct {
		name string
		set  func(f *fakeRegistry)
	}{
		{"manifest never answered", func(f *fakeRegistry) { f.onManifest = hang }},
		{"manifest trickled", func(f *fakeRegistry) {
			f.onManifest = func(w http.ResponseWriter, r *http.Request) bool {
				if r.Method == http.MethodHead {
					return false
				}
				w.Header().Set("Content-Type", ocispec.MediaTypeImageManifest)
				w.Header().Set("Docker-Content-Digest", digest.FromBytes(f.manifest).String())
				return trickle(w, r)
			}
		}},
		{"blob never answered", func(f *fakeRegistry) {
			f.onBlob = func(w http.ResponseWriter, r *http.Request, _ digest.Digest) bool { return hang(w, r) }
		}},
		{"blob trickled", func(f *fakeRegistry) {
			f.onBlob = func(w http.ResponseWriter, r *http.Request, _ digest.Digest) bool { return trickle(w, r) }
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := demoOCI(t, nil)
			tc.set(f)
			startFake(t, f)
			c := newClient(t, Options{PlainHTTP: true, Deadlines: tight})
			out := filepath.Join(t.TempDir(), "pulled")
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a hang fails the test, not the run
			defer cancel()
			_, err := c.Pull(ctx, f.ref(t), out)
			var te *TimeoutError
			if !errors.As(err, &te) || exitCode(err) != 3 || !strings.Contains(err.Error(), "--registry-timeout") || ctx.Err() != nil {
				t.Fatalf("pull from a registry whose %s: %v (exit %d)", tc.name, err, exitCode(err))
			}
			assertNothingLeft(t, out)
		})
	}
}

// A blob that streams zeros without end, declared huge or small: the pull stops at the
// first bytes that fail the checks, or one byte past the declared size, without
// writing what the registry sends to disk.
func TestPullEndlessBlob(t *testing.T) {
	for _, declared := range []int64{1 << 40, 64 << 10} {
		t.Run(fmt.Sprint(declared), func(t *testing.T) {
			var artDigest digest.Digest
			f := demoOCI(t, func(l []ocispec.Descriptor) {
				l[0].Size = declared
				artDigest = l[0].Digest
			})
			f.onBlob = func(w http.ResponseWriter, r *http.Request, d digest.Digest) bool {
				if d != artDigest {
					return false
				}
				zeros := make([]byte, 32<<10)
				for r.Context().Err() == nil {
					n, err := w.Write(zeros)
					f.served.Add(int64(n))
					if err != nil || f.served.Load() > 256<<20 {
						break
					}
				}
				return true
			}
			startFake(t, f)
			c := newClient(t, Options{PlainHTTP: true, Deadlines: tight})
			out := filepath.Join(t.TempDir(), "pulled")
			_, err := c.Pull(context.Background(), f.ref(t), out)
			var ce *ContentError
			if !errors.As(err, &ce) || exitCode(err) != 2 {
				t.Fatalf("pull of an endless blob: %v (exit %d)", err, exitCode(err))
			}
			// the server may have sent what the socket buffers held; far from the 256 MiB
			// it would have sent to a pull that reads on
			if n := f.served.Load(); n > 64<<20 {
				t.Errorf("the registry sent %d MiB before the pull stopped", n>>20)
			}
			assertNothingLeft(t, out)
		})
	}
}

// A sidecar layer declared larger than push would send, or a manifest layer other than
// the artifact's manifest in size, is refused before it is fetched.
func TestPullBoundsSidecars(t *testing.T) {
	for _, tc := range []struct {
		name  string
		layer int
		size  int64
	}{
		{"huge manifest layer", 1, 600 << 20},
		{"huge sha256 layer", 2, 600 << 20},
		{"manifest layer of another size", 1, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := startFake(t, demoOCI(t, func(l []ocispec.Descriptor) { l[tc.layer].Size = tc.size }))
			c := newClient(t, Options{PlainHTTP: true, Deadlines: tight})
			out := filepath.Join(t.TempDir(), "pulled")
			_, err := c.Pull(context.Background(), f.ref(t), out)
			var ce *ContentError
			if !errors.As(err, &ce) || exitCode(err) != 2 || !strings.Contains(err.Error(), "bytes") {
				t.Fatalf("pull with a %s: %v (exit %d)", tc.name, err, exitCode(err))
			}
			if n := f.blobGets.Load(); tc.size > maxSidecar && n != 0 {
				t.Errorf("%d blobs fetched before the refusal", n)
			}
			assertNothingLeft(t, out)
		})
	}
}

// The files pull writes are named by the artifact's own manifest: a registry that
// titles the demo artifact as another recipe's is refused, and nothing is written.
func TestPullNamesFromTheArtifactsManifest(t *testing.T) {
	const forged = "gcp-b200-000000000000.tar.zst"
	f := startFake(t, demoOCI(t, func(l []ocispec.Descriptor) {
		for i, sfx := range []string{"", ".manifest.json", ".sha256"} {
			l[i].Annotations[ocispec.AnnotationTitle] = forged + sfx
		}
	}))
	c := newClient(t, Options{PlainHTTP: true})
	out := filepath.Join(t.TempDir(), "pulled")
	_, err := c.Pull(context.Background(), f.ref(t), out)
	var ce *ContentError
	if !errors.As(err, &ce) || exitCode(err) != 2 || !strings.Contains(err.Error(), forged) || !strings.Contains(err.Error(), filepath.Base(demoArtifact(t))) {
		t.Fatalf("pull of an artifact titled %s: %v", forged, err)
	}
	assertNothingLeft(t, out)

	// the same, honest: the files are the manifest's names
	f = startFake(t, demoOCI(t, nil))
	res, err := c.Pull(context.Background(), f.ref(t), out)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(res.Artifact) != filepath.Base(demoArtifact(t)) {
		t.Errorf("pulled %s", res.Artifact)
	}
}

// A pull killed mid-transfer (SIGKILL) leaves its staging directory; the next pull into
// the same directory removes it, and a staging directory still in use is left alone.
func TestPullRemovesStagingOfKilledPull(t *testing.T) {
	if dir := os.Getenv("EPBUILD_OCI_TEST_PULL_INTO"); dir != "" {
		ref, _ := ParseRef(os.Getenv("EPBUILD_OCI_TEST_PULL_REF"))
		c, _ := New(Options{PlainHTTP: true, AllowUnsigned: true})
		_, err := c.Pull(context.Background(), ref, dir)
		t.Fatalf("the pull that should have been killed ended: %v", err)
	}
	sent := make(chan struct{})
	var once atomic.Bool
	f := demoOCI(t, nil)
	art := digest.FromBytes(mustRead(t, demoArtifact(t)))
	f.onBlob = func(w http.ResponseWriter, r *http.Request, d digest.Digest) bool {
		if d != art || once.Swap(true) {
			return false
		}
		b := f.blobs[d]
		w.Header().Set("Content-Length", fmt.Sprint(len(b)))
		_, _ = w.Write(b[:len(b)/2])
		w.(http.Flusher).Flush()
		close(sent)
		<-r.Context().Done()
		return true
	}
	startFake(t, f)
	out := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestPullRemovesStagingOfKilledPull$")
	cmd.Env = append(os.Environ(), "EPBUILD_OCI_TEST_PULL_INTO="+out, "EPBUILD_OCI_TEST_PULL_REF="+f.ref(t).String())
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sent:
	case <-time.After(time.Minute):
		_ = cmd.Process.Kill()
		t.Fatal("the pull did not start its download")
	}
	// the staging file is there once the child reads the half sent
	stale := ""
	for range 1000 {
		if m, _ := filepath.Glob(filepath.Join(out, ".epbuild-pull-*", stagedArtifact)); len(m) == 1 {
			stale = filepath.Dir(m[0])
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if stale == "" {
		t.Fatal("no staging directory with a partial download appeared")
	}

	// a live one beside it must stay
	live, release, err := pack.StagingDir(out, ".epbuild-pull-")
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	c := newClient(t, Options{PlainHTTP: true})
	res, err := c.Pull(context.Background(), f.ref(t), out)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the killed pull's staging directory %s is still there", stale)
	}
	if _, err := os.Stat(live); err != nil {
		t.Errorf("a staging directory in use was removed: %v", err)
	}
	release()
	ents, _ := os.ReadDir(out)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	name := filepath.Base(res.Artifact)
	if strings.Join(names, " ") != strings.Join([]string{name, name + ".manifest.json", name + ".sha256"}, " ") {
		t.Errorf("after the second pull: %v", names)
	}
}
