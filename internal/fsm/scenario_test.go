package fsm

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	leaseholdv1 "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/internal/fsm/fsmpb"
	"github.com/leasehold/leasehold/internal/harness/scenario"
)

// TestScenarios runs testdata/scenarios/*.txt, each on a fresh Machine.
// The commands:
//
//	session a b ...                       create sessions (owner = lease id)
//	acquire SESSION NAME [mode=shared] [permits=N] [delay=MS] [try]
//	release SESSION NAME [token=N]        token defaults to SESSION's holding
//	expire SESSION                        the lessor's Expire
//	close SESSION                         a clean CloseSession
//	end-delay NAME                        the lessor's EndLockDelay for NAME
//
// After each command the step prints the refusal or the events in order,
// then the state of every name the file used:
//
//	NAME: holders [SESSION MODE tTOKEN] ...; queue [SESSION MODE] ...
//
// (a semaphore shows a holder's slot for its mode).
func TestScenarios(t *testing.T) {
	for _, f := range scenario.Files(t, "testdata/scenarios/*.txt") {
		t.Run(f.Name, func(t *testing.T) {
			m := New(DefaultLimits())
			var names []string // in first use
			var index uint64
			f.Run(t, func(t *testing.T, s *scenario.Step) string {
				cmd := scenarioCommand(t, m, s)
				if cmd == nil { // session: several commands
					return "ok"
				}
				if a := cmd.GetAcquire(); a != nil && !slices.Contains(names, a.GetName()) {
					names = append(names, a.GetName())
				}
				index++
				cmd.UnixMs = int64(index) * 1000
				res := m.Apply(index, cmd)
				var out []string
				if res.Err != nil {
					out = append(out, "error: "+res.Err.Error())
				}
				for _, e := range res.Events {
					out = append(out, describeEvent(e))
				}
				for _, d := range res.LockDelays {
					out = append(out, fmt.Sprintf("lock-delay %s after t%d for %dms", d.Name, d.Token, d.Ms))
				}
				for _, n := range names {
					out = append(out, describeLock(m.Lock(n)))
				}
				return strings.Join(out, "\n")
			})
		})
	}
}

// scenarioCommand builds the command of step s; a session step applies its
// CreateSession commands itself and returns nil.
func scenarioCommand(t *testing.T, m *Machine, s *scenario.Step) *fsmpb.Command {
	switch s.Cmd {
	case "session":
		for _, id := range s.Args {
			if res := m.Apply(0, create(id, id)); res.Err != nil {
				t.Fatalf("%s: %v", s.Pos, res.Err)
			}
		}
		return nil
	case "acquire":
		opts := []acqOpt{delay(scenarioInt(t, s, "delay", "0"))}
		switch mode := s.Opt("mode", "exclusive"); mode {
		case "shared":
			opts = append(opts, shared())
		case "exclusive":
		default:
			t.Fatalf("%s: unknown mode %q", s.Pos, mode)
		}
		opts = append(opts, permits(uint32(scenarioInt(t, s, "permits", "0"))))
		if slices.Contains(s.Args, "try") {
			opts = append(opts, try())
		}
		return acquire(s.Arg(t, 1), s.Arg(t, 0), opts...)
	case "release":
		name, lease := s.Arg(t, 1), s.Arg(t, 0)
		var held int64
		for _, h := range m.Lock(name).Holders {
			if h.GetLeaseId() == lease {
				held = int64(h.GetToken())
			}
		}
		return release(name, lease, uint64(scenarioInt(t, s, "token", strconv.FormatInt(held, 10))))
	case "expire":
		return expire(s.Arg(t, 0))
	case "close":
		return closeSession(s.Arg(t, 0))
	case "end-delay":
		return endDelay(s.Arg(t, 0), m.Lock(s.Arg(t, 0)).DelayToken)
	}
	t.Fatalf("%s: unknown command %q", s.Pos, s.Cmd)
	return nil
}

func scenarioInt(t *testing.T, s *scenario.Step, key, def string) int64 {
	n, err := strconv.ParseInt(s.Opt(key, def), 10, 64)
	if err != nil {
		t.Fatalf("%s: %s: %v", s.Pos, key, err)
	}
	return n
}

func describeEvent(e Event) string {
	kind := strings.ToLower(strings.TrimPrefix(e.Type.String(), "EVENT_TYPE_"))
	switch e.Type {
	case leaseholdv1.EventType_EVENT_TYPE_QUEUED, leaseholdv1.EventType_EVENT_TYPE_DEQUEUED:
		return fmt.Sprintf("%s %s %s", kind, e.Name, e.LeaseID)
	case leaseholdv1.EventType_EVENT_TYPE_LOCK_DELAY_ENDED:
		return fmt.Sprintf("%s %s t%d", kind, e.Name, e.Token)
	}
	return fmt.Sprintf("%s %s %s t%d", kind, e.Name, e.LeaseID, e.Token)
}

func describeLock(info LockInfo) string {
	var b strings.Builder
	b.WriteString(info.Name + ":")
	if info.Permits > 1 {
		fmt.Fprintf(&b, " %d permits;", info.Permits)
	}
	if len(info.Holders) == 0 {
		b.WriteString(" free")
	} else {
		b.WriteString(" holders")
	}
	for _, h := range info.Holders {
		kind := modeWord(h.GetMode())
		if info.Permits > 1 {
			kind = fmt.Sprintf("slot %d", h.GetSlot())
		}
		fmt.Fprintf(&b, " [%s %s t%d]", h.GetLeaseId(), kind, h.GetToken())
	}
	if info.Delayed {
		fmt.Fprintf(&b, "; lock-delay after t%d (%dms)", info.DelayToken, info.DelayMs)
	}
	if len(info.Waiters) > 0 {
		b.WriteString("; queue")
	}
	for _, w := range info.Waiters {
		fmt.Fprintf(&b, " [%s %s]", w.GetLeaseId(), modeWord(w.GetMode()))
	}
	return b.String()
}
