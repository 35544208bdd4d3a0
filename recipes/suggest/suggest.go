// Package suggest names what a mistyped name most likely meant: rule ids, effect kinds,
// and any other closed list a user types from. It is a leaf (standard library only), so
// the loaders of recipes, patch sets and rules share it.
package suggest

import (
	"slices"
	"strings"
)

// Closest is the n candidates nearest to s by edit distance (case-insensitive), nearest
// first, ties in the candidates' order.
func Closest(s string, candidates []string, n int) []string {
	type cand struct {
		name string
		d    int
	}
	cs := make([]cand, 0, len(candidates))
	for _, c := range candidates {
		cs = append(cs, cand{c, Distance(strings.ToLower(s), strings.ToLower(c))})
	}
	slices.SortStableFunc(cs, func(a, b cand) int { return a.d - b.d })
	out := make([]string, 0, min(n, len(cs)))
	for _, c := range cs[:min(n, len(cs))] {
		out = append(out, c.name)
	}
	return out
}

// Typo is the candidate s is a misspelling of: a few edits away and fewer than half the
// candidate's length ("contain" for "contains"); "" when none is that close.
func Typo(s string, candidates []string) string {
	best := Closest(s, candidates, 1)
	if len(best) == 0 {
		return ""
	}
	d := Distance(strings.ToLower(s), strings.ToLower(best[0]))
	if d <= 3 && 2*d < len(best[0]) {
		return best[0]
	}
	return ""
}

// Distance is the Levenshtein distance of a and b, in bytes.
func Distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
