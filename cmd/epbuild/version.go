package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// epbuildVersion is the version set at link time, else the module version go install
// recorded, else "dev".
func epbuildVersion() string {
	v := version
	if bi, ok := debug.ReadBuildInfo(); ok && v == "dev" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		v = bi.Main.Version
	}
	return v
}

func newVersionCmd(app *App) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print epbuild's version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if asJSON {
				return app.printJSON(nil, struct {
					Go   string `json:"go"`
					OS   string `json:"os"`
					Arch string `json:"arch"`
				}{runtime.Version(), runtime.GOOS, runtime.GOARCH})
			}
			fmt.Fprintf(app.Out, "epbuild %s (%s, %s/%s)\n", epbuildVersion(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}
