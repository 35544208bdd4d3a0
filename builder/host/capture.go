package host

import (
	"context"
	"fmt"
	"io"

	"github.com/epbuild/epbuild/builder/host/sysroot"
)

// Capture runs the checks for cfg, reads the facts the rules ask for, and samples the NIC
// counters against sys, recording what they read, and writes exactly that to w as a
// capture (sysroot.Root.WriteCapture). sysroot.Open reads the archive as a sysroot (so
// does a directory it was extracted into with tar --zstd -xf or sysroot.Extract).
func Capture(ctx context.Context, sys sysroot.Root, cfg Config, w io.Writer) error {
	rec := sysroot.New(sys.Dir()).WithRunner(sys.Runner()) // a fresh record, the same programs
	Run(ctx, rec, cfg)
	if cfg.Validate() == nil {
		n := NewNode(rec, cfg)
		n.Facts(ctx) // what the rules ask of the node
		// and what the NVL72 checks read when their recipe is given only later: the
		// IMEX channel's major, which the fix of a missing channel names
		n.imexMajor()
	}
	if _, _, err := readCounters(rec); err != nil {
		return fmt.Errorf("capture host state: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("capture host state: %w", err)
	}
	return rec.WriteCapture(w)
}
