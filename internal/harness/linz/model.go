package linz

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/anishathalye/porcupine"
)

// Operation kinds of the lock-table history.
const (
	OpAcquire = "acquire"
	OpRelease = "release"
	OpStatus  = "status"
	OpPut     = "put"
	// OpWithdraw is a client giving up an acquire whose answer it did not
	// get (Input.Attempt names it; 0: an attempt no later operation
	// names): it cancels that wait and releases its grant if it was made.
	// Its session never asks for a name it may already hold, so the
	// withdrawal releases the session's holding of the name, if any, and
	// the attempt can take effect no more.
	OpWithdraw = "withdraw"
)

// Outcomes a client saw.
const (
	OutOK       = "ok"
	OutUnknown  = "unknown"     // may or may not have been applied
	OutLocked   = "locked"      // TryAcquire: held by another session
	OutNoHolder = "not-holder"  // release refused
	OutExpired  = "lease-gone"  // the session no longer exists
	OutStale    = "stale-token" // fenced put refused
)

// Input is one call on the lock table (name partitions the history).
type Input struct {
	Op    string
	Name  string
	Lease string
	Token uint64 // release and put: the holding's token
	// Attempt names an acquire a client withdrew (OpWithdraw with the same
	// Attempt); 0 for one it did not.
	Attempt uint64
}

// Output is what the call returned.
type Output struct {
	Out   string
	Token uint64 // acquire: the grant; status: the holder's token
	Lease string // status: the holder ("" when free)
}

// lockState is a state of the expiring-mutex model. Sessions may expire at
// any moment the model needs them to (an expiry is invisible to clients),
// but an expired session never acts again: Dead lists them.
type lockState struct {
	Holder string
	Token  uint64 // 0: granted, but its token is not yet observed
	MaxTok uint64 // newest token observed for this name
	Dead   string // sorted, comma-separated leases known to have expired
	Barred string // comma-separated attempts withdrawn: they take effect no more
}

func (s lockState) dead(lease string) bool {
	return slices.Contains(strings.Split(s.Dead, ","), lease)
}

func (s lockState) kill(lease string) lockState {
	d := strings.Split(s.Dead, ",")
	if s.Dead == "" {
		d = nil
	}
	if !slices.Contains(d, lease) {
		d = append(d, lease)
		slices.Sort(d)
	}
	s.Dead = strings.Join(d, ",")
	if s.Holder == lease {
		s.Holder, s.Token = "", 0
	}
	return s
}

func (s lockState) barred(attempt uint64) bool {
	return attempt != 0 && slices.Contains(strings.Split(s.Barred, ","), strconv.FormatUint(attempt, 10))
}

// expireHolder is s after its holder expired, or nothing when it is free.
func (s lockState) expireHolder() []any {
	if s.Holder == "" {
		return nil
	}
	return []any{s.kill(s.Holder)}
}

// stepLock is the model of a mutex whose holder may expire on its own,
// with tokens that only grow (P1, P2 per name, P3).
func stepLock(st, in, out any) []any {
	s, i, o := st.(lockState), in.(Input), out.(Output)
	switch i.Op {
	case OpAcquire:
		switch o.Out {
		case OutUnknown:
			next := []any{s}
			if s.dead(i.Lease) || s.barred(i.Attempt) {
				return next
			}
			switch s.Holder {
			case i.Lease:
			case "":
				next = append(next, lockState{Holder: i.Lease, MaxTok: s.MaxTok, Dead: s.Dead, Barred: s.Barred})
			default:
				k := s.kill(s.Holder)
				next = append(next, lockState{Holder: i.Lease, MaxTok: k.MaxTok, Dead: k.Dead, Barred: k.Barred})
			}
			return next
		case OutOK:
			if s.dead(i.Lease) {
				return nil
			}
			if s.Holder == i.Lease {
				if s.Token != 0 && s.Token != o.Token {
					return nil
				}
				if s.Token == 0 && o.Token <= s.MaxTok {
					return nil
				}
				s.Token, s.MaxTok = o.Token, max(s.MaxTok, o.Token)
				return []any{s}
			}
			if o.Token <= s.MaxTok {
				return nil
			}
			if s.Holder != "" {
				s = s.kill(s.Holder)
			}
			s.Holder, s.Token, s.MaxTok = i.Lease, o.Token, o.Token
			return []any{s}
		case OutLocked:
			if s.Holder != "" && s.Holder != i.Lease {
				return []any{s}
			}
			return nil
		case OutExpired:
			return []any{s.kill(i.Lease)}
		}
	case OpRelease:
		mine := s.Holder == i.Lease && (s.Token == i.Token || s.Token == 0 && i.Token > s.MaxTok)
		switch o.Out {
		case OutUnknown:
			if mine {
				return []any{s, lockState{MaxTok: max(s.MaxTok, i.Token), Dead: s.Dead, Barred: s.Barred}}
			}
			return []any{s}
		case OutOK:
			if !mine || s.dead(i.Lease) {
				return nil
			}
			return []any{lockState{MaxTok: max(s.MaxTok, i.Token), Dead: s.Dead, Barred: s.Barred}}
		case OutNoHolder, OutExpired:
			if mine {
				return []any{s.kill(i.Lease)} // only if it expired first
			}
			return []any{s}
		}
	case OpWithdraw:
		done := s
		if i.Attempt != 0 {
			done.Barred = strings.TrimPrefix(s.Barred+","+strconv.FormatUint(i.Attempt, 10), ",")
		}
		if s.Holder == i.Lease {
			done.Holder, done.Token = "", 0
		}
		switch o.Out {
		case OutOK:
			return []any{done}
		case OutUnknown:
			return []any{s, done}
		}
	case OpStatus:
		switch {
		case o.Out != OutOK:
			return []any{s}
		case o.Lease == "":
			if s.Holder == "" {
				return []any{s}
			}
			return s.expireHolder()
		case o.Lease == s.Holder && (s.Token == o.Token || s.Token == 0 && o.Token > s.MaxTok):
			s.Token, s.MaxTok = o.Token, max(s.MaxTok, o.Token)
			return []any{s}
		}
		return nil
	}
	panic(fmt.Sprintf("linz: no model for %+v → %+v", i, o))
}

// LockModel checks the lock table per name.
var LockModel = porcupine.NondeterministicModel{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		by := map[string][]porcupine.Operation{}
		var names []string
		for _, op := range h {
			n := op.Input.(Input).Name
			if _, ok := by[n]; !ok {
				names = append(names, n)
			}
			by[n] = append(by[n], op)
		}
		slices.Sort(names)
		out := make([][]porcupine.Operation, 0, len(names))
		for _, n := range names {
			out = append(out, by[n])
		}
		return out
	},
	Init:  func() []any { return []any{lockState{}} },
	Step:  stepLock,
	Equal: func(a, b any) bool { return a.(lockState) == b.(lockState) },
	DescribeOperation: func(in, out any) string {
		i, o := in.(Input), out.(Output)
		switch i.Op {
		case OpAcquire:
			if i.Attempt != 0 {
				return fmt.Sprintf("acquire(%s) by %s, attempt %d → %s %d", i.Name, i.Lease, i.Attempt, o.Out, o.Token)
			}
			return fmt.Sprintf("acquire(%s) by %s → %s %d", i.Name, i.Lease, o.Out, o.Token)
		case OpStatus:
			return fmt.Sprintf("status(%s) → %s %s %d", i.Name, o.Out, o.Lease, o.Token)
		case OpWithdraw:
			return fmt.Sprintf("withdraw(%s) by %s of attempt %d → %s", i.Name, i.Lease, i.Attempt, o.Out)
		}
		return fmt.Sprintf("%s(%s, %s, %d) → %s", i.Op, i.Name, i.Lease, i.Token, o.Out)
	},
	DescribeState: func(st any) string {
		s := st.(lockState)
		return fmt.Sprintf("holder=%s token=%d max=%d dead=[%s] withdrawn=[%s]", s.Holder, s.Token, s.MaxTok, s.Dead, s.Barred)
	},
}

// registerState is the fenced register: the last accepted token of a key.
type registerState struct{ Last uint64 }

// stepRegister is the fenced-register model of the built-in KV: a put with
// token t is accepted iff t ≥ last (P4 at the grantor's KV).
func stepRegister(st, in, out any) []any {
	s, i, o := st.(registerState), in.(Input), out.(Output)
	switch o.Out {
	case OutUnknown:
		if i.Token >= s.Last {
			return []any{s, registerState{Last: i.Token}}
		}
		return []any{s}
	case OutOK:
		if i.Token >= s.Last {
			return []any{registerState{Last: i.Token}}
		}
	case OutStale:
		if i.Token < s.Last {
			return []any{s}
		}
	}
	return nil
}

var RegisterModel = porcupine.NondeterministicModel{
	Partition: LockModel.Partition,
	Init:      func() []any { return []any{registerState{}} },
	Step:      stepRegister,
	Equal:     func(a, b any) bool { return a.(registerState) == b.(registerState) },
	DescribeOperation: func(in, out any) string {
		i, o := in.(Input), out.(Output)
		return fmt.Sprintf("put(%s, token %d) → %s", i.Name, i.Token, o.Out)
	},
	DescribeState: func(st any) string { return fmt.Sprintf("last=%d", st.(registerState).Last) },
}
