//go:build !leasehold_testhooks

package main

import (
	"log/slog"

	"github.com/leasehold/leasehold/internal/server"
)

// applyTestHooks does nothing in a normal build; see testhooks.go.
func applyTestHooks(*server.Config, *slog.Logger) error { return nil }
