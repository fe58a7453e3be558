package lockstream

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/leasehold/leasehold/api"
	pb "github.com/leasehold/leasehold/api/leaseholdv1"
)

// FuzzCheckBatch decodes arbitrary bytes as a LockStream message with a
// batch: checkBatch either takes it, and then the message has nothing of
// its own and a batch the stream can take, or refuses it with
// invalid-argument; none panics.
func FuzzCheckBatch(f *testing.F) {
	for _, m := range []*pb.LockStreamRequest{
		{Batch: []*pb.LockStreamRequest{{Id: 1, Op: &pb.LockStreamRequest_Cancel{Cancel: 2}}}},
		{Id: 3, Batch: []*pb.LockStreamRequest{{Id: 1}}},
		{Batch: []*pb.LockStreamRequest{{Id: 1, Batch: []*pb.LockStreamRequest{{Id: 2}}}}},
	} {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var m pb.LockStreamRequest
		if proto.Unmarshal(b, &m) != nil || len(m.GetBatch()) == 0 {
			return
		}
		if err := checkBatch(&m); err != nil {
			if api.CodeOf(err) != api.CodeInvalidArgument {
				t.Fatalf("refusal %v is not invalid-argument", err)
			}
			return
		}
		if m.GetId() != 0 || m.GetTimeoutMs() != 0 || m.GetOp() != nil || len(m.GetBatch()) > api.StreamBatchMax {
			t.Fatalf("batch message %v taken", &m)
		}
		for _, r := range m.GetBatch() {
			if len(r.GetBatch()) > 0 {
				t.Fatalf("batch in a batch taken: %v", &m)
			}
		}
	})
}
