package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/epbuild/epbuild/builder/sign"
)

func newKeyCmd(app *App) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "key",
		Short: "Make the ed25519 keys that sign artifacts pushed to a registry",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "new FILE",
		Short: "Write a new ed25519 key pair: FILE (private, mode 0600) and FILE.pub",
		Long: `Write a new ed25519 key pair: the private key to FILE (PKCS #8 PEM, mode 0600) and the
public key to FILE.pub (PKIX PEM). Sign with push --sign-key FILE or recipe --cache-to ...
--sign-key FILE; the machines that pull trust FILE.pub (pull/recipe --trust-key FILE.pub,
or a copy in $EPBUILD_CACHE/trusted-keys/). An existing file is not replaced. See
docs/signing.md.

Exit codes: 0 done; 2 FILE or FILE.pub exists or cannot be written.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := sign.NewKey(args[0])
			if err != nil {
				return usageError{err}
			}
			fmt.Fprintf(app.Out, "key     %s\nprivate %s\npublic  %s.pub\n", id, args[0], args[0])
			return nil
		},
	})
	return cmd
}
