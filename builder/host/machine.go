package host

import (
	"regexp"
	"slices"
	"strings"

	"github.com/epbuild/epbuild/builder/check"
	"github.com/epbuild/epbuild/builder/quote"
)

// driverMachine reads the machine the NVIDIA kernel module was built for from the first
// line of its version file: "NVRM version: NVIDIA UNIX Open Kernel Module for aarch64
// <version> ..." (the open modules) or "NVRM version: NVIDIA UNIX x86_64 Kernel Module
// <version> ..." (the proprietary ones), as kernel-open/nvidia/nv-procfs.c prints it. It
// is the node's machine, read from a file so that a capture holds it.
var driverMachine = regexp.MustCompile(`^NVRM version: NVIDIA UNIX (?:Open Kernel Module for )?(x86_64|aarch64|ppc64le)\b`)

// nodeMachine is the node's machine by its uname -m name, "" when the driver's version
// file cannot be read or names none.
func (r *Node) nodeMachine() (machine, read string) {
	b, err := r.sys.ReadFile(nvidiaVersionPath)
	if err != nil {
		return "", nvidiaVersionPath + ": " + err.Error()
	}
	first, _, _ := strings.Cut(string(b), "\n")
	if m := driverMachine.FindStringSubmatch(first); m != nil {
		return m[1], "NVIDIA driver for " + m[1] + " (" + nvidiaVersionPath + ")"
	}
	return "", nvidiaVersionPath + ": no machine in " + quote.Term(first)
}

// checkMachine compares the node's machine with the one the install was built on (its
// manifest's toolchain), else the recipe's toolchain.host-arch: nothing is cross-compiled,
// so the wheels and .so files load only on a node of that machine.
func (r *Node) checkMachine() check.Result {
	c := check.Result{ID: "host.machine", Why: "the install's wheels and .so files are the machine code of the host that built them " +
		"(nothing is cross-compiled): a node of another machine cannot load them"}
	want := r.cfg.Machines
	if len(want) == 0 {
		return skip(c, "the build host's machine is not known (no install's manifest, no toolchain.host-arch)")
	}
	got, read := r.nodeMachine()
	if got == "" {
		return skip(c, read)
	}
	read += "; built for " + quote.Term(strings.Join(want, " or "))
	if !slices.Contains(want, got) {
		fix := "build on a " + got + " host and install that"
		if got == "aarch64" {
			fix = "build on an aarch64 host, a Grace node of the GB200/GB300 rack (--set toolchain.host-arch=aarch64), and install that"
		}
		return fail(c, read, fix)
	}
	return pass(c, read)
}
