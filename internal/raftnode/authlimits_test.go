package raftnode

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/internal/auth"
	"github.com/leasehold/leasehold/internal/backup"
	"github.com/leasehold/leasehold/internal/fsm"
	"github.com/leasehold/leasehold/internal/fsm/fsmpb"
)

// fullAuth is an auth state at its limits: auth.MaxTokens tokens and
// auth.MaxPolicies policies of auth.MaxPolicyBytes, about 17 MiB.
func fullAuth(t *testing.T) *fsmpb.AuthState {
	t.Helper()
	st := &fsmpb.AuthState{Enabled: true}
	name := func(prefix string, i, j int) string {
		s := fmt.Sprintf("%s-%d-%d-", prefix, i, j)
		return s + strings.Repeat("n", 64-len(s))
	}
	for i := range auth.MaxTokens {
		st.Tokens = append(st.Tokens, &fsmpb.AuthToken{Id: fmt.Sprintf("%016x", i), Principal: name("token", i, 0), Sha256: bytes.Repeat([]byte{byte(i)}, 32), CreatedUnixMs: base, Proven: true})
	}
	for i := range auth.MaxPolicies {
		p := &fsmpb.AuthPolicy{Name: fmt.Sprintf("policy-%04d", i), Permissions: []string{"read"}}
		for j := range auth.MaxPolicyPrincipals {
			p.Principals = append(p.Principals, name("user", i, j))
		}
		for proto.Size(p)+3+auth.MaxPrefixLen <= auth.MaxPolicyBytes {
			p.Prefixes = append(p.Prefixes, fmt.Sprintf("%d/%d/", i, len(p.Prefixes))+strings.Repeat("p", auth.MaxPrefixLen-12))
		}
		st.Policies = append(st.Policies, p)
	}
	if n := proto.Size(st); n <= fsm.MaxRecordBytes {
		t.Fatalf("the auth state is %d bytes, within one record", n)
	}
	return st
}

// fullAuthMachine returns a Machine holding fullAuth. Building it with
// Apply takes minutes (each auth command recompiles the whole auth
// state), so it is read from a snapshot stream framed here: the empty
// state's header, the auth record in parts, an end record.
func fullAuthMachine(t *testing.T, st *fsmpb.AuthState) *fsm.Machine {
	t.Helper()
	empty, err := fsm.New(fsm.DefaultLimits()).Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	end, err := fsm.SnapshotBody(empty)
	if err != nil {
		t.Fatal(err)
	}
	stream := bytes.Clone(empty[:len(empty)-len(end)])
	frame := func(r *fsmpb.SnapshotRecord) {
		b, err := proto.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		stream = append(binary.AppendUvarint(stream, uint64(len(b))), b...)
	}
	rec, err := proto.Marshal(&fsmpb.SnapshotRecord{Rec: &fsmpb.SnapshotRecord_Auth{Auth: st}})
	if err != nil {
		t.Fatal(err)
	}
	records := uint64(1)
	for len(rec) > 0 {
		n := min(len(rec), fsm.PartBytes)
		frame(&fsmpb.SnapshotRecord{Rec: &fsmpb.SnapshotRecord_Part{Part: &fsmpb.SnapshotPart{Data: rec[:n], Last: n == len(rec)}}})
		rec, records = rec[n:], records+1
	}
	frame(&fsmpb.SnapshotRecord{Rec: &fsmpb.SnapshotRecord_End{End: &fsmpb.SnapshotEnd{Records: records}}})
	m, err := fsm.ReadSnapshot(fsm.DefaultLimits(), bytes.NewReader(stream))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// wantAuth fails unless n's auth state is st.
func wantAuth(t *testing.T, n *Node, st *fsmpb.AuthState, when string) {
	t.Helper()
	var got *fsmpb.AuthState
	n.Read(func(m *fsm.Machine) { got = m.Auth().State() })
	if !proto.Equal(got, st) {
		t.Fatalf("%s: the auth state differs (%d policies, %d tokens)", when, len(got.GetPolicies()), len(got.GetTokens()))
	}
}

// saveBackup writes the snapshot stream that write produces as a backup
// file, opens and scans it as `snapshot status` does, and returns it.
func saveBackup(t *testing.T, write func(io.Writer) error) *backup.File {
	t.Helper()
	path := filepath.Join(t.TempDir(), "b.snap")
	if _, _, err := backup.Save(path, func(w io.Writer) (*pb.SnapshotInfo, error) {
		return &pb.SnapshotInfo{Index: 1, NodeId: "n1"}, write(w)
	}); err != nil {
		t.Fatal(err)
	}
	b, err := backup.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	if _, err := b.Scan(); err != nil {
		t.Fatalf("snapshot status: %v", err)
	}
	return b
}

// TestAuthAtLimitsBackupRestoreRestart: a backup of a state with every
// token and policy the limits allow restores into a new data dir (as
// `snapshot restore` does); the node on it, which starts from the
// snapshot the restore took, serves that state; it takes a snapshot of
// it, restarts from that snapshot with the same state, and a backup it
// makes then restores too.
func TestAuthAtLimitsBackupRestoreRestart(t *testing.T) {
	st := fullAuth(t)
	m := fullAuthMachine(t, st)
	b := saveBackup(t, func(w io.Writer) error { _, err := m.Capture().WriteTo(w); return err })

	cfg := testConfig(t, filepath.Join(t.TempDir(), "restored"))
	if _, err := Restore(ctxT(t), cfg, Snapshot{Stream: b.Stream, Size: b.Stream.Size(), Index: b.Info.GetIndex()}, func(g fsm.GrantClock) (uint64, error) {
		return g.Token + 1, nil
	}); err != nil {
		t.Fatal(err)
	}
	n, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	waitLeader(t, n)
	wantAuth(t, n, st, "after the restore")

	// A snapshot on the node's disk, then a restart from it.
	_, rc, err := n.Backup(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	rc.Close()
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	n = open(t, cfg)
	waitLeader(t, n)
	wantAuth(t, n, st, "after a restart from the node's snapshot")

	// A backup the node makes now restores as well.
	meta, rc, err := n.Backup(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	b = saveBackup(t, func(w io.Writer) error { _, err := io.Copy(w, rc); return err })
	if b.Stream.Size() != meta.Size {
		t.Fatalf("the backup's stream is %d bytes, the snapshot %d", b.Stream.Size(), meta.Size)
	}
	again := testConfig(t, filepath.Join(t.TempDir(), "again"))
	if _, err := Restore(ctxT(t), again, Snapshot{Stream: b.Stream, Size: b.Stream.Size(), Index: meta.Index}, func(g fsm.GrantClock) (uint64, error) {
		return g.Token + 1, nil
	}); err != nil {
		t.Fatal(err)
	}
	r := open(t, again)
	waitLeader(t, r)
	wantAuth(t, r, st, "after restoring the node's own backup")
}
