package verify

import (
	"strings"
	"testing"

	"github.com/epbuild/epbuild/builder/check"
)

// result returns the result with that id, failing the test when it is absent.
func result(t *testing.T, rs []CheckResult, id string) CheckResult {
	t.Helper()
	r, ok := check.Find(rs, id)
	if !ok {
		var ids []string
		for _, r := range rs {
			ids = append(ids, r.ID)
		}
		t.Fatalf("no result %s among %s", id, strings.Join(ids, ", "))
	}
	return r
}
