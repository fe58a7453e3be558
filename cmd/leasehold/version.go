package main

import (
	"github.com/spf13/cobra"

	"github.com/leasehold/leasehold/internal/buildinfo"
)

func newVersionCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version, commit and Go version of this binary",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			info := buildinfo.Get()
			emit(cmd, g, info, info.String())
			return nil
		},
	}
}
