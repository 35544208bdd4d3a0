package builder

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/gofrs/flock"
)

// Store keeps each stage's output under stages/<stage>/<key>/: a directory that appears
// whole (built in a temporary sibling, then renamed) or not at all. A rerun with nothing
// changed finds every key present and does no work; a run killed midway leaves only
// temporary directories, which the next run ignores and replaces.
type Store struct {
	dir string
}

// OpenStore opens (creating) the stage store under dir.
func OpenStore(dir string) (*Store, error) {
	for _, d := range []string{"stages", "locks", "tmp"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return nil, fmt.Errorf("open stage store %s: %w", dir, err)
		}
	}
	return &Store{dir: dir}, nil
}

// Path is where a stage's output for key lives (whether or not it exists yet).
func (s *Store) Path(stage, key string) string { return filepath.Join(s.dir, "stages", stage, key) }

// Has reports whether the stage output for key is complete.
func (s *Store) Has(stage, key string) bool {
	_, err := os.Stat(filepath.Join(s.Path(stage, key), ".done"))
	return err == nil
}

// Produce runs make into a fresh temporary directory and publishes it as the stage's
// output for key, unless it is already there. Concurrent processes wait for each other
// on a lock per key, so the work happens once. It reports whether it found the output
// cached.
func (s *Store) Produce(ctx context.Context, stage, key string, make func(dir string) error) (cached bool, err error) {
	if s.Has(stage, key) {
		return true, nil
	}
	unlock, err := s.lock(ctx, stage+"-"+key)
	if err != nil {
		return false, err
	}
	defer unlock()
	if s.Has(stage, key) {
		return true, nil
	}
	final := s.Path(stage, key)
	if err := os.MkdirAll(filepath.Dir(final), 0o755); err != nil {
		return false, fmt.Errorf("%s stage %s: %w", stage, key[:12], err)
	}
	tmp, err := os.MkdirTemp(filepath.Join(s.dir, "tmp"), stage+"-"+key[:12]+"-")
	if err != nil {
		return false, fmt.Errorf("%s stage %s: %w", stage, key[:12], err)
	}
	keep := false
	defer func() {
		if !keep {
			_ = makeWritable(tmp)
			_ = os.RemoveAll(tmp)
		}
	}()
	if err := make(tmp); err != nil {
		return false, err
	}
	if err := os.WriteFile(filepath.Join(tmp, ".done"), []byte(time.Now().UTC().Format(time.RFC3339)+"\n"), 0o644); err != nil {
		return false, fmt.Errorf("%s stage %s: %w", stage, key[:12], err)
	}
	// a stale, incomplete output (no .done) from an older epbuild is moved aside first
	if _, err := os.Stat(final); err == nil {
		old := final + ".old-" + filepath.Base(tmp)
		if err := os.Rename(final, old); err != nil {
			return false, fmt.Errorf("%s stage %s: replace stale output: %w", stage, key[:12], err)
		}
		defer os.RemoveAll(old)
	}
	if err := os.Rename(tmp, final); err != nil {
		return false, fmt.Errorf("%s stage %s: publish: %w", stage, key[:12], err)
	}
	keep = true
	return false, nil
}

// Forget removes a stage output (for --force).
func (s *Store) Forget(stage, key string) error {
	p := s.Path(stage, key)
	if _, err := os.Stat(p); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	gone := p + ".forgotten-" + fmt.Sprint(time.Now().UnixNano())
	if err := os.Rename(p, gone); err != nil {
		return fmt.Errorf("forget %s stage %s: %w", stage, key[:12], err)
	}
	_ = makeWritable(gone)
	return os.RemoveAll(gone)
}

// WriteJSON writes v to dir/name atomically.
func WriteJSON(dir, name string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", name, err)
	}
	tmp := filepath.Join(dir, "."+name+".tmp")
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	return os.Rename(tmp, filepath.Join(dir, name))
}

// ReadJSON reads dir/name into v.
func ReadJSON(dir, name string, v any) error {
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		return fmt.Errorf("read %s: %w", name, err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("decode %s: %w", filepath.Join(dir, name), err)
	}
	return nil
}

func (s *Store) lock(ctx context.Context, name string) (func(), error) {
	fl := flock.New(filepath.Join(s.dir, "locks", name+".lock"))
	for {
		ok, err := fl.TryLock()
		if err != nil {
			return nil, fmt.Errorf("lock %s: %w", name, err)
		}
		if ok {
			return func() { _ = fl.Unlock() }, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// makeWritable lets RemoveAll delete trees with read-only directories (go module caches
// and some build outputs have them).
func makeWritable(dir string) error {
	return filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.IsDir() && fi.Mode().Perm()&0o200 == 0 {
			_ = os.Chmod(p, fi.Mode().Perm()|0o700)
		}
		return nil
	})
}

// Key hashes its parts (JSON-encoded) into a hex key.
func Key(parts ...any) string {
	h := sha256.New()
	enc := json.NewEncoder(h)
	for _, p := range parts {
		_ = enc.Encode(p)
	}
	return hex.EncodeToString(h.Sum(nil))
}
