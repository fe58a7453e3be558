package fsm

import (
	"fmt"

	"github.com/leasehold/leasehold/internal/fsm/fsmpb"
)

// The state quota counts every record of the state by an approximate size:
// its variable-length fields plus recordOverhead bytes for the map entry,
// the struct and the fixed fields. The count is deterministic (it depends
// only on the applied log), so every node refuses the same commands; it is
// not the Go heap, which is larger by a factor that depends on the runtime.
//
//	session                    recordOverhead + len(lease_id) + len(owner)
//	lock (held, queued or      recordOverhead + len(name)
//	      in lock-delay)
//	holding or queue entry     recordOverhead + len(name) + len(lease_id)
//	KV entry                   recordOverhead + len(key) + len(value)
//	KV tombstone               recordOverhead + len(key)
//	node                       recordOverhead + len(id) + len(api_addr)
const recordOverhead = 64

// DefaultMaxStateBytes is the default Limits.MaxStateBytes: 256 MiB.
const DefaultMaxStateBytes = 256 << 20

func sessionBytes(s *fsmpb.Session) int64 {
	return recordOverhead + int64(len(s.GetLeaseId())+len(s.GetOwner())+8*len(s.GetWithdrawnWaitIds()))
}

func lockBytes(name string) int64 { return recordOverhead + int64(len(name)) }

func entryBytes(name, leaseID string) int64 {
	return recordOverhead + int64(len(name)+len(leaseID))
}

func kvBytes(e *fsmpb.KV) int64 {
	if e == nil {
		return 0
	}
	return recordOverhead + int64(len(e.GetKey())+len(e.GetValue()))
}

func nodeBytes(id, addr string) int64 { return recordOverhead + int64(len(id)+len(addr)) }

// QuotaError is the refusal of a command that would grow the state past
// Limits.MaxStateBytes. Reads, releases, closes and deletes still work.
type QuotaError struct {
	Quota int64 // Limits.MaxStateBytes
	Used  int64 // the state's accounted size
	Need  int64 // the growth the command asked for
}

func (e *QuotaError) Error() string {
	return fmt.Sprintf("fsm: state quota of %s reached: delete KV keys or raise --quota-bytes (%d bytes in use, this command needs %d more)",
		FormatBytes(e.Quota), e.Used, e.Need)
}

// Unwrap makes errors.Is(err, ErrQuota) true.
func (e *QuotaError) Unwrap() error { return ErrQuota }

// FormatBytes writes n in the largest binary unit that divides it (256 MiB,
// 64 KiB, 1000 bytes).
func FormatBytes(n int64) string {
	switch {
	case n != 0 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n != 0 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n != 0 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

// reserve refuses a growth of need bytes that would pass the quota. A
// command that does not grow the state (need <= 0) is never refused, so a
// full state can always be shrunk.
func (m *Machine) reserve(need int64) error {
	if need <= 0 || m.limits.MaxStateBytes <= 0 || m.bytes+need <= m.limits.MaxStateBytes {
		return nil
	}
	return &QuotaError{Quota: m.limits.MaxStateBytes, Used: m.bytes, Need: need}
}

// CheckKVPut reports, without applying anything, whether a KVPut of value
// under key would pass the state quota now: the API edge refuses a write
// that cannot fit before proposing it. Apply checks again.
func (m *Machine) CheckKVPut(key string, value []byte) error {
	need := kvBytes(&fsmpb.KV{Key: key, Value: value}) - kvBytes(m.kv[key])
	return m.reserve(need)
}

// Bytes returns the state's accounted size (see the table above).
func (m *Machine) Bytes() int64 { return m.bytes }

// Limits returns the limits the Machine enforces.
func (m *Machine) Limits() Limits { return m.limits }

// recount computes the accounted size from scratch (Restore, and the tests
// that pin the running count).
func (m *Machine) recount() int64 {
	var n int64
	for _, s := range m.sessions {
		n += sessionBytes(s.pb)
		for name := range s.locks {
			n += entryBytes(name, s.pb.GetLeaseId())
		}
	}
	for name, l := range m.locks {
		n += lockBytes(name)
		for _, h := range l.holders {
			n += int64(len(h.GetValue()))
		}
		for _, w := range l.waiters {
			n += int64(len(w.GetValue()))
		}
	}
	for _, e := range m.kv {
		n += kvBytes(e)
	}
	for id, addr := range m.nodes {
		n += nodeBytes(id, addr)
	}
	return n
}
