// Package sysroot is the root a node is read under: the real one, a directory, or a
// capture archive. Every read of /sys, /proc and /dev and every program run (nvidia-smi,
// scontrol) by builder/host goes through a Root, which resolves symlinks inside it (an
// absolute link never escapes a capture), words errors by the host path, and records what
// was read, so that the same reads can be written out as a capture (WriteCapture) and
// replayed from it (Open, Extract).
//
// It owns the reading and recording of host paths and program outputs and the capture's
// archive format. It may not judge what it reads: which files the checks and facts read,
// and what they mean, are builder/host's (host.Capture runs them against a fresh record).
// It runs no program but the one it is asked for, and touches nothing outside the root it
// reads and the directory it extracts into.
package sysroot
