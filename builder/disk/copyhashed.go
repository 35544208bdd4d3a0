package disk

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
)

// copyHashed copies src to a new file dst (mode 0644) and returns the sha256 of what it
// wrote.
func CopyHashed(src, dst string) (string, error) {
	in, err := os.Open(src)
	if err != nil {
		return "", err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	_, err = io.CopyBuffer(io.MultiWriter(out, h), in, make([]byte, 1<<20))
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return hex.EncodeToString(h.Sum(nil)), err
}
