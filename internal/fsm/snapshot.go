package fsm

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"

	"google.golang.org/protobuf/proto"

	"github.com/leasehold/leasehold/internal/fsm/fsmpb"
)

// A snapshot is a stream of records, so that neither writing nor reading
// one holds a second copy of the whole state in memory:
//
//	"LHSNAP1\n"
//	uvarint(len) SnapshotRecord{header}      token counter and grant clock
//	uvarint(len) SnapshotRecord{session}...  by lease id
//	uvarint(len) SnapshotRecord{lock}...     by name
//	uvarint(len) SnapshotRecord{kv}...       by key, tombstones included
//	uvarint(len) SnapshotRecord{node}...     by id
//	uvarint(len) SnapshotRecord{auth}        only when auth was set up (auth.go)
//	uvarint(len) SnapshotRecord{end}         the number of records before it
//
// A record is at most MaxRecordBytes long. A record whose encoding is
// longer than PartBytes (the auth state at its limits, a shared lock with
// thousands of holders carrying values) is written as consecutive part
// records of at most PartBytes each, the last one marked, which the reader
// joins before decoding; every other record is written whole, as before
// parts existed. Restore also reads the format before streams (one
// fsmpb.Snapshot message), which never starts with the magic: its first
// byte is a field tag, and 'L' is not a valid one.

// MaxRecordBytes bounds one record of a snapshot stream as read.
const MaxRecordBytes = 16 << 20

// PartBytes is the longest record written whole; a longer one is cut into
// parts of at most this many bytes of its encoding.
const PartBytes = 4 << 20

var streamMagic = []byte("LHSNAP1\n")

// View is a consistent view of the state, captured by Capture under the
// caller's lock and written by WriteTo without it. It shares the state's
// records, which Apply never modifies in place (it replaces them), so a
// capture costs a pointer per record, not an encoding of the state.
type View struct {
	header   *fsmpb.SnapshotHeader
	sessions []*fsmpb.Session
	locks    []*fsmpb.Lock
	kv       []*fsmpb.KV
	nodes    []*fsmpb.Node
	auth     *fsmpb.AuthState // nil when auth was never set up
}

// Capture returns a view of the current state; the caller holds the lock
// that serializes Apply for the duration of Capture only.
func (m *Machine) Capture() *View {
	v := &View{
		header:   &fsmpb.SnapshotHeader{Token: m.token, LastGrantUnixMs: m.lastGrantMs, RateSecond: m.rateSecond, RateCount: m.rateCount, PeakRate: m.peakRate},
		sessions: make([]*fsmpb.Session, 0, len(m.sessions)),
		locks:    make([]*fsmpb.Lock, 0, len(m.locks)),
		kv:       make([]*fsmpb.KV, 0, len(m.kv)),
		nodes:    make([]*fsmpb.Node, 0, len(m.nodes)),
		auth:     m.authRecord(),
	}
	for _, s := range m.sessions {
		v.sessions = append(v.sessions, s.pb)
	}
	for _, l := range m.locks {
		// The queue slice is edited in place (slices.Delete): copy it.
		pl := &fsmpb.Lock{Name: l.name, Waiters: slices.Clone(l.waiters), DelayToken: l.delayToken, DelayMs: l.delayMs}
		if l.permits > 1 {
			pl.Permits = l.permits
		}
		if len(l.holders) == 1 && l.holders[0].GetMode() == fsmpb.Mode_MODE_EXCLUSIVE && l.permits == 1 {
			pl.Holder = l.holders[0] // the format of a lock before modes
		} else {
			pl.Holders = slices.Clone(l.holders)
		}
		v.locks = append(v.locks, pl)
	}
	for _, e := range m.kv {
		v.kv = append(v.kv, e)
	}
	for id, addr := range m.nodes {
		v.nodes = append(v.nodes, &fsmpb.Node{Id: id, ApiAddr: addr})
	}
	return v
}

// GrantClock returns the grant clock of the captured state.
func (v *View) GrantClock() GrantClock {
	return GrantClock{Token: v.header.GetToken(), LastGrantUnixMs: v.header.GetLastGrantUnixMs(), PeakRate: v.header.GetPeakRate()}
}

// WriteTo writes the view as a snapshot stream. The encoding is
// deterministic: equal states give equal bytes.
func (v *View) WriteTo(w io.Writer) (int64, error) {
	sort.Slice(v.sessions, func(i, j int) bool { return v.sessions[i].LeaseId < v.sessions[j].LeaseId })
	sort.Slice(v.locks, func(i, j int) bool { return v.locks[i].Name < v.locks[j].Name })
	sort.Slice(v.kv, func(i, j int) bool { return v.kv[i].Key < v.kv[j].Key })
	sort.Slice(v.nodes, func(i, j int) bool { return v.nodes[i].Id < v.nodes[j].Id })
	return v.write(w)
}

// write writes the view's records in the order they are in.
func (v *View) write(w io.Writer) (int64, error) { return v.writeWith(&streamWriter{w: w}) }

func (v *View) writeWith(sw *streamWriter) (int64, error) {
	sw.write(streamMagic)
	sw.record(&fsmpb.SnapshotRecord{Rec: &fsmpb.SnapshotRecord_Header{Header: v.header}})
	for _, s := range v.sessions {
		sw.record(&fsmpb.SnapshotRecord{Rec: &fsmpb.SnapshotRecord_Session{Session: s}})
	}
	for _, l := range v.locks {
		sw.record(&fsmpb.SnapshotRecord{Rec: &fsmpb.SnapshotRecord_Lock{Lock: l}})
	}
	for _, e := range v.kv {
		sw.record(&fsmpb.SnapshotRecord{Rec: &fsmpb.SnapshotRecord_Kv{Kv: e}})
	}
	for _, n := range v.nodes {
		sw.record(&fsmpb.SnapshotRecord{Rec: &fsmpb.SnapshotRecord_Node{Node: n}})
	}
	if v.auth != nil {
		sw.record(&fsmpb.SnapshotRecord{Rec: &fsmpb.SnapshotRecord_Auth{Auth: v.auth}})
	}
	sw.record(&fsmpb.SnapshotRecord{Rec: &fsmpb.SnapshotRecord_End{End: &fsmpb.SnapshotEnd{Records: sw.records}}})
	return sw.n, sw.err
}

type streamWriter struct {
	w       io.Writer
	n       int64
	records uint64
	part    int    // the longest record written whole; 0 is PartBytes
	buf     []byte // the length prefix
	rec     []byte // the record, reused
	frame   []byte // a part record, reused
	err     error
}

func (sw *streamWriter) write(p []byte) {
	if sw.err != nil {
		return
	}
	n, err := sw.w.Write(p)
	sw.n += int64(n)
	sw.err = err
}

func (sw *streamWriter) record(r *fsmpb.SnapshotRecord) {
	if sw.err != nil {
		return
	}
	b, err := proto.MarshalOptions{Deterministic: true}.MarshalAppend(sw.rec[:0], r)
	if err != nil {
		sw.err = fmt.Errorf("fsm: encode snapshot record: %w", err)
		return
	}
	sw.rec = b
	part := cmp.Or(sw.part, PartBytes)
	if len(b) <= part || r.GetHeader() != nil || r.GetEnd() != nil {
		sw.frameOut(b)
		return
	}
	for len(b) > 0 {
		n := min(len(b), part)
		p := &fsmpb.SnapshotRecord{Rec: &fsmpb.SnapshotRecord_Part{Part: &fsmpb.SnapshotPart{Data: b[:n], Last: n == len(b)}}}
		f, err := proto.MarshalOptions{Deterministic: true}.MarshalAppend(sw.frame[:0], p)
		if err != nil {
			sw.err = fmt.Errorf("fsm: encode snapshot record: %w", err)
			return
		}
		sw.frame = f
		sw.frameOut(f)
		b = b[n:]
	}
}

// frameOut writes the encoded record b with its length prefix.
func (sw *streamWriter) frameOut(b []byte) {
	sw.buf = binary.AppendUvarint(sw.buf[:0], uint64(len(b)))
	sw.write(sw.buf)
	sw.write(b)
	sw.records++
}

// PeekHeader returns the grant clock in the header of the snapshot stream
// br without consuming anything from br.
func PeekHeader(br *bufio.Reader) (GrantClock, error) {
	head, _ := br.Peek(len(streamMagic) + binary.MaxVarintLen64)
	if !bytes.HasPrefix(head, streamMagic) {
		return GrantClock{}, errors.New("fsm: decode snapshot: not a snapshot stream")
	}
	n, k := binary.Uvarint(head[len(streamMagic):])
	if k <= 0 || n > 1<<10 {
		return GrantClock{}, errors.New("fsm: decode snapshot: bad header record")
	}
	b, err := br.Peek(len(streamMagic) + k + int(n))
	if err != nil {
		return GrantClock{}, fmt.Errorf("fsm: decode snapshot: header: %w", err)
	}
	rec := &fsmpb.SnapshotRecord{}
	if err := proto.Unmarshal(b[len(streamMagic)+k:], rec); err != nil || rec.GetHeader() == nil {
		return GrantClock{}, errors.New("fsm: decode snapshot: the first record is not the header")
	}
	h := rec.GetHeader()
	return GrantClock{Token: h.GetToken(), LastGrantUnixMs: h.GetLastGrantUnixMs(), PeakRate: h.GetPeakRate()}, nil
}

// SnapshotBody returns the part of the snapshot stream snap after its
// header record: two states that differ only in their token counter and
// grant clock (a restart floor) have equal bodies.
func SnapshotBody(snap []byte) ([]byte, error) {
	if !bytes.HasPrefix(snap, streamMagic) {
		return nil, errors.New("fsm: decode snapshot: not a snapshot stream")
	}
	n, k := binary.Uvarint(snap[len(streamMagic):])
	if k <= 0 || uint64(len(snap)-len(streamMagic)-k) < n {
		return nil, errors.New("fsm: decode snapshot: bad header record")
	}
	return snap[len(streamMagic)+k+int(n):], nil
}

// Snapshot encodes the whole state, token counter included, as one
// snapshot stream in memory (tests and small states; raftnode streams).
func (m *Machine) Snapshot() ([]byte, error) {
	var b bytes.Buffer
	if _, err := m.Capture().WriteTo(&b); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// errTruncated marks a stream that ends before its end record.
var errTruncated = errors.New("truncated: no end record")

// ScanStream decodes the snapshot stream r record by record and calls f
// with each, header first and end record last; the parts of a record cut
// into parts are joined and f gets the whole record once. It refuses a
// record longer than MaxRecordBytes, a stream without a header first or
// without its end record, a wrong record count, bytes after the end, and
// parts that do not end with a last part or that join into anything but
// a session, lock, KV, node or auth record. f may keep the records. r must
// start with the stream magic.
func ScanStream(r io.Reader, f func(*fsmpb.SnapshotRecord) error) error {
	br, ok := r.(io.ByteReader)
	if !ok {
		b := bufio.NewReader(r)
		br, r = b, b
	}
	magic := make([]byte, len(streamMagic))
	if _, err := io.ReadFull(r, magic); err != nil || !bytes.Equal(magic, streamMagic) {
		return errors.New("fsm: decode snapshot: not a snapshot stream")
	}
	var count uint64
	buf := make([]byte, 0, 4096)
	var joined []byte // the parts so far of a record cut into parts
	parts := false    // the record before was a part, not the last
	for {
		n, err := binary.ReadUvarint(br)
		if err != nil {
			return fmt.Errorf("fsm: decode snapshot: record %d: %w", count, errTruncated)
		}
		if n > MaxRecordBytes {
			return fmt.Errorf("fsm: decode snapshot: record %d is %d bytes; the limit is %d", count, n, MaxRecordBytes)
		}
		buf = slices.Grow(buf[:0], int(n))[:n]
		if _, err := io.ReadFull(r, buf); err != nil {
			return fmt.Errorf("fsm: decode snapshot: record %d: %w", count, errTruncated)
		}
		rec := &fsmpb.SnapshotRecord{}
		if err := proto.Unmarshal(buf, rec); err != nil {
			return fmt.Errorf("fsm: decode snapshot: record %d: %w", count, err)
		}
		if p := rec.GetPart(); p != nil {
			if count == 0 {
				return errors.New("fsm: decode snapshot: the first record is not the header")
			}
			count++
			joined, parts = append(joined, p.GetData()...), !p.GetLast()
			if parts {
				continue
			}
			rec = &fsmpb.SnapshotRecord{}
			if err := proto.Unmarshal(joined, rec); err != nil {
				return fmt.Errorf("fsm: decode snapshot: parts ending at record %d: %w", count-1, err)
			}
			joined = joined[:0]
			switch rec.GetRec().(type) {
			case *fsmpb.SnapshotRecord_Session, *fsmpb.SnapshotRecord_Lock, *fsmpb.SnapshotRecord_Kv, *fsmpb.SnapshotRecord_Node, *fsmpb.SnapshotRecord_Auth:
			default:
				return fmt.Errorf("fsm: decode snapshot: parts ending at record %d do not join into a state record", count-1)
			}
			if err := f(rec); err != nil {
				return err
			}
			continue
		}
		if parts {
			return fmt.Errorf("fsm: decode snapshot: record %d follows a part that is not the last", count)
		}
		switch x := rec.GetRec().(type) {
		case nil:
			return fmt.Errorf("fsm: decode snapshot: record %d is empty", count)
		case *fsmpb.SnapshotRecord_Header:
			if count != 0 {
				return fmt.Errorf("fsm: decode snapshot: header at record %d", count)
			}
		case *fsmpb.SnapshotRecord_End:
			if x.End.GetRecords() != count {
				return fmt.Errorf("fsm: decode snapshot: end record counts %d records, the stream has %d", x.End.GetRecords(), count)
			}
			if err := f(rec); err != nil {
				return err
			}
			if _, err := br.ReadByte(); err != io.EOF {
				return errors.New("fsm: decode snapshot: bytes after the end record")
			}
			return nil
		default:
			if count == 0 {
				return errors.New("fsm: decode snapshot: the first record is not the header")
			}
		}
		if err := f(rec); err != nil {
			return err
		}
		count++
	}
}

// Restore replaces the state with a snapshot (a stream, or the format
// before streams). On error the state is unchanged; see ReadSnapshot.
func (m *Machine) Restore(data []byte) error {
	r, err := ReadSnapshot(m.limits, bytes.NewReader(data))
	if err != nil {
		return err
	}
	*m = *r
	return nil
}

// ReadSnapshot builds a Machine from the snapshot r, record by record. It
// refuses a snapshot that no sequence of Applies produces (a session twice,
// or twice in one lock, a lock listed twice, a free lock with waiters, a
// token that is 0, above the counter or used twice, a tombstone with a
// value), since such a state breaks the invariants later, up to a panic in
// Apply.
func ReadSnapshot(limits Limits, r io.Reader) (*Machine, error) {
	br := bufio.NewReader(r)
	b := &builder{m: New(limits), granted: map[uint64]string{}}
	if magic, _ := br.Peek(len(streamMagic)); !bytes.Equal(magic, streamMagic) {
		if err := b.legacy(br); err != nil {
			return nil, err
		}
	} else if err := ScanStream(br, b.record); err != nil {
		return nil, err
	}
	b.m.bytes = b.m.recount()
	b.m.counts = b.m.recensus()
	return b.m, nil
}

// builder checks and adds snapshot records to a fresh Machine.
type builder struct {
	m       *Machine
	granted map[uint64]string // holding and lock-delay token → lock name
}

// legacy reads the format before streams: one fsmpb.Snapshot message.
func (b *builder) legacy(r io.Reader) error {
	data, err := io.ReadAll(r)
	if err != nil {
		return fmt.Errorf("fsm: read snapshot: %w", err)
	}
	var snap fsmpb.Snapshot
	if err := proto.Unmarshal(data, &snap); err != nil {
		return fmt.Errorf("fsm: decode snapshot: %w", err)
	}
	b.m.token = snap.GetToken()
	for _, s := range snap.GetSessions() {
		if err := b.session(s); err != nil {
			return err
		}
	}
	for _, l := range snap.GetLocks() {
		if err := b.lock(l); err != nil {
			return err
		}
	}
	for _, e := range snap.GetKv() {
		if err := b.kv(e); err != nil {
			return err
		}
	}
	for _, n := range snap.GetNodes() {
		b.m.nodes[n.GetId()] = n.GetApiAddr()
	}
	return nil
}

func (b *builder) record(rec *fsmpb.SnapshotRecord) error {
	switch x := rec.GetRec().(type) {
	case *fsmpb.SnapshotRecord_Header:
		h := x.Header
		b.m.token, b.m.lastGrantMs, b.m.rateSecond, b.m.rateCount, b.m.peakRate = h.GetToken(), h.GetLastGrantUnixMs(), h.GetRateSecond(), h.GetRateCount(), h.GetPeakRate()
	case *fsmpb.SnapshotRecord_Session:
		return b.session(x.Session)
	case *fsmpb.SnapshotRecord_Lock:
		return b.lock(x.Lock)
	case *fsmpb.SnapshotRecord_Kv:
		return b.kv(x.Kv)
	case *fsmpb.SnapshotRecord_Node:
		b.m.nodes[x.Node.GetId()] = x.Node.GetApiAddr()
	case *fsmpb.SnapshotRecord_Auth:
		return b.auth(x.Auth)
	}
	return nil
}

func (b *builder) session(s *fsmpb.Session) error {
	if _, dup := b.m.sessions[s.GetLeaseId()]; dup {
		return fmt.Errorf("fsm: decode snapshot: session %q listed twice", s.GetLeaseId())
	}
	b.m.sessions[s.GetLeaseId()] = &session{pb: s, locks: map[string]struct{}{}}
	return nil
}

func (b *builder) claim(token uint64, name string) error {
	if token == 0 || token > b.m.token {
		return fmt.Errorf("fsm: decode snapshot: lock %q has token %d, counter %d", name, token, b.m.token)
	}
	if other, dup := b.granted[token]; dup {
		return fmt.Errorf("fsm: decode snapshot: locks %q and %q have token %d", other, name, token)
	}
	b.granted[token] = name
	return nil
}

func (b *builder) lock(pl *fsmpb.Lock) error {
	l := &lock{name: pl.GetName(), holders: pl.GetHolders(), permits: permitsOf(pl.GetPermits()), waiters: pl.GetWaiters(), delayToken: pl.GetDelayToken(), delayMs: pl.GetDelayMs()}
	if h := pl.GetHolder(); h != nil {
		if len(l.holders) > 0 {
			return fmt.Errorf("fsm: decode snapshot: lock %q has both holder and holders", l.name)
		}
		l.holders = []*fsmpb.Holding{h}
	}
	if _, dup := b.m.locks[l.name]; dup {
		return fmt.Errorf("fsm: decode snapshot: lock %q listed twice", l.name)
	}
	// A free lock passes to its queue in the same Apply, and a free lock
	// without a queue is forgotten (validateModes).
	if err := validateModes(l); err != nil {
		return err
	}
	if l.delayToken != 0 {
		if err := b.claim(l.delayToken, l.name); err != nil {
			return err
		}
	}
	for _, h := range l.holders {
		if err := b.claim(h.GetToken(), l.name); err != nil {
			return err
		}
		if err := b.link(h.GetLeaseId(), l.name); err != nil {
			return err
		}
	}
	for _, w := range l.waiters {
		if err := b.link(w.GetLeaseId(), l.name); err != nil {
			return err
		}
	}
	b.m.locks[l.name] = l
	return nil
}

func (b *builder) link(leaseID, name string) error {
	s, ok := b.m.sessions[leaseID]
	if !ok {
		return fmt.Errorf("fsm: decode snapshot: lock %q refers to unknown session %q", name, leaseID)
	}
	if _, dup := s.locks[name]; dup {
		return fmt.Errorf("fsm: decode snapshot: session %q appears twice in lock %q", leaseID, name)
	}
	s.locks[name] = struct{}{}
	return nil
}

func (b *builder) kv(e *fsmpb.KV) error {
	switch {
	case e.GetToken() == 0 || e.GetToken() > b.m.token:
		return fmt.Errorf("fsm: decode snapshot: kv %q has token %d, counter %d", e.GetKey(), e.GetToken(), b.m.token)
	case e.GetDeleted() && len(e.GetValue()) > 0:
		return fmt.Errorf("fsm: decode snapshot: kv %q is deleted but has a value", e.GetKey())
	}
	b.m.kv[e.GetKey()] = e
	return nil
}
