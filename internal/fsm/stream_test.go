package fsm

import (
	"bytes"
	"encoding/binary"
	"io"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/leasehold/leasehold/internal/fsm/fsmpb"
)

// TestCaptureIsConsistent: a view written after the state moved on still
// holds the state at capture time, byte for byte — the writes that followed
// (a retried acquire rewriting a holding and a queue entry, a release, a
// queue entry withdrawn, KV writes and deletes) replaced records instead of
// changing the captured ones.
func TestCaptureIsConsistent(t *testing.T) {
	r := busy(t)
	r.must(sessions("E")...)
	r.must(acquire("x", "E", waitID(7)))
	want := r.snapshot()
	v := r.m.Capture()
	r.must(
		acquire("x", "A", waitID(9)),           // holder retried: WaitId rewritten
		acquire("x", "B", waitID(8), delay(5)), // waiter retried
		closeSession("B"),                      // queue edited in place
		kvPut("k", "v9", 3),
		kvDelete("k2", 3),
		release("x", "A", 1),
		registerNode("n2", "127.0.0.1:7421"),
	)
	var got bytes.Buffer
	if _, err := v.WriteTo(&got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want) {
		t.Fatal("the captured view changed with the state")
	}
}

// TestStreamRoundTripRecordByRecord: ReadSnapshot reads a stream from a
// reader that hands out one byte at a time, so nothing relies on reading
// the whole stream at once.
func TestStreamRoundTripRecordByRecord(t *testing.T) {
	r := busy(t)
	r.must(kvDelete("k2", 3))
	data := r.snapshot()
	m, err := ReadSnapshot(r.m.limits, &oneByteReader{data: data})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := m.Snapshot()
	if !bytes.Equal(got, data) {
		t.Fatal("stream round trip changed the state")
	}
	if m.Bytes() != r.m.Bytes() {
		t.Fatalf("restored accounted size %d, want %d", m.Bytes(), r.m.Bytes())
	}
}

type oneByteReader struct{ data []byte }

func (o *oneByteReader) Read(p []byte) (int, error) {
	if len(o.data) == 0 {
		return 0, io.EOF
	}
	if len(p) == 0 {
		return 0, nil
	}
	p[0] = o.data[0]
	o.data = o.data[1:]
	return 1, nil
}

// TestStreamRefusesDamage: every proper prefix of a stream, a record
// longer than MaxRecordBytes, bytes after the end, a wrong count and a
// stream that does not start with its header are refused, and a failed
// Restore leaves the state as it was.
func TestStreamRefusesDamage(t *testing.T) {
	src := busy(t)
	data := src.snapshot()
	dst := busy(t)
	before := dst.snapshot()
	refuse := func(name string, b []byte) {
		t.Helper()
		if err := dst.m.Restore(b); err == nil {
			t.Fatalf("%s: accepted", name)
		} else if !strings.HasPrefix(err.Error(), "fsm: ") {
			t.Fatalf("%s: error %q lacks the package prefix", name, err)
		}
		if !bytes.Equal(before, dst.snapshot()) {
			t.Fatalf("%s: a failed Restore changed the state", name)
		}
	}
	for n := len(streamMagic); n < len(data); n++ {
		refuse("prefix", data[:n])
	}
	refuse("trailing bytes", append(bytes.Clone(data), 0))
	huge := binary.AppendUvarint(bytes.Clone(streamMagic), MaxRecordBytes+1)
	refuse("oversized record", append(huge, make([]byte, 16)...))
	rec := func(r *fsmpb.SnapshotRecord) []byte {
		b, err := proto.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		return append(binary.AppendUvarint(nil, uint64(len(b))), b...)
	}
	header := rec(&fsmpb.SnapshotRecord{Rec: &fsmpb.SnapshotRecord_Header{Header: &fsmpb.SnapshotHeader{Token: 1}}})
	end := func(n uint64) []byte {
		return rec(&fsmpb.SnapshotRecord{Rec: &fsmpb.SnapshotRecord_End{End: &fsmpb.SnapshotEnd{Records: n}}})
	}
	session := rec(&fsmpb.SnapshotRecord{Rec: &fsmpb.SnapshotRecord_Session{Session: &fsmpb.Session{LeaseId: "A"}}})
	join := func(parts ...[]byte) []byte { return bytes.Join(append([][]byte{streamMagic}, parts...), nil) }
	refuse("wrong count", join(header, session, end(1)))
	refuse("no header", join(session, end(1)))
	refuse("two headers", join(header, header, end(2)))
	refuse("session twice", join(header, session, session, end(3)))
	refuse("empty record", join(header, rec(&fsmpb.SnapshotRecord{}), end(2)))
	refuse("tombstone with a value", join(header, rec(&fsmpb.SnapshotRecord{Rec: &fsmpb.SnapshotRecord_Kv{Kv: &fsmpb.KV{Key: "k", Value: []byte("v"), Token: 1, Deleted: true}}}), end(2)))
	part := func(data []byte, last bool) []byte {
		return rec(&fsmpb.SnapshotRecord{Rec: &fsmpb.SnapshotRecord_Part{Part: &fsmpb.SnapshotPart{Data: data, Last: last}}})
	}
	whole := session[1:] // the session record without its length
	refuse("a part first", join(part(header[1:], true), end(1)))
	refuse("no last part", join(header, part(whole[:3], false), part(whole[3:], false), end(3)))
	refuse("no last part at the end", join(header, part(whole[:3], false), part(whole[3:], false)))
	refuse("parts of a header", join(header, part(header[1:3], false), part(header[3:], true), end(3)))
	refuse("parts of an end", join(header, part(end(1)[1:], true), end(2)))
	refuse("parts of a part", join(header, part(part(whole, true)[1:], true), end(2)))
	refuse("parts of garbage", join(header, part([]byte{0xff, 0xff}, true), end(2)))
	if err := dst.m.Restore(join(header, part(whole[:3], false), part(whole[3:], true), end(3))); err != nil {
		t.Fatalf("a hand-made stream with parts: %v", err)
	}
	if err := dst.m.Restore(join(header, session, end(2))); err != nil {
		t.Fatalf("a well-formed hand-made stream: %v", err)
	}
}

// FuzzScanStream decodes arbitrary bytes as a snapshot stream: the decoder
// never panics nor allocates past MaxRecordBytes for one record (parts
// joined take no more than the input holds), and what ReadSnapshot accepts
// is consistent and survives a round trip.
func FuzzScanStream(f *testing.F) {
	f.Add(busyWith(f, fuzzLimits).snapshot())
	f.Add(inParts(f, busyWith(f, fuzzLimits).m, 16))
	f.Add(streamMagic)
	f.Add(append(bytes.Clone(streamMagic), 0xff, 0xff, 0xff, 0xff, 0x0f))
	f.Fuzz(func(t *testing.T, data []byte) {
		var records int
		err := ScanStream(bytes.NewReader(data), func(*fsmpb.SnapshotRecord) error { records++; return nil })
		if err != nil && !strings.HasPrefix(err.Error(), "fsm: ") {
			t.Fatalf("error %q lacks the package prefix", err)
		}
		m, rerr := ReadSnapshot(fuzzLimits, bytes.NewReader(data))
		if bytes.HasPrefix(data, streamMagic) && err != nil && rerr == nil {
			t.Fatalf("ReadSnapshot accepted a stream ScanStream refuses: %v", err)
		}
		if rerr != nil {
			return
		}
		if err := consistent(m); err != nil {
			t.Fatalf("ReadSnapshot accepted an inconsistent state: %v", err)
		}
		roundTrip(t, m)
		if bytes.HasPrefix(data, streamMagic) && records == 0 {
			t.Fatal("an accepted stream had no records")
		}
	})
}
