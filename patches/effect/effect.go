// Package effect states and checks what a patch set must have done to a tree: the
// checks run on the patched source tree and again on the installed copy, because a
// patch that reached only the source copy is the failure this tool exists to catch.
package effect

import (
	"fmt"
	"github.com/epbuild/epbuild/recipes/suggest"
	"strings"
)

// Kind names one sort of effect.
type Kind string

// The effect kinds a patch set (or a recipe check) may state.
const (
	// PythonDef: class Class in File defines method Method (a def in code: not in a
	// comment or string). Class may be dotted for a nested class ("Outer.Inner").
	PythonDef Kind = "python-def"
	// PythonCall: method Class.Method in File calls Callee (self.Callee(...),
	// Class.Callee(self, ...) or super().Callee(...)) in code that runs when it runs: not in
	// a comment or string, not in a nested def the method never calls.
	PythonCall Kind = "python-call"
	// Contains: File contains Text (verbatim).
	Contains Kind = "contains"
	// Absent: File does not contain Text; with Files, none of those files does.
	Absent Kind = "absent"
	// Include: the C/C++ File has an #include of Header, matched by whole trailing path
	// components (comments and #if 0 blocks ignored); with Not, none of Files has one.
	Include Kind = "include"
	// EnvRead: File reads the environment variable Name (Python os.environ/os.getenv, C
	// getenv and functions whose name ends in getenv), with a string-literal name.
	EnvRead Kind = "env-read"
	// ELFSymbol: the ELF File defines (exports) the dynamic symbol Symbol.
	ELFSymbol Kind = "elf-symbol"
)

// Effect is one stated effect. Only the fields its Kind uses are set.
type Effect struct {
	Kind Kind `json:"kind" yaml:"kind" jsonschema:"enum=python-def,enum=python-call,enum=contains,enum=absent,enum=include,enum=env-read,enum=elf-symbol"`
	// File is the path in the source tree, relative to its root; it may be a glob. Every
	// file it matches must pass (a stale second copy counts); none matching fails.
	File string `json:"file,omitempty" yaml:"file,omitempty"`
	// Files lists several paths or globs (Absent, Include with Not) checked together.
	Files []string `json:"files,omitempty" yaml:"files,omitempty"`
	// Installed is where File lands in an install prefix, relative to it; a glob such as
	// "lib/python*/site-packages/deep_ep/buffer.py". Empty: the effect is only checked on the tree.
	Installed string `json:"installed,omitempty" yaml:"installed,omitempty"`
	Class     string `json:"class,omitempty" yaml:"class,omitempty"`
	Method    string `json:"method,omitempty" yaml:"method,omitempty"`
	Callee    string `json:"callee,omitempty" yaml:"callee,omitempty"`
	Text      string `json:"text,omitempty" yaml:"text,omitempty"`
	Header    string `json:"header,omitempty" yaml:"header,omitempty"`
	Name      string `json:"name,omitempty" yaml:"name,omitempty"`
	Symbol    string `json:"symbol,omitempty" yaml:"symbol,omitempty"`
	// Not inverts Include: no listed file includes Header.
	Not bool `json:"not,omitempty" yaml:"not,omitempty"`
	// Why is shown when the effect is missing: what goes wrong at run time without it.
	Why string `json:"why,omitempty" yaml:"why,omitempty"`
}

// Kinds lists every effect kind, in the order the documentation gives them.
func Kinds() []Kind {
	return []Kind{PythonDef, PythonCall, Contains, Absent, Include, EnvRead, ELFSymbol}
}

// KindList is the kinds as a message lists them: "python-def, python-call, ...".
func KindList() string {
	s := make([]string, 0, 7)
	for _, k := range Kinds() {
		s = append(s, string(k))
	}
	return strings.Join(s, ", ")
}

// UnknownKind says that k is no effect kind, lists the kinds, and names the closest one
// when k looks like a misspelling of it ("contain" for "contains").
func UnknownKind(k Kind) string {
	msg := fmt.Sprintf("unknown effect kind %q (one of %s)", k, KindList())
	names := make([]string, 0, len(Kinds()))
	for _, c := range Kinds() {
		names = append(names, string(c))
	}
	if best := suggest.Typo(string(k), names); best != "" {
		msg += fmt.Sprintf(": did you mean %q?", best)
	}
	return msg
}
