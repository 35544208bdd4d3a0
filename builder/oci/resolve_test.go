package oci

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/epbuild/epbuild/builder/oci/ocitest"
)

// pull takes the plan key, its 12- and 16-hex prefixes and the artifact's file name;
// a prefix two plan keys share is an error listing both.
func TestPullResolvesPlanKeyPrefixes(t *testing.T) {
	reg := ocitest.Start(t, ocitest.Options{})
	art := demoArtifact(t)
	ctx := context.Background()
	c := newClient(t, Options{PlainHTTP: true})
	repo := "oci://" + reg.Addr + "/epbuild/cache"
	pushed, err := c.Push(ctx, art, mustRef(t, repo), PushOptions{})
	if err != nil {
		t.Fatal(err)
	}
	key := pushed.PlanKey
	for _, tag := range []string{key, key[:12], key[:16], filepath.Base(art)} {
		res, err := c.Pull(ctx, mustRef(t, repo+":"+tag), t.TempDir())
		if err != nil || res.PlanKey != key {
			t.Errorf("pull :%s: %v", tag, err)
		}
	}
	var nf *NotFoundError
	if _, err := c.Pull(ctx, mustRef(t, repo+":000000000000"), t.TempDir()); !errors.As(err, &nf) || !strings.Contains(err.Error(), "epbuild show") {
		t.Errorf("pull of a prefix no key has: %v", err)
	}
	var re *RefError
	if _, err := c.Pull(ctx, mustRef(t, repo+":gcp-b200-"+key[:12]+".tar.zst"), t.TempDir()); !errors.As(err, &re) || !strings.Contains(err.Error(), "gcp-b200") {
		t.Errorf("pull of another recipe's file name: %v", err)
	}

	// another plan key with the same first 12 digits
	other := key[:12] + strings.Repeat("0", 52)
	if other == key {
		other = key[:12] + strings.Repeat("1", 52)
	}
	r, _ := c.repository(mustRef(t, repo))
	d, err := r.Resolve(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Tag(ctx, d, other); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Pull(ctx, mustRef(t, repo+":"+key[:12]), t.TempDir()); !errors.As(err, &re) || exitCode(err) != 2 || !strings.Contains(err.Error(), key) || !strings.Contains(err.Error(), other) {
		t.Errorf("pull of an ambiguous prefix: %v", err)
	}
	if res, err := c.Pull(ctx, mustRef(t, repo+":"+key[:16]), t.TempDir()); err != nil || res.PlanKey != key {
		t.Errorf("pull of the 16 digits that tell them apart: %v", err)
	}
}
