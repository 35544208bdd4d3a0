package oci

import (
	"fmt"
	"net/http"
	"path/filepath"
	"time"

	"github.com/charmbracelet/log"

	"github.com/epbuild/epbuild/builder/sign"
	"oras.land/oras-go/v2/registry/remote"
	"oras.land/oras-go/v2/registry/remote/auth"
	"oras.land/oras-go/v2/registry/remote/credentials"
)

// Options configure a Client.
type Options struct {
	// PlainHTTP speaks HTTP instead of HTTPS. Only a loopback registry is accepted with
	// it (*PlainHTTPError otherwise): credentials and content would cross the network
	// unencrypted.
	PlainHTTP bool
	// DockerConfig is the Docker config file whose auths, credsStore and credHelpers
	// give the credentials, as oras and docker read them; "" means $DOCKER_CONFIG/
	// config.json, else ~/.docker/config.json. A missing file means no credentials.
	DockerConfig string
	// Credential, when set, replaces the Docker config (tests, or a caller with its own
	// secret store).
	Credential auth.CredentialFunc
	// UserAgent is sent with every request ("epbuild/<version>").
	UserAgent string
	// HTTPClient is the transport; nil means a retrying client (oras-go's: it retries
	// 5xx and 429, not a refused connection nor a timeout, so a registry that is down or
	// silent fails fast) that keeps the deadlines below.
	HTTPClient *http.Client
	// Deadlines bound every exchange with the registry; zero fields take the defaults.
	Deadlines Deadlines
	// Trust is the keys whose signatures pull accepts (builder/sign): an artifact that
	// none of them signed is refused (*SignatureError), unless AllowUnsigned, which
	// takes it with a warning.
	Trust         *sign.Keyring
	AllowUnsigned bool
	Log           *log.Logger
}

// Deadlines bound the time a registry may take. A registry that never answers, or
// trickles, fails with a *TimeoutError instead of hanging a pull or a build.
type Deadlines struct {
	// Response bounds the wait for a response's headers, and the whole of a small
	// exchange (resolving a tag, reading an OCI manifest, listing tags, signatures).
	Response time.Duration
	// Window and MinBytes set the slowest transfer accepted: a body of which fewer than
	// MinBytes arrive within any Window (counted in consecutive windows) is cut off.
	Window   time.Duration
	MinBytes int64
}

// Default deadlines: generous for a slow link, finite for a registry that stalls.
const (
	DefaultResponseTimeout = 60 * time.Second
	DefaultStallWindow     = 30 * time.Second
	DefaultStallBytes      = 64 << 10
)

// withDefaults fills the zero fields.
func (d Deadlines) withDefaults() Deadlines {
	if d.Response <= 0 {
		d.Response = DefaultResponseTimeout
	}
	if d.Window <= 0 {
		d.Window = DefaultStallWindow
	}
	if d.MinBytes <= 0 {
		d.MinBytes = DefaultStallBytes
	}
	return d
}

// Client pushes, pulls and looks up epbuild artifacts in OCI registries.
type Client struct {
	opts Options
	auth *auth.Client
}

// PlainHTTPError is --plain-http for a registry that is not on this machine: exit 2.
type PlainHTTPError struct{ Registry string }

func (e *PlainHTTPError) Error() string {
	return fmt.Sprintf("--plain-http for %s: plain HTTP is only allowed for a registry on this machine (localhost, 127.0.0.0/8, ::1); "+
		"credentials and artifacts would cross the network unencrypted: give the registry TLS", e.Registry)
}
func (e *PlainHTTPError) ExitCode() int { return exitBadInput }

// New returns a Client. The Docker config is read once here; a malformed one is an error.
func New(opts Options) (*Client, error) {
	cred := opts.Credential
	if cred == nil {
		var (
			store *credentials.DynamicStore
			err   error
		)
		if opts.DockerConfig != "" {
			store, err = credentials.NewStore(opts.DockerConfig, credentials.StoreOptions{})
		} else {
			store, err = credentials.NewStoreFromDocker(credentials.StoreOptions{})
		}
		if err != nil {
			where := opts.DockerConfig
			if where == "" {
				where = "the Docker config"
			}
			return nil, &ConfigError{Path: where, Err: err}
		}
		cred = credentials.Credential(store)
	}
	opts.Deadlines = opts.Deadlines.withDefaults()
	hc := opts.HTTPClient
	if hc == nil {
		hc = newHTTPClient(opts.Deadlines)
	}
	ua := opts.UserAgent
	if ua == "" {
		ua = "epbuild"
	}
	return &Client{opts: opts, auth: &auth.Client{
		Client:     hc,
		Header:     http.Header{"User-Agent": {ua}},
		Cache:      auth.NewCache(),
		Credential: cred,
	}}, nil
}

// ConfigError is a Docker config that cannot be read: bad input, exit 2.
type ConfigError struct {
	Path string
	Err  error
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("read credentials from %s: %v; fix or move the file (DOCKER_CONFIG picks another directory)", e.Path, e.Err)
}
func (e *ConfigError) Unwrap() error { return e.Err }
func (e *ConfigError) ExitCode() int { return exitBadInput }

// DockerConfigPath is where docker and oras look for config.json, given an environment.
func DockerConfigPath(getenv func(string) string) string {
	if d := getenv("DOCKER_CONFIG"); d != "" {
		return filepath.Join(d, "config.json")
	}
	if h := getenv("HOME"); h != "" {
		return filepath.Join(h, ".docker", "config.json")
	}
	return ""
}

// repository opens ref's repository, refusing plain HTTP to a remote host.
func (c *Client) repository(ref Ref) (*remote.Repository, error) {
	if c.opts.PlainHTTP && !ref.Loopback() {
		return nil, &PlainHTTPError{Registry: ref.Registry}
	}
	repo, err := remote.NewRepository(ref.Registry + "/" + ref.Repository)
	if err != nil {
		return nil, &RefError{Ref: ref.String(), Err: err}
	}
	repo.PlainHTTP = c.opts.PlainHTTP
	repo.Client = c.auth
	return repo, nil
}

func (c *Client) logf(msg string, kv ...any) {
	if c.opts.Log != nil {
		c.opts.Log.Info(msg, kv...)
	}
}

func (c *Client) debugf(msg string, kv ...any) {
	if c.opts.Log != nil {
		c.opts.Log.Debug(msg, kv...)
	}
}
