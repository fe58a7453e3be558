package main

import (
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"github.com/spf13/pflag"

	"github.com/leasehold/leasehold/fence"
	"github.com/leasehold/leasehold/fence/gateway"
	"github.com/leasehold/leasehold/internal/certs"
)

// sequencerFlags are the gateway's flags that refuse forged tokens: verifying mode and the
// token counter.
type sequencerFlags struct {
	keySet       string
	header       string
	locks        []string
	lockIsKey    bool
	tokenCounter string
}

func (s *sequencerFlags) add(f *pflag.FlagSet) {
	f.StringVar(&s.keySet, "keyset", "", "verifying mode: pinned key set file (JSON) of the cluster whose signed sequencers are accepted; SIGHUP re-reads it")
	f.StringVar(&s.header, "sequencer-header", fence.DefaultSequencerHeader, "verifying mode: header carrying the signed sequencer")
	f.StringArrayVar(&s.locks, "lock", nil, "verifying mode: KEY=LOCK, the lock whose sequencers may write KEY (repeatable)")
	f.BoolVar(&s.lockIsKey, "lock-is-key", false, "verifying mode: a key without --lock is protected by the lock of the same name")
	f.StringVar(&s.tokenCounter, "token-counter", "", "leasehold API URL (http[s]://host:port): refuse tokens above the cluster's issued counter (TLS: the global --cacert/--cert/--key)")
}

// apply sets cfg.Sequencers when --keyset is given and cfg.TokenCounter when --token-counter
// is, its TLS from the global flags in tls.
func (s *sequencerFlags) apply(cfg *gateway.Config, tls clientTLSFlags) error {
	if s.tokenCounter != "" {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		if tls != (clientTLSFlags{}) {
			tc, err := certs.ClientConfig(tls.cacert, tls.cert, tls.key)
			if err != nil {
				return usageErr("%v", err)
			}
			tr.TLSClientConfig = tc
		}
		cfg.TokenCounter = &gateway.TokenCounterConfig{Endpoint: s.tokenCounter, Transport: tr}
	}
	if s.keySet == "" {
		if len(s.locks) > 0 || s.lockIsKey {
			return usageErr("--lock and --lock-is-key need --keyset")
		}
		return nil
	}
	locks, err := gateway.ParseLocks(s.locks)
	if err != nil {
		return usageErr("--lock: %v", err)
	}
	cfg.Sequencers = &gateway.SequencerConfig{KeySetFile: s.keySet, Header: s.header, Locks: locks, LockIsKey: s.lockIsKey}
	return nil
}

// reloadOnHUP re-reads the key set on SIGHUP while the gateway runs, in verifying mode; the
// returned function stops it and waits.
func (s *sequencerFlags) reloadOnHUP(g *gateway.Gateway, log *slog.Logger) (stop func()) {
	if s.keySet == "" {
		return func() {}
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			case <-hup:
				if err := g.ReloadKeySet(); err != nil {
					log.Error("gateway: key set not reloaded; the old keys stay", "err", err)
				}
			}
		}
	})
	return func() {
		signal.Stop(hup)
		close(done)
		wg.Wait()
	}
}
