// Package sign signs epbuild artifacts and checks their signatures: ed25519 keys (PEM,
// PKCS #8 and PKIX, as openssl writes them) and DSSE envelopes whose payload is a
// Statement binding the artifact's OCI manifest digest and sha256 (docs/signing.md).
//
// A checksum proves that an artifact matches its own manifest; only a signature says
// who built it. Standard library only: keys and envelopes are checked offline.
package sign

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// PayloadType is the DSSE payload type of a Statement.
const PayloadType = "application/vnd.epbuild.signature-payload.v1+json"

// Statement is what a signature vouches for.
type Statement struct {
	// Manifest is the OCI manifest digest of the artifact (sha256:<hex>): it names every
	// layer by digest, so the signature covers the artifact, its manifest, SBOM,
	// .sha256 and wheels as pushed.
	Manifest string `json:"oci_manifest"`
	// SHA256 is the artifact's (the .tar.zst's) sha256, hex.
	SHA256  string `json:"artifact_sha256"`
	Recipe  string `json:"recipe"`
	PlanKey string `json:"plan_key"`
}

// Envelope is a DSSE envelope (github.com/secure-systems-lab/dsse).
type Envelope struct {
	PayloadType string      `json:"payloadType"`
	Payload     []byte      `json:"payload"` // base64 in JSON
	Signatures  []Signature `json:"signatures"`
}

// Signature is one signature of an envelope.
type Signature struct {
	KeyID string `json:"keyid"`
	Sig   []byte `json:"sig"` // base64 in JSON
}

// pae is DSSE's pre-authentication encoding: what the key signs.
func pae(payloadType string, payload []byte) []byte {
	var b bytes.Buffer
	b.WriteString("DSSEv1 " + strconv.Itoa(len(payloadType)) + " " + payloadType + " " + strconv.Itoa(len(payload)) + " ")
	b.Write(payload)
	return b.Bytes()
}

// KeyID names a public key: the first 16 hex digits of the sha256 of its PKIX encoding.
func KeyID(pub ed25519.PublicKey) string {
	der, _ := x509.MarshalPKIXPublicKey(pub)
	s := sha256.Sum256(der)
	return hex.EncodeToString(s[:8])
}

// Signer is a private key.
type Signer struct {
	key ed25519.PrivateKey
	ID  string
}

// Sign returns the DSSE envelope of st, signed, as JSON.
func (s *Signer) Sign(st Statement) ([]byte, error) {
	payload, err := json.Marshal(st)
	if err != nil {
		return nil, err
	}
	env := Envelope{PayloadType: PayloadType, Payload: payload,
		Signatures: []Signature{{KeyID: s.ID, Sig: ed25519.Sign(s.key, pae(PayloadType, payload))}}}
	return json.Marshal(env)
}

// Keyring is the public keys a user trusts.
type Keyring struct {
	keys map[string]ed25519.PublicKey // by KeyID
}

// Len is the number of keys.
func (k *Keyring) Len() int {
	if k == nil {
		return 0
	}
	return len(k.keys)
}

// IDs lists the key ids, sorted.
func (k *Keyring) IDs() []string {
	var ids []string
	if k != nil {
		for id := range k.keys {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	return ids
}

// MaxEnvelope bounds a signature envelope read from a registry.
const MaxEnvelope = 64 << 10

// Verify checks envelope (DSSE JSON) against the keyring and returns its statement and
// the id of the key that signed it. An envelope no trusted key signed is an error.
func (k *Keyring) Verify(envelope []byte) (*Statement, string, error) {
	if len(envelope) > MaxEnvelope {
		return nil, "", fmt.Errorf("a signature envelope of %d bytes: at most %d", len(envelope), MaxEnvelope)
	}
	var env Envelope
	if err := json.Unmarshal(envelope, &env); err != nil {
		return nil, "", fmt.Errorf("the signature envelope is not DSSE JSON: %w", err)
	}
	if env.PayloadType != PayloadType {
		return nil, "", fmt.Errorf("the signature's payload type is %q, want %s", env.PayloadType, PayloadType)
	}
	msg := pae(env.PayloadType, env.Payload)
	for _, s := range env.Signatures {
		pub, ok := k.keys[s.KeyID]
		if !ok || !ed25519.Verify(pub, msg, s.Sig) {
			continue
		}
		var st Statement
		if err := json.Unmarshal(env.Payload, &st); err != nil {
			return nil, "", fmt.Errorf("the signed payload is not a statement: %w", err)
		}
		return &st, s.KeyID, nil
	}
	var ids []string
	for _, s := range env.Signatures {
		ids = append(ids, strconv.Quote(s.KeyID))
	}
	return nil, "", fmt.Errorf("signed by key(s) [%s], none of them a trusted key that verifies it (trusted: %s)", strings.Join(ids, " "), strings.Join(k.IDs(), ", "))
}

// NewKey writes a new ed25519 key pair: the private key to path (PKCS #8 PEM, mode
// 0600) and the public key to path.pub (PKIX PEM), each written to a temporary name and
// renamed. An existing file is not replaced.
func NewKey(path string) (string, error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return "", err
	}
	p8, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return "", err
	}
	pk, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return "", err
	}
	for _, f := range []string{path, path + ".pub"} {
		if _, err := os.Lstat(f); err == nil {
			return "", fmt.Errorf("write key %s: it exists; remove it or name another file", f)
		}
	}
	if err := writeNew(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: p8}), 0o600); err != nil {
		return "", err
	}
	if err := writeNew(path+".pub", pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pk}), 0o644); err != nil {
		_ = os.Remove(path)
		return "", err
	}
	return KeyID(pub), nil
}

func writeNew(path string, b []byte, mode os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-")
	if err != nil {
		return fmt.Errorf("write key %s: %w", path, err)
	}
	tmp := f.Name()
	_, err = f.Write(b)
	if err == nil {
		err = f.Chmod(mode)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Link(tmp, path) // fails when path exists, unlike rename
	}
	_ = os.Remove(tmp)
	if err != nil {
		return fmt.Errorf("write key %s: %w", path, err)
	}
	return nil
}

// LoadSigner reads a private key written by NewKey (or `openssl genpkey -algorithm
// ed25519`).
func LoadSigner(path string) (*Signer, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read signing key %s: %w", path, err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("signing key %s: not a PEM PRIVATE KEY; make one with `epbuild key new FILE`", path)
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("signing key %s: %w", path, err)
	}
	priv, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("signing key %s: a %T, epbuild signs with ed25519 keys", path, k)
	}
	return &Signer{key: priv, ID: KeyID(priv.Public().(ed25519.PublicKey))}, nil
}

// LoadKeyring reads public keys: each path is a PEM file (one or more PUBLIC KEY
// blocks) or a directory, whose *.pub files are read. A missing directory is empty.
func LoadKeyring(paths ...string) (*Keyring, error) {
	k := &Keyring{keys: map[string]ed25519.PublicKey{}}
	for _, p := range paths {
		st, err := os.Stat(p)
		if err == nil && st.IsDir() {
			files, _ := filepath.Glob(filepath.Join(p, "*.pub"))
			for _, f := range files {
				if err := k.addFile(f); err != nil {
					return nil, err
				}
			}
			continue
		}
		if err := k.addFile(p); err != nil {
			return nil, err
		}
	}
	return k, nil
}

func (k *Keyring) addFile(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read trusted key %s: %w", path, err)
	}
	n := 0
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			break
		}
		if blk.Type != "PUBLIC KEY" {
			continue
		}
		pk, err := x509.ParsePKIXPublicKey(blk.Bytes)
		if err != nil {
			return fmt.Errorf("trusted key %s: %w", path, err)
		}
		pub, ok := pk.(ed25519.PublicKey)
		if !ok {
			return fmt.Errorf("trusted key %s: a %T, epbuild checks ed25519 keys", path, pk)
		}
		k.keys[KeyID(pub)] = pub
		n++
	}
	if n == 0 {
		return errors.New("trusted key " + path + ": no PEM PUBLIC KEY in it (the .pub file `epbuild key new` writes)")
	}
	return nil
}
