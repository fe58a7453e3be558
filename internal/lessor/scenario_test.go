package lessor

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold/internal/clock"
	"github.com/leasehold/leasehold/internal/fsm"
	"github.com/leasehold/leasehold/internal/fsm/fsmpb"
	"github.com/leasehold/leasehold/internal/harness/scenario"
)

// TestScenarios runs testdata/*.txt: a leader's lessor on a manual clock
// (Tick 10ms) whose proposals apply to a real fsm.Machine, as the log
// would. The commands:
//
//	config [grace=D] [checkpoint=D] [drift=F]   before the first promote
//	promote                   a new leader: the previous lessor (if any) is
//	                          closed, a new one promoted with the log's sessions
//	create ID ttl=D           a CreateSession through the log
//	at D                      move the clock to D after the start, tick by tick
//	renew ID                  a keepalive (RenewMany, leadership confirmed)
//
// Each step prints what the lessor proposed during it, with the time, then
// every session of the log: the leader's deadline (when it may expire the
// session, as a time after the start) and the checkpoint the log holds.
func TestScenarios(t *testing.T) {
	for _, f := range scenario.Files(t, "testdata/*.txt") {
		t.Run(f.Name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				sc := &lessorScenario{cfg: DefaultConfig()}
				sc.clk = clock.NewManual(epoch)
				sc.cfg.Clock, sc.cfg.Logger, sc.cfg.Confirmer, sc.cfg.Tick = sc.clk, discard, confirmed, 10*time.Millisecond
				sc.p = &logProposer{clk: sc.clk, m: fsm.New(fsm.DefaultLimits()), expired: map[string]time.Time{}}
				defer func() {
					if sc.l != nil {
						sc.l.Close()
					}
				}()
				f.Run(t, sc.step)
			})
		})
	}
}

type lessorScenario struct {
	cfg     Config
	clk     *clock.Manual
	p       *logProposer
	l       *Lessor // the leader's; nil before the first promote
	printed int     // proposals already printed
}

func (sc *lessorScenario) since() time.Duration { return sc.clk.Now().Sub(epoch) }

func (sc *lessorScenario) step(t *testing.T, s *scenario.Step) string {
	var out []string
	switch s.Cmd {
	case "config":
		for key, v := range s.Opts {
			var err error
			switch key {
			case "grace":
				sc.cfg.Grace, err = time.ParseDuration(v)
			case "checkpoint":
				sc.cfg.CheckpointInterval, err = time.ParseDuration(v)
			case "drift":
				_, err = fmt.Sscan(v, &sc.cfg.Drift)
			default:
				t.Fatalf("%s: unknown setting %q", s.Pos, key)
			}
			if err != nil {
				t.Fatalf("%s: %s: %v", s.Pos, key, err)
			}
		}
	case "promote":
		if sc.l != nil {
			sc.l.Close()
		}
		l, err := New(sc.cfg, sc.p)
		if err != nil {
			t.Fatalf("%s: %v", s.Pos, err)
		}
		sc.p.mu.Lock()
		sc.p.observe = l.Observe
		sc.p.mu.Unlock()
		l.Promote(sc.p.state())
		sc.l = l
	case "create":
		ttl := scenarioDuration(t, s, s.Opt("ttl", "10s"))
		cmd := &fsmpb.Command{UnixMs: sc.clk.Now().UnixMilli(), Op: &fsmpb.Command_CreateSession{CreateSession: &fsmpb.CreateSession{LeaseId: s.Arg(t, 0), TtlMs: ttl.Milliseconds()}}}
		if res, _ := sc.p.Propose(context.Background(), cmd); res.Err != nil {
			t.Fatalf("%s: %v", s.Pos, res.Err)
		}
		sc.printed = len(sc.p.proposed) // the step's own command
	case "at":
		at := scenarioDuration(t, s, s.Arg(t, 0))
		if at < sc.since() {
			t.Fatalf("%s: the clock is at %v already", s.Pos, sc.since())
		}
		synctest.Wait()
		for sc.since() < at {
			sc.clk.Advance(min(sc.cfg.Tick, at-sc.since()))
			synctest.Wait()
		}
	case "renew":
		var r [1]Renewal
		sc.l.RenewMany(context.Background(), []string{s.Arg(t, 0)}, r[:])
		if r[0].Err != nil {
			out = append(out, fmt.Sprintf("renew %s: %v", s.Arg(t, 0), r[0].Err))
		}
	default:
		t.Fatalf("%s: unknown command %q", s.Pos, s.Cmd)
	}
	return strings.Join(append(append(sc.proposals(), out...), sc.deadlines()...), "\n")
}

func scenarioDuration(t *testing.T, s *scenario.Step, v string) time.Duration {
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("%s: %v", s.Pos, err)
	}
	return d
}

// proposals describes the commands proposed since the last step.
func (sc *lessorScenario) proposals() []string {
	sc.p.mu.Lock()
	defer sc.p.mu.Unlock()
	var out []string
	for _, cmd := range sc.p.proposed[sc.printed:] {
		at := time.Duration(cmd.GetUnixMs()-epoch.UnixMilli()) * time.Millisecond
		switch op := cmd.GetOp().(type) {
		case *fsmpb.Command_Checkpoint:
			for _, cp := range op.Checkpoint.GetSessions() {
				if cp.GetCleared() {
					out = append(out, fmt.Sprintf("%v: clear the checkpoint of %s (generation %d)", at, cp.GetLeaseId(), cp.GetGeneration()))
				} else {
					out = append(out, fmt.Sprintf("%v: checkpoint %s with %v left (generation %d)", at, cp.GetLeaseId(), time.Duration(cp.GetRemainingMs())*time.Millisecond, cp.GetGeneration()))
				}
			}
		case *fsmpb.Command_Expire:
			out = append(out, fmt.Sprintf("%v: expire %s", at, op.Expire.GetLeaseId()))
		default:
			out = append(out, fmt.Sprintf("%v: %v", at, cmd))
		}
	}
	sc.printed = len(sc.p.proposed)
	return out
}

// deadlines describes every session of the log.
func (sc *lessorScenario) deadlines() []string {
	sessions, _ := sc.p.state()
	slices.SortFunc(sessions, func(a, b *fsmpb.Session) int { return strings.Compare(a.GetLeaseId(), b.GetLeaseId()) })
	out := make([]string, 0, len(sessions))
	for _, s := range sessions {
		line := s.GetLeaseId() + ": no deadline"
		if sc.l != nil {
			if rem, ok := sc.l.Remaining(s.GetLeaseId()); ok {
				line = fmt.Sprintf("%s: deadline %v", s.GetLeaseId(), sc.since()+rem)
			}
		}
		if s.GetCheckpointed() {
			line += fmt.Sprintf("; log: checkpoint %v left (generation %d)", time.Duration(s.GetCheckpointRemainingMs())*time.Millisecond, s.GetCheckpointGeneration())
		}
		out = append(out, line)
	}
	if len(out) == 0 {
		out = append(out, "no sessions")
	}
	return out
}
