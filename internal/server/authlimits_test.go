package server_test

import (
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/leasehold/leasehold/api"
	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/internal/auth"
	"github.com/leasehold/leasehold/internal/fsm/fsmpb"
)

// TestAuthPolicyByteLimit: a policy whose encoding is longer than
// auth.MaxPolicyBytes is refused with resource-exhausted and changes
// nothing; one at the limit is stored.
func TestAuthPolicyByteLimit(t *testing.T) {
	_, cl := startAuth(t) // the node role may set policies while auth is off
	ctx := ctxT(t)
	// policy returns a policy whose stored record is exactly size bytes.
	policy := func(name string, size int) *pb.Policy {
		p := &pb.Policy{Name: name, Principals: []string{"reader"}, Permissions: []string{"read"}}
		bytesOf := func() int {
			return proto.Size(&fsmpb.AuthPolicy{Name: p.Name, Principals: p.Principals, Permissions: p.Permissions, Prefixes: p.Prefixes})
		}
		for bytesOf()+3+auth.MaxPrefixLen < size {
			p.Prefixes = append(p.Prefixes, fmt.Sprintf("%03d:", len(p.Prefixes))+strings.Repeat("x", auth.MaxPrefixLen-4))
		}
		p.Prefixes = append(p.Prefixes, "")
		for n := auth.MaxPrefixLen; n > 0; n-- {
			p.Prefixes[len(p.Prefixes)-1] = strings.Repeat("y", n)
			if bytesOf() == size {
				return p
			}
		}
		t.Fatalf("no policy of %d bytes", size)
		return nil
	}
	_, err := cl.auth.SetPolicy(ctx, req(&pb.SetPolicyRequest{Policy: policy("big", auth.MaxPolicyBytes+1)}))
	wantCode(t, "a policy one byte over the limit", err, api.CodeResourceExhausted)
	ls, err := cl.auth.ListPolicies(ctx, req(&pb.ListPoliciesRequest{}))
	mustOK(t, "list policies", err)
	if n := len(ls.Msg.GetPolicies()); n != 0 {
		t.Fatalf("%d policies after the refusal, want none", n)
	}
	_, err = cl.auth.SetPolicy(ctx, req(&pb.SetPolicyRequest{Policy: policy("full", auth.MaxPolicyBytes)}))
	mustOK(t, "a policy at the limit", err)
}
