package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/epbuild/epbuild/builder/oci"
	"github.com/epbuild/epbuild/builder/sign"
)

// ociFlags are the registry flags push and pull share.
type ociFlags struct {
	registryFlags
	asJSON bool
}

func (f *ociFlags) add(cmd *cobra.Command) {
	f.registryFlags.add(cmd, "speak HTTP, not HTTPS: only for a registry on this machine (localhost, 127.0.0.0/8, ::1)")
	cmd.Flags().BoolVar(&f.asJSON, "json", false, "print the result as JSON")
}

// registryFlags are every command's flags for speaking to a registry (push, pull,
// recipe --cache-from/--cache-to).
type registryFlags struct {
	plainHTTP     bool
	timeout       time.Duration
	stall         time.Duration
	trustKeys     []string
	allowUnsigned bool
	signKey       string
}

// addTrust adds the flags of a command that takes artifacts from a registry.
func (f *registryFlags) addTrust(cmd *cobra.Command) {
	cmd.Flags().StringArrayVar(&f.trustKeys, "trust-key", nil, "accept artifacts signed by this public key (`FILE`.pub as `epbuild key new` writes it, or a directory of them); "+
		"repeatable; the cache's trusted-keys/ directory ($EPBUILD_CACHE/trusted-keys/*.pub) is always trusted")
	cmd.Flags().BoolVar(&f.allowUnsigned, "allow-unsigned", false, "take an artifact that no trusted key signed, with a warning")
}

// addSign adds the flag of a command that pushes artifacts.
func (f *registryFlags) addSign(cmd *cobra.Command, what string) {
	cmd.Flags().StringVar(&f.signKey, "sign-key", "", "sign "+what+" with this ed25519 private key (`FILE`, from `epbuild key new FILE`); the signature is pushed as an OCI referrer of the artifact")
}

// trust is the keyring of --trust-key and the cache's trusted-keys directory; nil when
// there is no key.
func (f *registryFlags) trust(app *App) (*sign.Keyring, error) {
	paths := slices.Clone(f.trustKeys)
	if dir, err := app.cacheDir(); err == nil {
		if st, err := os.Stat(filepath.Join(dir, "trusted-keys")); err == nil && st.IsDir() {
			paths = append(paths, filepath.Join(dir, "trusted-keys"))
		}
	}
	if len(paths) == 0 {
		return nil, nil
	}
	k, err := sign.LoadKeyring(paths...)
	if err != nil {
		return nil, usageError{err}
	}
	return k, nil
}

// signer is --sign-key's key; nil without the flag.
func (f *registryFlags) signer() (*sign.Signer, error) {
	if f.signKey == "" {
		return nil, nil
	}
	s, err := sign.LoadSigner(f.signKey)
	if err != nil {
		return nil, usageError{err}
	}
	return s, nil
}

func (f *registryFlags) add(cmd *cobra.Command, plainHelp string) {
	cmd.Flags().BoolVar(&f.plainHTTP, "plain-http", false, plainHelp)
	cmd.Flags().DurationVar(&f.timeout, "registry-timeout", 0, fmt.Sprintf("wait at most `D` for a registry's answer and for an OCI manifest, tag or list (default %s, or EPBUILD_REGISTRY_TIMEOUT)", oci.DefaultResponseTimeout))
	cmd.Flags().DurationVar(&f.stall, "registry-stall", 0, fmt.Sprintf("cut off a transfer that brings fewer than %d KiB within `D` (default %s, or EPBUILD_REGISTRY_STALL)", oci.DefaultStallBytes>>10, oci.DefaultStallWindow))
}

// deadlines are the flags', else the environment's, else the defaults.
func (f *registryFlags) deadlines(app *App) (oci.Deadlines, error) {
	d := oci.Deadlines{Response: f.timeout, Window: f.stall}
	for _, v := range []struct {
		env string
		to  *time.Duration
	}{{"EPBUILD_REGISTRY_TIMEOUT", &d.Response}, {"EPBUILD_REGISTRY_STALL", &d.Window}} {
		s := app.Getenv(v.env)
		if *v.to != 0 || s == "" {
			continue
		}
		n, err := time.ParseDuration(s)
		if err != nil || n <= 0 {
			return d, usageError{fmt.Errorf("%s=%q: give a positive duration such as 90s or 5m, or unset it", v.env, s)}
		}
		*v.to = n
	}
	if d.Response < 0 || d.Window < 0 {
		return d, usageError{fmt.Errorf("--registry-timeout and --registry-stall take a positive duration")}
	}
	return d, nil
}

// client builds the registry client: credentials from $DOCKER_CONFIG/config.json, else
// ~/.docker/config.json, with their credential helpers, as docker and oras read them.
func (f *registryFlags) client(app *App) (*oci.Client, error) {
	d, err := f.deadlines(app)
	if err != nil {
		return nil, err
	}
	trust, err := f.trust(app)
	if err != nil {
		return nil, err
	}
	return oci.New(oci.Options{
		PlainHTTP: f.plainHTTP, DockerConfig: oci.DockerConfigPath(app.Getenv),
		UserAgent: "epbuild/" + version, Log: app.Log, Deadlines: d,
		Trust: trust, AllowUnsigned: f.allowUnsigned,
	})
}

const ociExitCodes = `Every exchange with the registry has a deadline: --registry-timeout for an answer (and
for a whole OCI manifest), --registry-stall for a transfer that stops moving; every read
is bounded by the size the OCI manifest declares.

Exit codes: 0 done; 2 bad input (a reference, --plain-http for a remote registry, a
damaged artifact, a tag the registry does not have, content that fails a check); 3 the
registry cannot be reached, does not answer in time or refuses the credentials (the
registry is named).`

func newPushCmd(app *App) *cobra.Command {
	var f ociFlags
	cmd := &cobra.Command{
		Use:   "push ARTIFACT oci://REGISTRY/REPO[:TAG]",
		Short: "Store an artifact, its manifest, SBOM, .sha256 and wheels in an OCI registry, tagged by plan key",
		Long: `Store ARTIFACT (<recipe>-<plan>.tar.zst) in an OCI registry as one OCI artifact (artifact
type ` + oci.ArtifactType + `): the artifact, its manifest.json, its CycloneDX SBOM
(ARTIFACT.cdx.json, when it lies beside it), its .sha256 and the wheels its manifest lists
(<recipe>-<plan>.wheels/, when beside it, each checked against the manifest), each a layer
titled with its file name. Annotations carry the recipe, the plan key, the pins and the epbuild that built
it. The SBOM is also pushed as an OCI referrer of the artifact (artifact type
application/vnd.cyclonedx+json), where oras discover finds it. --sign-key FILE signs the
artifact: a DSSE ed25519 envelope over its OCI manifest digest and sha256, pushed as a
referrer (docs/signing.md); pull and --cache-from take only artifacts a trusted key signed. It is tagged with the plan key (and with TAG when given): the key a build cache looks
up. The artifact gets install's checks while it uploads; the tag is set only when both
succeeded. The OCI manifest is reproducible: its created time is SOURCE_DATE_EPOCH, else
the artifact's own epoch.

Credentials come from the Docker config ($DOCKER_CONFIG/config.json, else
~/.docker/config.json) and its credential helpers, as docker and oras read them: log in
with ` + "`oras login`" + ` or ` + "`docker login`" + `.

` + ociExitCodes,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ref, err := oci.ParseRef(args[1])
			if err != nil {
				return err
			}
			var opts oci.PushOptions
			if s := app.Getenv("SOURCE_DATE_EPOCH"); s != "" {
				n, err := strconv.ParseInt(s, 10, 64)
				if err != nil || n < 0 {
					return usageError{fmt.Errorf("SOURCE_DATE_EPOCH=%q: give whole seconds since 1970, or unset it to use the artifact's own epoch", s)}
				}
				opts.SourceDateEpoch = &n
			}
			if opts.Signer, err = f.signer(); err != nil {
				return err
			}
			c, err := f.client(app)
			if err != nil {
				return err
			}
			res, err := c.Push(cmd.Context(), args[0], ref, opts)
			if err != nil {
				return err
			}
			if f.asJSON {
				return app.printJSON(nil, res)
			}
			fmt.Fprintf(app.Out, "pushed  %s\ndigest  %s\ntags    %v\n", res.Ref, res.Digest, res.Tags)
			if res.SignedBy != "" {
				fmt.Fprintf(app.Out, "signed  key %s (signature %s)\n", res.SignedBy, res.Signature)
			}
			for _, l := range res.Layers {
				state := "uploaded"
				if l.Existed {
					state = "already there"
				}
				fmt.Fprintf(app.Out, "layer   %s (%s, %s)\n", l.Title, humanBytes(l.Size), state)
			}
			return nil
		},
	}
	f.add(cmd)
	f.addSign(cmd, "the artifact")
	return cmd
}
