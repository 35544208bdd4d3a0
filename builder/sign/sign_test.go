package sign

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSignVerify(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "ci.key")
	id, err := NewKey(key)
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(key); st.Mode().Perm() != 0o600 {
		t.Errorf("private key mode %v", st.Mode())
	}
	if _, err := NewKey(key); err == nil {
		t.Error("NewKey replaced an existing key")
	}
	s, err := LoadSigner(key)
	if err != nil || s.ID != id {
		t.Fatalf("LoadSigner: %v %v", s, err)
	}
	st := Statement{Manifest: "sha256:" + strings.Repeat("a", 64), SHA256: strings.Repeat("b", 64), Recipe: "demo", PlanKey: strings.Repeat("c", 64)}
	env, err := s.Sign(st)
	if err != nil {
		t.Fatal(err)
	}
	ring, err := LoadKeyring(dir) // the directory: its *.pub
	if err != nil {
		t.Fatal(err)
	}
	got, by, err := ring.Verify(env)
	if err != nil || *got != st || by != id {
		t.Fatalf("Verify: %+v %s %v", got, by, err)
	}

	// another key's signature, and a changed payload, are refused
	other := filepath.Join(t.TempDir(), "other.key")
	if _, err := NewKey(other); err != nil {
		t.Fatal(err)
	}
	os2, _ := LoadSigner(other)
	foreign, _ := os2.Sign(st)
	if _, _, err := ring.Verify(foreign); err == nil || !strings.Contains(err.Error(), os2.ID) {
		t.Errorf("a foreign key's signature: %v", err)
	}
	var e Envelope
	_ = json.Unmarshal(env, &e)
	e.Payload = []byte(strings.Replace(string(e.Payload), "demo", "gcp-b200", 1))
	changed, _ := json.Marshal(e)
	if _, _, err := ring.Verify(changed); err == nil {
		t.Error("a changed payload verified")
	}
	if _, err := LoadKeyring(key); err == nil {
		t.Error("a private key was taken as a trusted public key")
	}
}
