package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/epbuild/epbuild/builder/oci"
)

func newPullCmd(app *App) *cobra.Command {
	var (
		f   ociFlags
		out string
	)
	cmd := &cobra.Command{
		Use:   "pull oci://REGISTRY/REPO:TAG|@DIGEST [-o DIR]",
		Short: "Fetch an artifact from an OCI registry and check it as install does",
		Long: `Fetch the epbuild artifact at TAG (a plan key, as push tags it) or DIGEST into DIR, and
check it before anything appears there: every layer against its digest, install's checks
on the artifact as it downloads (the archive decompressed once, every entry hashed against
the manifest the artifact carries, nothing extracted), the .sha256 against the artifact,
the manifest layer against that manifest, each wheel against the manifest's record and
the annotations against both. Writes <recipe>-<plan>.tar.zst with its .sha256,
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
				return app.printJSON(res)
			}
			fmt.Fprintf(app.Out, "pulled    %s (recipe %s, plan %s)\ndigest    %s\nartifact  %s\nsha256    %s\n",
				res.Ref, res.Recipe, res.PlanKey[:min(12, len(res.PlanKey))], res.Digest, res.Artifact, res.SHA256)
			fmt.Fprintf(app.Out, "install:  epbuild install %s --prefix PREFIX\n", res.Artifact)
			return nil
		},
	}
	f.add(cmd)
	f.addTrust(cmd)
	cmd.Flags().StringVarP(&out, "out", "o", ".", "write the files into this directory")
	return cmd
}
