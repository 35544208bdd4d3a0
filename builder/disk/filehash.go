package disk

import (
	"context"
	"crypto/sha256"
	"fmt"

	"github.com/epbuild/epbuild/builder/archive"
)

func FileSHA256(path string) (string, error) {
	sum, _, err := archive.HashFile(context.Background(), path, sha256.New(), make([]byte, 1<<20))
	if err != nil {
		return "", fmt.Errorf("hash %s: %w", path, err)
	}
	return sum, nil
}
