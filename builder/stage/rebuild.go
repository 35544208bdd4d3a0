package stage

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/epbuild/epbuild/builder/diff"
	"github.com/epbuild/epbuild/builder/envsh"
	"github.com/epbuild/epbuild/builder/plan"
	"github.com/epbuild/epbuild/builder/store"
)

// RebuildCheck is a second build of the plan, at another location, compared with the first.
type RebuildCheck struct {
	Equal  bool   `json:"equal"`
	SHA256 string `json:"sha256"`
	// Varied says what the second build changed of what users change between builds.
	Varied []string `json:"varied"`
	// Kept is where the second artifact was kept, when it differs from the first.
	Kept string       `json:"kept,omitempty"`
	Diff *diff.Report `json:"diff"`
}

// CacheReport says what the shared build cache did in a run.
type CacheReport struct {
	From string `json:"from,omitempty"` // the store looked in (--cache-from)
	Hit  bool   `json:"hit"`            // the artifact came from it: nothing was built here
	// Fetched is what was taken (reference and digest).
	Fetched string `json:"fetched,omitempty"`
	To      string `json:"to,omitempty"` // the store pushed to (--cache-to)
	// Stored is where the artifact went; empty when the push failed or was not needed.
	Stored string `json:"stored,omitempty"`
	// Warnings say why the cache was not used, or why the push failed.
	Warnings []string `json:"warnings,omitempty"`
}

// Rebuild builds p a second time from nothing, as r would, in a stage store of its own
// under dir (dir/elsewhere/cache; the fetched sources are shared) with its artifact in
// dir/out, changing what users change between builds (varyRebuild): the rebuild
// check's second build. It says what it changed; its errors say they are the rebuild
// check's. r is left as it was.
func (r *Runner) Rebuild(ctx context.Context, p *plan.Plan, dir string) (*Result, []string, error) {
	again := *r
	var err error
	if again.Store, err = store.OpenStore(filepath.Join(dir, "elsewhere", "cache")); err != nil {
		return nil, nil, err
	}
	defer again.Store.Close()
	again.OutDir, again.Force, again.early, again.probing = filepath.Join(dir, "out"), nil, nil, nil
	varied, restore, err := varyRebuild(&again, dir)
	if err != nil {
		return nil, nil, fmt.Errorf("rebuild check: %w", err)
	}
	r.Log.Info("rebuild check: building again from nothing", "store", again.Store.Dir(), "varied", strings.Join(varied, "; "))
	res, err := again.Run(ctx, p)
	restore()
	if err != nil {
		return nil, nil, fmt.Errorf("rebuild check: the second build failed: %w", err)
	}
	return res, varied, nil
}

// varyRebuild changes, for the second build of a rebuild check, what users change
// between builds and what must not reach the bytes: the cache (already another), the
// build root, the job count, the caller's time zone and umask. restore gives the umask
// back. It says what it changed.
func varyRebuild(r *Runner, dir string) (varied []string, restore func(), err error) {
	varied = append(varied, "cache "+r.Store.Dir())
	if !r.Repro.Off {
		root := filepath.Join(dir, "root")
		if err := os.Mkdir(root, 0o700); err != nil {
			return nil, nil, err
		}
		r.Repro.Root = root
		varied = append(varied, "build root "+root)
	}
	tc := *r.Toolchain
	if tc.Jobs > 1 {
		tc.Jobs = max(1, tc.Jobs/2)
	} else {
		tc.Jobs = 2
	}
	r.Toolchain = &tc
	varied = append(varied, fmt.Sprintf("jobs %d", tc.Jobs))
	r.Environ = envsh.WithEnv(r.Environ, map[string]string{"TZ": "Pacific/Chatham"}) // +12:45, a zone few build hosts have
	varied = append(varied, "TZ=Pacific/Chatham")
	old := setUmask(0o077)
	varied = append(varied, "umask 077")
	return varied, func() { setUmask(old) }, nil
}
