package archive

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

// The member hook: its bytes come once, in the same pass, and the limits it returns
// bound the whole archive, what was read before it included.
func TestScanMemberHook(t *testing.T) {
	data := craftTar(t, sized("a", 100), file("m.json", "hello"), sized("b", 100), file("c", "c"), file("m.json", "again"))
	errFound := errors.New("refused by Found")
	cases := []struct {
		name  string
		hook  MemberHook
		kind  error  // nil: accepted
		entry string // named in the error
	}{
		{"limits that fit", MemberHook{MaxSize: 10, Found: limits(Limits{MaxBytes: 300, MaxEntries: 5})}, nil, ""},
		{"bytes over the new limit later", MemberHook{MaxSize: 10, Found: limits(Limits{MaxBytes: 150})}, ErrLimit, "b"},
		{"bytes over the new limit already", MemberHook{MaxSize: 10, Found: limits(Limits{MaxBytes: 50})}, ErrLimit, "m.json"},
		{"entries over the new limit", MemberHook{MaxSize: 10, Found: limits(Limits{MaxEntries: 3})}, ErrLimit, "c"},
		{"a member too large", MemberHook{MaxSize: 4, Found: limits(Limits{})}, ErrLimit, "m.json"},
		{"an error of Found", MemberHook{MaxSize: 10, Found: func([]byte) (Limits, error) { return Limits{}, errFound }}, errFound, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var got []string
			hook := c.hook
			hook.Name = "m.json"
			found := hook.Found
			hook.Found = func(b []byte) (Limits, error) {
				got = append(got, string(b))
				return found(b)
			}
			rep, err := Scan(context.Background(), bytes.NewReader(data), "t.tar", ExtractOptions{Member: &hook})
			switch {
			case c.kind == nil && err != nil:
				t.Fatalf("scan: %v", err)
			case c.kind != nil && !errors.Is(err, c.kind):
				t.Fatalf("scan: %v, want %v", err, c.kind)
			case c.entry != "" && !strings.Contains(err.Error(), `entry "`+c.entry+`"`):
				t.Fatalf("scan: %v does not name entry %q", err, c.entry)
			}
			if c.hook.MaxSize >= 5 && (len(got) != 1 || got[0] != "hello") {
				t.Errorf("Found got %q, want the first member's bytes, once", got)
			}
			if c.kind == nil {
				var names []string
				for _, e := range rep.Tree {
					names = append(names, e.Path)
				}
				if strings.Join(names, " ") != "a b c m.json" || rep.Tree[3].SHA256 != sha256Of("again") {
					t.Errorf("tree %v: want the last m.json, as extraction leaves it", rep.Tree)
				}
			}
		})
	}
	// the member must be a regular file; ExtractFile takes the hook too
	arc := filepath.Join(t.TempDir(), "l.tar")
	writeFile(t, arc, string(craftTar(t, symlink("m.json", "a"), file("a", "a"))), 0o644)
	hook := &MemberHook{Name: "m.json", MaxSize: 10, Found: limits(Limits{})}
	_, err := ExtractFile(context.Background(), arc, filepath.Join(t.TempDir(), "out"), ExtractOptions{Member: hook})
	if !errors.Is(err, ErrLayout) || !strings.Contains(err.Error(), "is not a regular file") {
		t.Errorf("a member that is a symlink: %v", err)
	}
}

func limits(l Limits) func([]byte) (Limits, error) {
	return func([]byte) (Limits, error) { return l, nil }
}

func sha256Of(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}
