package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/epbuild/epbuild/builder/disk"
	"github.com/epbuild/epbuild/builder/pack"
)

func newSBOMCmd(app *App) *cobra.Command {
	var (
		out string
		cr  pack.SBOMCredits
	)
	cmd := &cobra.Command{
		Use:   "sbom ARTIFACT|PREFIX [-o FILE] [--supplier NAME] [--author NAME]...",
		Short: "Print the CycloneDX 1.6 SBOM of an artifact or an install, with every pin and patch",
		Long: `Print the CycloneDX 1.6 software bill of materials (JSON) of an artifact
(<recipe>-<plan>.tar.zst: its manifest, its sha256 checked against ARTIFACT.sha256 when
there is one) or of an install (PREFIX: its manifest, and the artifact its receipt names).
It is read from what the build recorded, nothing is derived again: epbuild recipe writes
the same bytes beside the artifact as ARTIFACT.cdx.json, which epbuild push stores.

The BOM holds each component with its pin (a purl: pkg:github/OWNER/REPO@COMMIT, a
generic purl with the VCS URL and commit or the download URL and sha256, pkg:pypi for a
package of the Python environment), each patched component's pedigree (the upstream
ancestor with the upstream's purl, the pinned commit, one patch entry per patch:
cherry-pick for a diff of its own repository, else unofficial, with the diff's text for a
patch file of a shipped set (up to 1 MiB), its URL and the pull request it resolves where
known) and each patch's sha256 (property epbuild:patch:SET/NAME:sha256); a patched
component's purl has the qualifier epbuild.patches=<12 hex> (the sha256 of its patches'
sha256s, in order). Then the artifact's files and wheels with their sha256, the
dependencies between components, and the toolchain as the formulation; metadata names the
epbuild that built it and the one that wrote the BOM, and, when given, the supplier
(--supplier) and authors (--author); none by default. See docs/python-lmod-sbom.md.

Exit codes: 0 done; 2 not an artifact or install (or a damaged one).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			b, err := pack.SBOM(cmd.Context(), args[0], version, cr)
			if err != nil {
				return err
			}
			if out == "" || out == "-" {
				_, err = app.Out.Write(b)
				return err
			}
			if err := disk.WriteOutput(out, b); err != nil {
				return err
			}
			fmt.Fprintf(app.Err, "wrote %s\n", out)
			return nil
		},
	}
	cmd.Flags().StringVarP(&out, "output", "o", "", "write the SBOM to FILE (atomically) instead of stdout")
	cmd.Flags().StringVar(&cr.Supplier, "supplier", "", "the organisation that supplies the artifact (metadata.supplier; default: none)")
	cmd.Flags().StringArrayVar(&cr.Authors, "author", nil, "a person or team that made the artifact (metadata.authors; repeatable; default: none)")
	return cmd
}
