package oci

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"

	"oras.land/oras-go/v2/errdef"
	"oras.land/oras-go/v2/registry/remote/auth"
	"oras.land/oras-go/v2/registry/remote/errcode"
)

// Exit codes, as the README's table has them.
const (
	exitBadInput = 2
	exitEnv      = 3
)

// RefError is a reference that cannot be used: bad input, exit 2.
type RefError struct {
	Ref string
	Err error
}

func (e *RefError) Error() string { return fmt.Sprintf("reference %q: %v", e.Ref, e.Err) }
func (e *RefError) Unwrap() error { return e.Err }
func (e *RefError) ExitCode() int { return exitBadInput }

// UnreachableError is a registry that could not be spoken to at all (down, wrong
// address, no route, TLS refused): the environment lacks it, exit 3.
type UnreachableError struct {
	Registry string
	Err      error
	Hint     string
}

func (e *UnreachableError) Error() string {
	return fmt.Sprintf("registry %s is not reachable: %v; %s", e.Registry, e.Err, e.Hint)
}
func (e *UnreachableError) Unwrap() error { return e.Err }
func (e *UnreachableError) ExitCode() int { return exitEnv }

// AuthError is a registry that refused the credentials (or their absence): exit 3.
type AuthError struct {
	Registry string
	Op       string
	Err      error
}

func (e *AuthError) Error() string {
	return fmt.Sprintf("%s: registry %s refused access: %v; log in with `oras login %s` or `docker login %s` "+
		"(epbuild reads the same Docker config and credential helpers; DOCKER_CONFIG picks another config directory)",
		e.Op, e.Registry, e.Err, e.Registry, e.Registry)
}
func (e *AuthError) Unwrap() error { return e.Err }
func (e *AuthError) ExitCode() int { return exitEnv }

// NotFoundError is a reference the registry does not have: bad input, exit 2. Lookup
// reports it as found == false instead.
type NotFoundError struct {
	Ref Ref
	Err error
}

func (e *NotFoundError) Error() string {
	return fmt.Sprintf("%s: not in the registry (%v); push tags each artifact with its full plan key; pull takes it, its first 12 hex digits "+
		"(the artifact's name, <recipe>-<12 hex>.tar.zst, carries them) or 16 (epbuild show RECIPE prints them); "+
		"list the tags with `oras repo tags %s/%s`", e.Ref, e.Err, e.Ref.Registry, e.Ref.Repository)
}
func (e *NotFoundError) Unwrap() error { return e.Err }
func (e *NotFoundError) ExitCode() int { return exitBadInput }

// ContentError is content the registry served that fails a check (a digest that does not
// match, a manifest that is not an epbuild artifact, a layer that contradicts another):
// nothing was written; exit 2, as install's for a damaged artifact.
type ContentError struct {
	Ref  Ref
	What string // the layer or file
	Err  error
}

func (e *ContentError) Error() string {
	return fmt.Sprintf("pull %s: %s: %v; nothing was written", e.Ref, e.What, e.Err)
}
func (e *ContentError) Unwrap() error { return e.Err }
func (e *ContentError) ExitCode() int { return exitBadInput }

// classify turns a transport or registry error into one of the errors above where it is
// one, naming the registry; anything else is returned wrapped with op.
func classify(ref Ref, op string, err error) error {
	if err == nil {
		return nil
	}
	var (
		resp  *errcode.ErrorResponse
		opErr *net.OpError
		dns   *net.DNSError
		cert  *tls.CertificateVerificationError
		unk   x509.UnknownAuthorityError
		host  x509.HostnameError
		rec   tls.RecordHeaderError
		stall *StallError
		ne    net.Error
	)
	switch {
	case errors.As(err, &stall), errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return &TimeoutError{Registry: ref.Registry, Op: op, Err: err}
	case errors.As(err, &resp) && (resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden),
		errors.Is(err, auth.ErrBasicCredentialNotFound):
		return &AuthError{Registry: ref.Registry, Op: op, Err: err}
	case errors.As(err, &resp) && resp.StatusCode == http.StatusNotFound, errors.Is(err, errdef.ErrNotFound):
		return &NotFoundError{Ref: ref, Err: err}
	case strings.Contains(err.Error(), "server gave HTTP response to HTTPS client"), errors.As(err, &rec):
		return &UnreachableError{Registry: ref.Registry, Err: err,
			Hint: "it speaks plain HTTP: use --plain-http (only for a registry on this machine), or give it TLS"}
	case errors.As(err, &cert), errors.As(err, &unk), errors.As(err, &host):
		return &UnreachableError{Registry: ref.Registry, Err: err,
			Hint: "its TLS certificate is not trusted here: add its CA to the system trust store (SSL_CERT_FILE / SSL_CERT_DIR)"}
	case errors.As(err, &dns):
		return &UnreachableError{Registry: ref.Registry, Err: err, Hint: "check the registry's host name"}
	case errors.As(err, &opErr):
		return &UnreachableError{Registry: ref.Registry, Err: err,
			Hint: "check that it runs and the address and port are right, and the network path (proxy, firewall)"}
	}
	return fmt.Errorf("%s: %w", op, err)
}
