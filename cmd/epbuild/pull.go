package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/epbuild/epbuild/builder/oci"
	"github.com/epbuild/epbuild/builder/quote"
)

func newPullCmd(app *App) *cobra.Command {
	var (
		f   ociFlags
		out string
	)
	cmd := &cobra.Command{
		Use:   "pull oci://REGISTRY/REPO:TAG|@DIGEST [-o DIR] [--trust-key FILE.pub]... [--allow-unsigned]",
		Short: "Fetch an artifact from an OCI registry and check it as install does",
		Long: `Fetch the epbuild artifact at TAG or DIGEST into DIR. TAG is the plan key (push tags each
artifact with it), its first 12 hex digits (which the artifact's name carries), its first
16 (which epbuild show prints), or the artifact's file name, <recipe>-<12 hex>.tar.zst: a
prefix is looked up among the repository's tags, and two plan keys that share it are an
error listing both.

Only an artifact signed by a trusted key is taken (--trust-key FILE.pub, repeatable, and
the .pub files in $EPBUILD_CACHE/trusted-keys/; push --sign-key signs), unless
--allow-unsigned; the signature is checked before any byte of the artifact is fetched
(docs/signing.md).

It checks the artifact before anything appears there: every layer against its digest
and the size the OCI manifest declares, install's checks
on the artifact as it downloads (the archive decompressed once, every entry hashed against
the manifest the artifact carries, nothing extracted), the .sha256 against the artifact,
the manifest layer against that manifest, each wheel against the manifest's record and
the annotations against both. The file names come from the artifact's own manifest
(recipe and plan key), never from the registry's layer titles, which must agree; all is
downloaded into DIR/.epbuild-pull-* and moved into place when every check passed (a
failed pull leaves nothing; one that was killed is cleaned by the next). Writes
<recipe>-<plan>.tar.zst with its .sha256,
.manifest.json and (when pushed) .cdx.json and <recipe>-<plan>.wheels/; then:
epbuild install DIR/<recipe>-<plan>.tar.zst --prefix PREFIX.

` + ociExitCodes,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ref, err := oci.ParseRef(args[0])
			if err != nil {
				return err
			}
			c, err := f.client(app)
			if err != nil {
				return err
			}
			res, err := c.Pull(cmd.Context(), ref, out)
			if err != nil {
				return err
			}
			if f.asJSON {
				return app.printJSON(nil, res)
			}
			fmt.Fprintf(app.Out, "pulled    %s (recipe %s, plan %s)\ndigest    %s\nartifact  %s\nsha256    %s\n",
				res.Ref, res.Recipe, res.PlanKey[:min(12, len(res.PlanKey))], res.Digest, res.Artifact, res.SHA256)
			signed := "unsigned (--allow-unsigned)"
			if res.SignedBy != "" {
				signed = "key " + res.SignedBy
			}
			fmt.Fprintf(app.Out, "signed    %s\n", signed)
			fmt.Fprintf(app.Out, "install:  epbuild install %s --prefix PREFIX\n", quote.Shell(res.Artifact))
			return nil
		},
	}
	f.add(cmd)
	f.addTrust(cmd)
	cmd.Flags().StringVarP(&out, "out", "o", ".", "write the files into this directory")
	return cmd
}
