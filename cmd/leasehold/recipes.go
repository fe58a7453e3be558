package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/client"
)

// modeFlags are the lock-mode flags of acquire and run.
type modeFlags struct {
	permits uint32
	shared  bool
}

func (m *modeFlags) register(cmd *cobra.Command) {
	cmd.Flags().Uint32Var(&m.permits, "permits", 0, "hold one of N permits of a semaphore (every holder and waiter of NAME must give the same N; at most 1000)")
	cmd.Flags().BoolVar(&m.shared, "shared", false, "take a shared (read) lock: shared holders hold NAME together, an exclusive one alone")
}

// options returns the client options of the flags, or a usage error.
func (m *modeFlags) options() ([]client.AcquireOption, error) {
	var opts []client.AcquireOption
	if m.shared && m.permits > 1 {
		return nil, usageErr("--shared and --permits %d exclude each other: a read lock has one permit", m.permits)
	}
	if m.shared {
		opts = append(opts, client.Shared())
	}
	if m.permits > 0 {
		opts = append(opts, client.WithPermits(m.permits))
	}
	return opts, nil
}

// holdersView is the JSON form of every holder of a lock.
func holdersView(info *client.LockInfo) []holderJSON {
	out := []holderJSON{}
	for _, h := range info.GetHolders() {
		v := holderJSON{Owner: h.GetOwner(), LeaseID: h.GetLeaseId(), Token: h.GetToken(), RemainingMs: h.GetRemainingMs(), AcquiredMs: h.GetAcquiredUnixMs(),
			LockDelayMs: h.GetLockDelayMs(), Slot: h.GetSlot(), Value: string(h.GetValue())}
		if h.GetMode() == pb.LockMode_LOCK_MODE_SHARED {
			v.Mode = "shared"
		}
		out = append(out, v)
	}
	return out
}

// text is one holder on one line.
func (h holderJSON) text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%q  lease %s  token %d", h.Owner, h.LeaseID, h.Token)
	rem := "unknown"
	if h.RemainingMs >= 0 {
		rem = (time.Duration(h.RemainingMs) * time.Millisecond).String()
	}
	b.WriteString("  remaining " + rem)
	if h.Mode != "" {
		b.WriteString("  " + h.Mode)
	}
	if h.Value != "" {
		fmt.Fprintf(&b, "  value %q", h.Value)
	}
	return b.String()
}

// holdersText is the permits and one line per holder of a lock with
// several (after its first line).
func holdersText(v lockJSON) string {
	var b strings.Builder
	if v.Permits > 1 {
		fmt.Fprintf(&b, "%d of %d permits", len(v.Holders), v.Permits)
	} else {
		fmt.Fprintf(&b, "%d shared holders", len(v.Holders))
	}
	for _, h := range v.Holders {
		fmt.Fprintf(&b, "\n  slot %d  %s", h.Slot, h.text())
	}
	return b.String()
}
