package gateway

import (
	"fmt"
	"strings"

	"github.com/leasehold/leasehold/fence"
	"github.com/leasehold/leasehold/sequencer"
)

// SequencerConfig puts the gateway in verifying mode: every fenced request carries a signed
// sequencer (fence.WithSequencers) that must verify against a pinned key set and name the
// lock configured for the request's key before its token is checked, so a forged token can
// never be recorded.
type SequencerConfig struct {
	// KeySetFile is the pinned key set (JSON, see package sequencer) of the cluster whose
	// sequencers are accepted. Required. Gateway.ReloadKeySet re-reads it (key rotation).
	KeySetFile string
	// Header carries the sequencer's text form (default fence.DefaultSequencerHeader).
	Header string
	// Locks maps a resource key to the lock whose holders may write it.
	Locks map[string]string
	// LockIsKey makes a key that is not in Locks protected by the lock of the same name, and a
	// semaphore's slot key NAME/slot/K by the lock NAME (fence.SlotKeys), for its slot K's
	// grants only. When false, requests for a key not in Locks are refused (403
	// permission-denied).
	LockIsKey bool
}

func (c *SequencerConfig) validate() error {
	if c == nil {
		return nil
	}
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: sequencers: %s", ErrInvalidConfig, fmt.Sprintf(format, a...))
	}
	if c.KeySetFile == "" {
		return bad("key set file is required")
	}
	if c.Header != "" && !validHeaderName(c.Header) {
		return bad("header %q is not a valid header name", c.Header)
	}
	if len(c.Locks) == 0 && !c.LockIsKey {
		return bad("no locks: give key=lock pairs or make the lock the key")
	}
	for k, l := range c.Locks {
		if err := fence.ValidateKey(k); err != nil {
			return bad("lock for key %q: %v", k, err)
		}
		if l == "" || len(l) > sequencer.MaxNameLen {
			return bad("lock name for key %q is %d bytes, want 1..%d", k, len(l), sequencer.MaxNameLen)
		}
	}
	return nil
}

// ParseLocks parses "key=lock" pairs (the --lock flag) into a map. The last '=' separates key
// and lock, so a key may contain '=' but a lock name given this way may not.
func ParseLocks(pairs []string) (map[string]string, error) {
	m := make(map[string]string, len(pairs))
	for _, p := range pairs {
		i := strings.LastIndexByte(p, '=')
		if i <= 0 || i == len(p)-1 {
			return nil, fmt.Errorf("%w: lock %q is not key=lock", ErrInvalidConfig, p)
		}
		if _, dup := m[p[:i]]; dup {
			return nil, fmt.Errorf("%w: lock for key %q given twice", ErrInvalidConfig, p[:i])
		}
		m[p[:i]] = p[i+1:]
	}
	return m, nil
}

// sequencerOptions loads the key set and returns the middleware options of verifying mode,
// and the verifier (nil when verifying mode is off).
func sequencerOptions(c *SequencerConfig) ([]fence.HTTPOption, *sequencer.Verifier, error) {
	if c == nil {
		return nil, nil, nil
	}
	ks, err := sequencer.ReadKeySetFile(c.KeySetFile)
	if err != nil {
		return nil, nil, fmt.Errorf("gateway: %w", err)
	}
	v, err := sequencer.NewVerifier(ks)
	if err != nil {
		return nil, nil, fmt.Errorf("gateway: %w", err)
	}
	var fallback fence.LockFunc
	if c.LockIsKey {
		fallback = fence.SlotKeys(fence.LockIsKey)
	}
	opts := []fence.HTTPOption{fence.WithSequencers(fence.NewSequencers(v, fence.LockMap(c.Locks, fallback)))}
	if c.Header != "" {
		opts = append(opts, fence.WithSequencerHeader(c.Header))
	}
	return opts, v, nil
}

// ReloadKeySet re-reads Config.Sequencers.KeySetFile and trusts its keys from the next
// request on (key rotation). On error the old keys stay. It is an error when verifying mode
// is off.
func (g *Gateway) ReloadKeySet() error {
	if g.verifier == nil {
		return fmt.Errorf("%w: verifying mode is off", ErrInvalidConfig)
	}
	ks, err := sequencer.ReadKeySetFile(g.cfg.Sequencers.KeySetFile)
	if err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	if err := g.verifier.SetKeySet(ks); err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	g.log.Info("gateway: key set reloaded", "file", g.cfg.Sequencers.KeySetFile, "cluster", ks.ClusterID, "keys", len(ks.Keys))
	return nil
}
