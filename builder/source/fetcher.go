package source

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"

	"github.com/charmbracelet/log"

	"github.com/epbuild/epbuild/builder/cache"
)

// Git is a git source pinned by a full commit id.
type Git struct {
	URL    string `json:"url" yaml:"url"`
	Commit string `json:"commit" yaml:"commit"` // full 40-hex commit
	// Ref, if set, is a tag, a branch or a full ref name (refs/pull/466/head) that must point
	// at Commit (annotated tags peeled); it is checked at fetch time and kept in the cache
	// and in mirrors.
	Ref string `json:"ref,omitempty" yaml:"ref,omitempty"`
	// ExtraRefs are more refs to fetch, check and keep: "name" must point at Commit,
	// "name=<40-hex>" at that commit (which is fetched too).
	ExtraRefs []string `json:"extra_refs,omitempty" yaml:"extra_refs,omitempty"`
}

// Archive is a downloaded source pinned by its sha256.
type Archive struct {
	URL    string `json:"url" yaml:"url"`
	SHA256 string `json:"sha256" yaml:"sha256"`
	Strip  int    `json:"strip,omitempty" yaml:"strip,omitempty"` // leading path components to drop when extracting
}

// Options configure a Fetcher.
type Options struct {
	Cache *cache.Cache // nil: cache.OpenDefault
	// Mirror, if set, is a directory laid out by URL that serves every source; the network
	// is then never used.
	Mirror     string
	Logger     *log.Logger  // nil: discard
	HTTPClient *http.Client // archives only (go-git keeps its own client); nil: a default one
	Progress   ProgressMode
}

// Fetcher fetches pinned sources into its cache and lays them out in workspaces.
type Fetcher struct {
	cache    *cache.Cache
	mirror   string
	log      *log.Logger
	http     *http.Client
	progress ProgressMode
}

// New makes a Fetcher.
func New(opts Options) (*Fetcher, error) {
	f := &Fetcher{cache: opts.Cache, log: opts.Logger, http: opts.HTTPClient, progress: resolveMode(opts.Progress)}
	if f.cache == nil {
		c, err := cache.OpenDefault()
		if err != nil {
			return nil, err
		}
		f.cache = c
	}
	if f.log == nil {
		f.log = log.New(io.Discard)
	}
	if f.http == nil {
		f.http = &http.Client{}
	}
	if opts.Mirror != "" {
		abs, err := filepath.Abs(opts.Mirror)
		if err != nil {
			return nil, fmt.Errorf("mirror %s: %w", opts.Mirror, err)
		}
		fi, err := os.Stat(abs)
		if err != nil {
			return nil, fetchErr(err, "mirror %s", abs)
		}
		if !fi.IsDir() {
			return nil, fetchErr(nil, "mirror %s: not a directory", abs)
		}
		f.mirror = abs
	}
	return f, nil
}

// Cache is the store the Fetcher writes to.
func (f *Fetcher) Cache() *cache.Cache { return f.cache }
