package oci

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"oras.land/oras-go/v2/registry/remote"
)

// maxTags bounds the tags read to resolve a plan key's prefix.
const maxTags = 100000

// planPrefix returns the plan-key prefix a reference stands for, and the recipe it
// names: the 12 or 16 hex digits that artifact names and `epbuild show` print, or an
// artifact's file name (<recipe>-<12 hex>.tar.zst). ok is false for any other tag (a
// full plan key included), which is taken as it is.
func planPrefix(ref Ref) (prefix, recipe string, ok bool) {
	t := ref.Reference
	if ref.isDigest() || isPlanKey(t) {
		return "", "", false
	}
	if base, found := strings.CutSuffix(t, artifactSuffix); found {
		i := strings.LastIndexByte(base, '-')
		if i > 0 && isHex(base[i+1:]) && len(base)-i-1 == 12 {
			return base[i+1:], base[:i], true
		}
		return "", "", false
	}
	if (len(t) == 12 || len(t) == 16) && isHex(t) {
		return t, "", true
	}
	return "", "", false
}

func isHex(s string) bool {
	for _, r := range s {
		if (r < '0' || r > '9') && (r < 'a' || r > 'f') {
			return false
		}
	}
	return s != ""
}

// resolvePrefix finds the one plan-key tag of repo that starts with prefix, listing the
// repository's tags within the response deadline. None is a *NotFoundError, several a
// *RefError listing them.
func (c *Client) resolvePrefix(ctx context.Context, repo *remote.Repository, ref Ref, prefix string) (Ref, error) {
	ctx, cancel := c.small(ctx)
	defer cancel()
	var found []string
	n := 0
	errEnough := errors.New("enough")
	err := repo.Tags(ctx, "", func(tags []string) error {
		for _, t := range tags {
			if isPlanKey(t) && strings.HasPrefix(t, prefix) {
				found = append(found, t)
			}
		}
		if n += len(tags); n >= maxTags {
			return errEnough
		}
		return nil
	})
	if err != nil && !errors.Is(err, errEnough) {
		return ref, classify(ref, "list the tags of "+ref.WithTag("").String(), err)
	}
	switch len(found) {
	case 0:
		return ref, &NotFoundError{Ref: ref, Err: fmt.Errorf("no plan key tag starts with %s", prefix)}
	case 1:
		c.debugf("resolved", "prefix", prefix, "plan", found[0])
		return ref.WithTag(found[0]), nil
	}
	return ref, &RefError{Ref: ref.String(), Err: fmt.Errorf("%d plan keys start with %s: %s; give more of the key", len(found), prefix, strings.Join(found, ", "))}
}
