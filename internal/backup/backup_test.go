package backup

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/internal/fsm"
	"github.com/leasehold/leasehold/internal/fsm/fsmpb"
)

// state is a Machine with a session, a holding and a KV value.
func state(t *testing.T) *fsm.Machine {
	t.Helper()
	m := fsm.New(fsm.DefaultLimits())
	for i, cmd := range []*fsmpb.Command{
		{Op: &fsmpb.Command_CreateSession{CreateSession: &fsmpb.CreateSession{LeaseId: "s1", TtlMs: 10_000, Owner: "o"}}},
		{Op: &fsmpb.Command_Acquire{Acquire: &fsmpb.Acquire{Name: "a", LeaseId: "s1", WaitId: 1}}},
		{Op: &fsmpb.Command_KvPut{KvPut: &fsmpb.KVPut{Key: "k", Value: []byte("value"), Token: 1}}},
	} {
		if res := m.Apply(uint64(i+1), cmd); res.Err != nil {
			t.Fatalf("apply %v: %v", cmd, res.Err)
		}
	}
	return m
}

// save writes m as a backup into a new file and returns its path.
func save(t *testing.T, m *fsm.Machine) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "b.snap")
	info, size, err := Save(path, func(w io.Writer) (*pb.SnapshotInfo, error) {
		if _, err := m.Capture().WriteTo(w); err != nil {
			return nil, err
		}
		return &pb.SnapshotInfo{Index: 3, Term: 2, Token: 1, NodeId: "n1"}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(path); err != nil || st.Size() != size || info.GetIndex() != 3 {
		t.Fatalf("saved %v (%d bytes, info %v): %v", st, size, info, err)
	}
	return path
}

func TestSaveOpenScan(t *testing.T) {
	path := save(t, state(t))
	b, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if b.Info.GetIndex() != 3 || b.Info.GetTerm() != 2 || b.Info.GetNodeId() != "n1" || len(b.Sum) != 32 {
		t.Fatalf("opened %+v", b.Info)
	}
	st, err := b.Scan()
	if err != nil {
		t.Fatal(err)
	}
	if st.Sessions != 1 || st.Locks != 1 || st.KVKeys != 1 || st.ValueBytes != 5 || st.StateBytes <= 0 {
		t.Fatalf("scan = %+v, want 1 session, 1 lock, 1 key of 5 bytes", st)
	}
	m, err := fsm.ReadSnapshot(fsm.DefaultLimits(), io.NewSectionReader(b.Stream, 0, b.Stream.Size()))
	if err != nil || string(m.KV("k").GetValue()) != "value" {
		t.Fatalf("the stream restores to %v, %v", m, err)
	}
}

// A damaged, truncated or foreign file is refused with a typed error.
func TestOpenRefuses(t *testing.T) {
	good, err := os.ReadFile(save(t, state(t)))
	if err != nil {
		t.Fatal(err)
	}
	flip := append([]byte(nil), good...)
	flip[len(flip)/2] ^= 1
	for _, tc := range []struct {
		name string
		data []byte
		want error
	}{
		{"a flipped bit", flip, ErrDamaged},
		{"truncated", good[:len(good)-10], ErrDamaged},
		{"too short", good[:20], ErrNotBackup},
		{"another file", append([]byte("PK\x03\x04 not a backup"), good[20:]...), ErrNotBackup},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "x")
			if err := os.WriteFile(path, tc.data, 0o600); err != nil {
				t.Fatal(err)
			}
			if b, err := Open(path); !errors.Is(err, tc.want) {
				if b != nil {
					b.Close()
				}
				t.Fatalf("Open = %v, want %v", err, tc.want)
			}
		})
	}
}

// A snapshot that fails half way leaves no file behind, not even a part.
func TestSaveLeavesNothingOnFailure(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "b.snap")
	boom := errors.New("leader lost")
	_, _, err := Save(path, func(w io.Writer) (*pb.SnapshotInfo, error) {
		_, _ = w.Write([]byte("partial"))
		return nil, boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Save = %v, want the stream's error", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("left behind: %v", ents)
	}
}
