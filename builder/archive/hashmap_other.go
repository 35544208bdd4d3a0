//go:build !linux

package archive

import (
	"context"
	"hash"
	"os"
)

// mapMin: files are read, not mapped, here.
const mapMin = 1<<63 - 1

// mapChunk is how much is hashed between checks of ctx.
const mapChunk = 4 << 20

func mapFile(*os.File, int64) ([]byte, func(), bool) { return nil, nil, false }

func noFault(f func()) bool { f(); return true }

func hashMapped(context.Context, *os.File, int64, hash.Hash) (bool, error) { return false, nil }
