package oci

import (
	"fmt"
	"net"
	"strings"

	"oras.land/oras-go/v2/registry"
)

// Scheme prefixes every reference epbuild takes: oci://REGISTRY/REPO[:TAG|@DIGEST].
const Scheme = "oci://"

// Ref is a parsed oci://REGISTRY/REPO[:TAG|@DIGEST] reference. Reference is the tag or
// digest, "" when none was given.
type Ref struct {
	Registry   string // host[:port]
	Repository string
	Reference  string
}

// ParseRef parses oci://REGISTRY/REPO[:TAG|@DIGEST]. A bad reference is a *RefError (exit 2).
func ParseRef(s string) (Ref, error) {
	rest, ok := strings.CutPrefix(s, Scheme)
	if !ok {
		return Ref{}, &RefError{Ref: s, Err: fmt.Errorf("want %sREGISTRY/REPO[:TAG], e.g. %sghcr.io/acme/deepep", Scheme, Scheme)}
	}
	if !strings.Contains(rest, "/") {
		return Ref{}, &RefError{Ref: s, Err: fmt.Errorf("no repository: want %sREGISTRY/REPO[:TAG]", Scheme)}
	}
	r, err := registry.ParseReference(rest)
	if err != nil {
		return Ref{}, &RefError{Ref: s, Err: err}
	}
	return Ref{Registry: r.Registry, Repository: r.Repository, Reference: r.Reference}, nil
}

// String gives the reference back with its scheme.
func (r Ref) String() string { return Scheme + r.bare() }

// bare is the reference without the scheme, as oras and docker write it.
func (r Ref) bare() string {
	s := r.Registry + "/" + r.Repository
	switch {
	case r.Reference == "":
	case strings.Contains(r.Reference, ":"):
		s += "@" + r.Reference
	default:
		s += ":" + r.Reference
	}
	return s
}

// WithTag is r with tag as its reference.
func (r Ref) WithTag(tag string) Ref {
	r.Reference = tag
	return r
}

// isDigest reports whether the reference is a digest rather than a tag.
func (r Ref) isDigest() bool { return strings.Contains(r.Reference, ":") }

// Loopback reports whether the registry is on this machine: localhost, 127.0.0.0/8 or ::1.
// Only such a registry may be spoken to over plain HTTP.
func (r Ref) Loopback() bool {
	host := r.Registry
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// validTag reports whether s can be an OCI tag: [A-Za-z0-9_][A-Za-z0-9._-]{0,127}.
func validTag(s string) bool {
	return (registry.Reference{Registry: "x", Repository: "x", Reference: s}).ValidateReferenceAsTag() == nil
}
