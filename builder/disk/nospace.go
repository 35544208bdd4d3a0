package disk

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
)

// NoSpaceError is a write that failed because a file system was full: no space, no
// inodes, or the user's quota. The environment lacks something: exit 3. What was being
// written is removed, never left half-written where a later run would take it.
type NoSpaceError struct {
	Op   string // what was being done: "install demo-0123.tar.zst into /opt/demo", "build libdemo"
	Path string // a directory on the full file system
	Need int64  // bytes needed there; 0 when unknown
	// NeedAtLeast: Need is a lower bound (a build step needs more than was free when it
	// started), not the exact need.
	NeedAtLeast bool
	Free        int64 // bytes free there when it was seen; -1 when unknown
	Fix         string
	Err         error
}

func (e *NoSpaceError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: no space left on the file system of %s", e.Op, e.Path)
	var facts []string
	if e.Free >= 0 {
		facts = append(facts, ByteCount(e.Free)+" free")
	}
	switch {
	case e.Need > 0 && e.NeedAtLeast:
		facts = append(facts, "it needs more than the "+ByteCount(e.Need)+" that were free when it started")
	case e.Need > 0:
		facts = append(facts, ByteCount(e.Need)+" needed")
	}
	if len(facts) > 0 {
		fmt.Fprintf(&b, " (%s)", strings.Join(facts, "; "))
	}
	if e.Err != nil {
		fmt.Fprintf(&b, ": %v", e.Err)
	}
	if e.Fix != "" {
		b.WriteString("; " + e.Fix)
	}
	return b.String()
}

func (e *NoSpaceError) Unwrap() error { return e.Err }

// ExitCode: the environment lacks something.
func (e *NoSpaceError) ExitCode() int { return 3 }

// isNoSpace reports whether err is a full file system (ENOSPC, or EDQUOT: a quota is
// the user's share of the disk).
func IsNoSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// noSpaceText is how tools that run as child processes say it (strerror).
func NoSpaceText(s string) bool {
	return strings.Contains(s, "No space left on device") || strings.Contains(s, "Disk quota exceeded")
}

// noSpaceOr turns err into a NoSpaceError when it is one, else returns it unchanged.
func NoSpaceOr(err error, op, dir string, need int64, fix string) error {
	if err == nil || !IsNoSpace(err) {
		return err
	}
	var ns *NoSpaceError
	if errors.As(err, &ns) {
		return err
	}
	free, _, ok := DiskFree(dir)
	if !ok {
		free = -1
	}
	return &NoSpaceError{Op: op, Path: dir, Need: need, Free: free, Fix: fix, Err: err}
}

// nearlyFull is the free space under which a failed write is taken for a full file
// system even when the failing tool did not say so: a compiler that could not write an
// object removes it (freeing what it had written), and cmake reports a file it could
// not write as a missing target.
const nearlyFull = 16 << 20

// fullDisk reports whether dir's file system is (nearly) out of space or inodes, with
// the bytes free.
func FullDisk(dir string) (int64, bool) {
	free, files, ok := DiskFree(dir)
	if !ok {
		return -1, false
	}
	return free, free < nearlyFull || (files >= 0 && files < 64)
}

// Place is a directory a job writes into, and how to make room there.
type Place struct{ Dir, Fix string }

// noSpaceIn turns err into a NoSpaceError naming the first of places whose file system
// is (nearly) full, when err says no space (its errno, or a child's strerror) or, for
// a job that is not refused as bad input, when one of them is full: go-git and child
// processes do not always pass the errno on. Otherwise err is returned unchanged.
func NoSpaceIn(err error, op string, places ...Place) error {
	var ns *NoSpaceError
	if err == nil || errors.As(err, &ns) || len(places) == 0 {
		return err
	}
	said := IsNoSpace(err) || NoSpaceText(err.Error())
	var coded interface{ ExitCode() int }
	if !said && errors.As(err, &coded) && coded.ExitCode() == 2 {
		return err
	}
	for _, p := range places {
		if p.Dir == "" {
			continue
		}
		if free, full := FullDisk(ExistingDir(p.Dir)); full {
			return &NoSpaceError{Op: op, Path: p.Dir, Free: free, Fix: p.Fix, Err: err}
		}
	}
	if said {
		p := places[0]
		free, _, ok := DiskFree(ExistingDir(p.Dir))
		if !ok {
			free = -1
		}
		return &NoSpaceError{Op: op, Path: p.Dir, Free: free, Fix: p.Fix, Err: err}
	}
	return err
}

// WriteOutput writes b to path atomically (WriteFileAtomic) for a command's -o FILE: a
// full file system is a NoSpaceError naming path's directory (exit 3), and nothing is
// left there.
func WriteOutput(path string, b []byte) error {
	err := WriteFileAtomic(path, b)
	return NoSpaceOr(err, "write "+path, filepath.Dir(path), int64(len(b)), "free space there, or write it elsewhere with -o FILE")
}

// FixOutSpace is the fix for an output directory (artifact, mirror) that ran out of space.
const FixOutSpace = "free space there or choose a directory on a larger file system, then rerun (what is fetched stays in the cache)"
