package fsm

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/leasehold/leasehold/internal/auth"
	"github.com/leasehold/leasehold/internal/fsm/fsmpb"
)

// authAtLimits returns an auth state at its limits: auth.MaxTokens tokens
// with principals of 64 bytes and auth.MaxPolicies policies of 100
// principals each, filled with prefixes up to auth.MaxPolicyBytes.
func authAtLimits(t testing.TB) *fsmpb.AuthState {
	t.Helper()
	st := &fsmpb.AuthState{Enabled: true}
	long := func(tag string, i int) string { return fmt.Sprintf("%s%0*d", tag, 64-len(tag), i) }
	for i := range auth.MaxPolicies {
		p := &fsmpb.AuthPolicy{Name: long("policy-", i), Permissions: []string{"lock", "read"}}
		for j := range auth.MaxPolicyPrincipals {
			p.Principals = append(p.Principals, long(fmt.Sprintf("p%d-", i), j))
		}
		for j := 0; ; j++ {
			pre := fmt.Sprintf("%d:%d:", i, j)
			room := auth.MaxPolicyBytes - proto.Size(p) - 3 // tag and a two-byte length
			if room <= len(pre) || len(p.Prefixes) == auth.MaxPolicyPrefixes {
				break
			}
			p.Prefixes = append(p.Prefixes, pre+strings.Repeat("x", min(auth.MaxPrefixLen, room)-len(pre)))
		}
		if err := auth.ValidatePolicy(p); err != nil || proto.Size(p) > auth.MaxPolicyBytes || proto.Size(p) < auth.MaxPolicyBytes-8 {
			t.Fatalf("policy %d: %d bytes, %v", i, proto.Size(p), err)
		}
		st.Policies = append(st.Policies, p)
	}
	for i := range auth.MaxTokens {
		sum := make([]byte, 32)
		binary.BigEndian.PutUint64(sum, uint64(i))
		st.Tokens = append(st.Tokens, &fsmpb.AuthToken{Id: fmt.Sprintf("%016x", i), Principal: long("t-", i), Sha256: sum, CreatedUnixMs: 1 << 41, Proven: true})
	}
	return st
}

// recordSizes returns the length of each record of the snapshot stream
// snap, as the reader sees them.
func recordSizes(t testing.TB, snap []byte) []uint64 {
	t.Helper()
	if !bytes.HasPrefix(snap, streamMagic) {
		t.Fatal("not a snapshot stream")
	}
	var sizes []uint64
	for b := snap[len(streamMagic):]; len(b) > 0; {
		n, k := binary.Uvarint(b)
		if k <= 0 || uint64(len(b)-k) < n {
			t.Fatal("bad record framing")
		}
		sizes = append(sizes, n)
		b = b[k+int(n):]
	}
	return sizes
}

// TestSnapshotAuthAtLimits: a state with every token and policy the limits
// allow (about 17 MiB of auth state, more than one record may hold) is
// written in records of at most PartBytes and restores into a fresh
// Machine with the same auth state, byte for byte.
func TestSnapshotAuthAtLimits(t *testing.T) {
	st := authAtLimits(t)
	if n := proto.Size(st); n <= MaxRecordBytes {
		t.Fatalf("the auth state at its limits is %d bytes: not above one record's limit", n)
	}
	m := New(DefaultLimits())
	b := &builder{m: m}
	if err := b.auth(st); err != nil {
		t.Fatal(err)
	}
	snap, err := m.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	sizes := recordSizes(t, snap)
	for i, n := range sizes {
		if n > PartBytes+16 {
			t.Fatalf("record %d is %d bytes; parts are at most %d", i, n, PartBytes)
		}
	}
	r := New(DefaultLimits())
	if err := r.Restore(snap); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(r.Auth().State(), st) || !r.Auth().On() {
		t.Fatal("the restored auth state differs")
	}
	again, err := r.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(again, snap) {
		t.Fatal("Snapshot → Restore → Snapshot changed the bytes")
	}
}

// TestSnapshotSharedLockWithValues: a shared lock held by 5 000 sessions,
// each holding with a value of 4 KiB (about 20 MiB in one lock, within the
// state quota), is written in parts and restores.
func TestSnapshotSharedLockWithValues(t *testing.T) {
	m := New(DefaultLimits())
	value := strings.Repeat("v", 4<<10)
	var index uint64
	apply := func(cmd *fsmpb.Command) {
		t.Helper()
		index++
		if res := m.Apply(index, cmd); res.Err != nil {
			t.Fatalf("apply %v: %v", cmd, res.Err)
		}
	}
	for i := range 5000 {
		lease := fmt.Sprintf("%032x", i)
		apply(create(lease, "reader"))
		apply(acquire("shared", lease, shared(), withValue(value)))
	}
	snap, err := m.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range recordSizes(t, snap) {
		if n > PartBytes+16 {
			t.Fatalf("record %d is %d bytes; parts are at most %d", i, n, PartBytes)
		}
	}
	r := roundTrip(t, m)
	if got := len(r.Lock("shared").Holders); got != 5000 {
		t.Fatalf("restored lock has %d holders, want 5000", got)
	}
}

// TestStreamParts: a stream written with small parts (every record longer
// than 8 bytes cut) restores to the same state, and parts that do not
// join into one state record are refused.
func TestStreamParts(t *testing.T) {
	src := busy(t)
	src.m.auth = authState{}
	b := &builder{m: src.m}
	if err := b.auth(&fsmpb.AuthState{Enabled: true, Tokens: []*fsmpb.AuthToken{{Id: "t1", Principal: "p", Sha256: make([]byte, 32)}}}); err != nil {
		t.Fatal(err)
	}
	want := src.snapshot()
	small := inParts(t, src.m, 8)
	if len(recordSizes(t, small)) <= len(recordSizes(t, want)) {
		t.Fatal("small parts cut nothing")
	}
	dst := New(DefaultLimits())
	if err := dst.Restore(small); err != nil {
		t.Fatal(err)
	}
	got, _ := dst.Snapshot()
	if !bytes.Equal(got, want) {
		t.Fatal("a stream in parts restored to another state")
	}
}

// inParts returns the snapshot stream of m with every record longer than
// part bytes cut into parts.
func inParts(t testing.TB, m *Machine, part int) []byte {
	t.Helper()
	var b bytes.Buffer
	v := m.Capture()
	if _, err := v.WriteTo(io.Discard); err != nil { // sorts the view
		t.Fatal(err)
	}
	if _, err := v.writeWith(&streamWriter{w: &b, part: part}); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}
