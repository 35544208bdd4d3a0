package stage

import (
	"fmt"
	"path/filepath"
	"sync"

	"github.com/charmbracelet/log"

	"github.com/epbuild/epbuild/builder/cache"
	"github.com/epbuild/epbuild/builder/disk"
	"github.com/epbuild/epbuild/builder/embedded"
	"github.com/epbuild/epbuild/builder/source"
	"github.com/epbuild/epbuild/builder/store"
	"github.com/epbuild/epbuild/patches"
)

// FetchSources serves every URL from the user's fetcher (network or --mirror) except the
// embedded repositories (the demo and the tools), which come from a mirror epbuild lays out from its own
// binary on first use.
type FetchSources struct {
	Main  *source.Fetcher
	cache *cache.Cache
	log   *log.Logger

	once     sync.Once
	embedded *source.Fetcher
	err      error
}

// NewSources builds the fetchers over one cache.
func NewSources(c *cache.Cache, mirror string, l *log.Logger, progress source.ProgressMode) (*FetchSources, error) {
	main, err := source.New(source.Options{Cache: c, Mirror: mirror, Logger: l, Progress: progress})
	if err != nil {
		return nil, err
	}
	return &FetchSources{Main: main, cache: c, log: l}, nil
}

// For picks the fetcher for a URL. An embedded URL is served by the embedded mirror
// only: its host does not exist anywhere else, so a mirror that cannot be laid out is
// the error (no space in the cache, most likely), never a lookup of that host.
func (s *FetchSources) For(rawURL string) (*source.Fetcher, error) {
	if !embedded.Served(rawURL) {
		return s.Main, nil
	}
	s.once.Do(func() {
		dir := filepath.Join(s.cache.Dir(), "embedded", embedded.Digest())
		if err := embedded.Ensure(dir); err != nil {
			s.err = disk.NoSpaceIn(fmt.Errorf("lay out the embedded repositories in %s: %w", dir, err),
				"lay out the embedded repositories", disk.Place{Dir: s.cache.Dir(), Fix: store.FixCacheSpace})
			return
		}
		s.embedded, s.err = source.New(source.Options{Cache: s.cache, Mirror: dir, Logger: s.log})
	})
	return s.embedded, s.err
}

// Upstream serves the upstream content of patch sets (diffs, files) through s.
func Upstream(s Sources) patches.Upstream { return upstream{s} }
