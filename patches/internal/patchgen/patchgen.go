// Package patchgen makes synthetic source trees and changed versions of them,
// for measuring the patch engine. The content is generated, not taken from
// any project.
package patchgen

import (
	"fmt"
	"math/rand/v2"
	"strings"
)

// Config sizes a generated tree.
type Config struct {
	// Files is the number of text files in the base tree.
	Files int
	// Lines is the number of lines of each file.
	Lines int
	// HunksPerFile is the number of separate changes made to each modified file.
	HunksPerFile int
	// Seed makes the output reproducible.
	Seed uint64
}

// Tree maps slash-separated paths to content.
type Tree map[string][]byte

// Generate returns a base tree and a head tree that differs from it by
// Files*HunksPerFile separate line changes (each an edit, an insertion or a
// deletion, at least 10 lines apart so that each is its own hunk), plus a few
// created, deleted and renamed files.
func Generate(c Config) (base, head Tree) {
	r := rand.New(rand.NewPCG(c.Seed, c.Seed^0x9e3779b97f4a7c15))
	base, head = Tree{}, Tree{}
	for i := range c.Files {
		name := fmt.Sprintf("src/mod%02d/unit_%04d.c", i%16, i)
		lines := make([]string, c.Lines)
		for j := range lines {
			lines[j] = line(r, i, j)
		}
		base[name] = join(lines)
		switch {
		case i%50 == 7:
			// Deleted in head.
			continue
		case i%50 == 13:
			// Renamed in head, content kept.
			head[fmt.Sprintf("src/moved/unit_%04d.c", i)] = base[name]
			continue
		}
		head[name] = join(change(r, i, lines, c.HunksPerFile))
	}
	for i := range max(c.Files/50, 1) {
		lines := make([]string, 20)
		for j := range lines {
			lines[j] = line(r, 100000+i, j)
		}
		head[fmt.Sprintf("src/new/added_%02d.c", i)] = join(lines)
	}
	return base, head
}

// line makes one distinct line of C-like text: every line of every file differs,
// so a hunk's context matches in one place only.
func line(r *rand.Rand, file, n int) string {
	switch r.IntN(4) {
	case 0:
		return fmt.Sprintf("static int f%d_%d(int x) { return x * %d + %d; }", file, n, r.IntN(97), r.IntN(1000))
	case 1:
		return fmt.Sprintf("    total_%d += buffer[%d] ^ 0x%04x; /* step %d.%d */", file, r.IntN(4096), r.IntN(65536), file, n)
	case 2:
		return fmt.Sprintf("#define CONST_%d_%d %d", file, n, r.IntN(1<<20))
	default:
		return fmt.Sprintf("    if (state_%d > %d) { state_%d = %d; } // line %d", file, r.IntN(100), file, r.IntN(100), n)
	}
}

func change(r *rand.Rand, file int, lines []string, hunks int) []string {
	if hunks == 0 {
		return lines
	}
	gap := len(lines) / hunks
	out := make([]string, 0, len(lines)+hunks)
	for j, l := range lines {
		if gap >= 10 && j%gap == gap/2 {
			switch r.IntN(3) {
			case 0: // edit
				out = append(out, l+" /* changed */")
			case 1: // insert after
				out = append(out, l, fmt.Sprintf("    added_%d_%d();", file, j))
			default: // delete
			}
			continue
		}
		out = append(out, l)
	}
	return out
}

func join(lines []string) []byte {
	return []byte(strings.Join(lines, "\n") + "\n")
}
