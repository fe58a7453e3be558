package auth

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/api/leaseholdv1/leaseholdv1connect"
	"github.com/leasehold/leasehold/internal/fsm/fsmpb"
)

// sessions is a SessionOwner over a map: lease id → principal.
func sessions(m map[string]string) SessionOwner {
	return func(id string) (string, bool) {
		o, ok := m[id]
		return o, ok
	}
}

func testPolicies() *Policies {
	return Compile(&fsmpb.AuthState{Enabled: true, Policies: []*fsmpb.AuthPolicy{
		{Name: "a", Principals: []string{"alice"}, Permissions: []string{"lock", "read"}, Prefixes: []string{"report:"}},
		{Name: "kv", Principals: []string{"bob"}, Permissions: []string{"kv-read"}, Prefixes: []string{"cfg/"}},
		{Name: "ops", Principals: []string{"ops"}, Permissions: []string{"admin"}},
	}})
}

func TestDecide(t *testing.T) {
	pol := testPolicies()
	owner := sessions(map[string]string{"L-alice": "alice", "L-bob": "bob"})
	alice, bob, ops := Principal{Name: "alice"}, Principal{Name: "bob"}, Principal{Name: "ops"}
	node, admin := Principal{Name: NodeName, Node: true}, Principal{Name: "root", Admin: true}
	const (
		acquire   = leaseholdv1connect.LeaseholdServiceAcquireProcedure
		create    = leaseholdv1connect.LeaseholdServiceCreateSessionProcedure
		keepAlive = leaseholdv1connect.LeaseholdServiceKeepAliveProcedure
		status    = leaseholdv1connect.LeaseholdServiceStatusProcedure
		list      = leaseholdv1connect.LeaseholdServiceListProcedure
		kvGet     = leaseholdv1connect.LeaseholdServiceKvGetProcedure
		kvPut     = leaseholdv1connect.LeaseholdServiceKvPutProcedure
		bump      = leaseholdv1connect.ClusterServiceBumpTokenProcedure
		authStat  = leaseholdv1connect.AuthServiceStatusProcedure
	)
	cases := []struct {
		name  string
		p     Principal
		proc  string
		msg   any
		allow bool
	}{
		{"lock on a granted name", alice, acquire, &pb.AcquireRequest{Name: "report:1", LeaseId: "L-alice"}, true},
		{"lock outside the prefix", alice, acquire, &pb.AcquireRequest{Name: "other", LeaseId: "L-alice"}, false},
		{"another principal's session", alice, acquire, &pb.AcquireRequest{Name: "report:1", LeaseId: "L-bob"}, false},
		{"a session not known here passes", alice, acquire, &pb.AcquireRequest{Name: "report:1", LeaseId: "L-new"}, true},
		{"no lock permission", bob, acquire, &pb.AcquireRequest{Name: "report:1", LeaseId: "L-bob"}, false},
		{"anonymous", Anonymous, acquire, &pb.AcquireRequest{Name: "report:1"}, false},
		{"create session needs lock on some name", alice, create, &pb.CreateSessionRequest{}, true},
		{"create session without lock", bob, create, &pb.CreateSessionRequest{}, false},
		{"batched renewal of own sessions", alice, keepAlive, &pb.KeepAliveRequest{LeaseIds: []string{"L-alice", "L-new"}}, true},
		{"batched renewal naming another's session is refused whole", alice, keepAlive, &pb.KeepAliveRequest{LeaseIds: []string{"L-alice", "L-bob"}}, false},
		{"admin renews anyone's session", ops, keepAlive, &pb.KeepAliveRequest{LeaseIds: []string{"L-alice", "L-bob"}}, true},
		{"read on a granted name", alice, status, &pb.StatusRequest{Name: "report:9"}, true},
		{"read elsewhere", alice, status, &pb.StatusRequest{Name: "x"}, false},
		{"list the granted prefix", alice, list, &pb.ListRequest{Prefix: "report:"}, true},
		{"list everything is wider than the grant", alice, list, &pb.ListRequest{Prefix: ""}, false},
		{"kv read on the key", bob, kvGet, &pb.KvGetRequest{Key: "cfg/a"}, true},
		{"kv read off the key", bob, kvGet, &pb.KvGetRequest{Key: "other"}, false},
		{"kv write needs kv-write", bob, kvPut, &pb.KvPutRequest{Key: "cfg/a"}, false},
		{"a message without the scoped field", alice, status, &pb.ListRequest{Prefix: "report:"}, false},
		{"cluster change needs admin", alice, bump, &pb.BumpTokenRequest{}, false},
		{"cluster change by an admin policy", ops, bump, &pb.BumpTokenRequest{}, true},
		{"cluster change by --admin", admin, bump, &pb.BumpTokenRequest{}, true},
		{"cluster change by a node", node, bump, &pb.BumpTokenRequest{}, true},
		{"an unlisted procedure needs admin", alice, "/leasehold.v1.Other/Thing", nil, false},
		{"auth status is open", Anonymous, authStat, &pb.AuthStatusRequest{}, true},
	}
	for _, c := range cases {
		err := Decide(pol, c.p, c.proc, c.msg, owner)
		if (err == nil) != c.allow {
			t.Errorf("%s: Decide(%v, %s) = %v, want allowed %v", c.name, c.p, Action(c.proc), err, c.allow)
			continue
		}
		if err != nil {
			if !errors.Is(err, ErrDenied) {
				t.Errorf("%s: %v does not match ErrDenied", c.name, err)
			}
			if r, ok := Reason(err); !ok || r != err.Error() {
				t.Errorf("%s: Reason(%v) = %q, %v", c.name, err, r, ok)
			}
		}
	}
}

func TestDecideReasons(t *testing.T) {
	pol := testPolicies()
	owner := sessions(map[string]string{"L-bob-123456": "bob"})
	err := Decide(pol, Principal{Name: "alice"}, leaseholdv1connect.LeaseholdServiceAcquireProcedure, &pb.AcquireRequest{Name: "other"}, owner)
	if want := "alice may not Acquire (needs lock)"; err == nil || err.Error() != want {
		t.Errorf("permission refusal = %v, want %q", err, want)
	}
	err = Decide(pol, Principal{Name: "alice"}, leaseholdv1connect.LeaseholdServiceAcquireProcedure, &pb.AcquireRequest{Name: "report:1", LeaseId: "L-bob-123456"}, owner)
	if want := "session L-bob-… belongs to another principal, not alice"; err == nil || err.Error() != want {
		t.Errorf("ownership refusal = %v, want %q", err, want)
	}
}

// Every procedure the leader decides has its request message mapped to its
// own rule (a KeepAliveStream's renewals are KeepAlives), and nothing else
// is decided there.
func TestDecidedAtLeader(t *testing.T) {
	for proc, msg := range map[string]any{
		leaseholdv1connect.LeaseholdServiceCreateSessionProcedure: &pb.CreateSessionRequest{},
		leaseholdv1connect.LeaseholdServiceKeepAliveProcedure:     &pb.KeepAliveRequest{},
		leaseholdv1connect.LeaseholdServiceCloseSessionProcedure:  &pb.CloseSessionRequest{},
		leaseholdv1connect.LeaseholdServiceAcquireProcedure:       &pb.AcquireRequest{},
		leaseholdv1connect.LeaseholdServiceTryAcquireProcedure:    &pb.TryAcquireRequest{},
		leaseholdv1connect.LeaseholdServiceReleaseProcedure:       &pb.ReleaseRequest{},
		leaseholdv1connect.LeaseholdServiceCancelWaitProcedure:    &pb.CancelWaitRequest{},
		leaseholdv1connect.LeaseholdServiceProclaimProcedure:      &pb.ProclaimRequest{},
		leaseholdv1connect.LeaseholdServiceKvPutProcedure:         &pb.KvPutRequest{},
		leaseholdv1connect.LeaseholdServiceKvDeleteProcedure:      &pb.KvDeleteRequest{},
		leaseholdv1connect.ClusterServiceAddMemberProcedure:       &pb.AddMemberRequest{},
		leaseholdv1connect.ClusterServiceRemoveMemberProcedure:    &pb.RemoveMemberRequest{},
		leaseholdv1connect.ClusterServiceTransferLeaderProcedure:  &pb.TransferLeaderRequest{},
		leaseholdv1connect.ClusterServiceBumpTokenProcedure:       &pb.BumpTokenRequest{},
		leaseholdv1connect.AuthServiceSetEnabledProcedure:         &pb.SetEnabledRequest{},
		leaseholdv1connect.AuthServiceCreateTokenProcedure:        &pb.CreateTokenRequest{},
		leaseholdv1connect.AuthServiceRevokeTokenProcedure:        &pb.RevokeTokenRequest{},
		leaseholdv1connect.AuthServiceSetPolicyProcedure:          &pb.SetPolicyRequest{},
		leaseholdv1connect.AuthServiceDeletePolicyProcedure:       &pb.DeletePolicyRequest{},
	} {
		if !DecidedAtLeader(proc) {
			t.Errorf("%s is not decided at the leader", proc)
		}
		if got, ok := LeaderRule(msg); !ok || got != proc {
			t.Errorf("LeaderRule(%T) = %q, %v, want %q", msg, got, ok, proc)
		}
	}
	if !DecidedAtLeader(leaseholdv1connect.LeaseholdServiceKeepAliveStreamProcedure) {
		t.Error("KeepAliveStream's renewals are not decided at the leader")
	}
	for proc, msg := range map[string]any{
		leaseholdv1connect.LeaseholdServiceStatusProcedure: &pb.StatusRequest{},
		leaseholdv1connect.LeaseholdServiceListProcedure:   &pb.ListRequest{},
		leaseholdv1connect.LeaseholdServiceWatchProcedure:  &pb.WatchRequest{},
		leaseholdv1connect.LeaseholdServiceKvGetProcedure:  &pb.KvGetRequest{},
	} {
		if DecidedAtLeader(proc) {
			t.Errorf("%s is a read, decided where it is read", proc)
		}
		if _, ok := LeaderRule(msg); ok {
			t.Errorf("LeaderRule(%T) names a rule for a read", msg)
		}
	}
}

func TestAdminProcedure(t *testing.T) {
	admin := []string{leaseholdv1connect.ClusterServiceBumpTokenProcedure, leaseholdv1connect.AuthServiceSetPolicyProcedure, leaseholdv1connect.AuthServiceCreateTokenProcedure}
	plain := []string{leaseholdv1connect.ClusterServiceMembersProcedure, leaseholdv1connect.AuthServiceStatusProcedure, leaseholdv1connect.AuthServiceListTokensProcedure, leaseholdv1connect.LeaseholdServiceAcquireProcedure}
	for _, p := range admin {
		if !AdminProcedure(p) {
			t.Errorf("%s is administrative", p)
		}
	}
	for _, p := range plain {
		if AdminProcedure(p) {
			t.Errorf("%s is not administrative", p)
		}
	}
	if got := Action(leaseholdv1connect.ClusterServiceBumpTokenProcedure); got != "BumpToken" || !strings.HasSuffix(leaseholdv1connect.ClusterServiceBumpTokenProcedure, "/"+got) {
		t.Errorf("Action = %q", got)
	}
}

// TestProcedureNames: the procedure names this package spells are those
// connect-go serves, and every rule names an RPC of the API (a misspelt
// one would leave its RPC to the default, admin only).
func TestProcedureNames(t *testing.T) {
	for got, want := range map[string]string{
		lockProc("Acquire"):    leaseholdv1connect.LeaseholdServiceAcquireProcedure,
		clusterProc("Members"): leaseholdv1connect.ClusterServiceMembersProcedure,
		authProc("Status"):     leaseholdv1connect.AuthServiceStatusProcedure,
	} {
		if got != want {
			t.Errorf("procedure %q, connect-go serves %q", got, want)
		}
	}
	seen := map[string]bool{}
	for _, name := range []string{lockService, clusterService, authService} {
		d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(name))
		if err != nil {
			t.Fatalf("service %s: %v", name, err)
		}
		methods := d.(protoreflect.ServiceDescriptor).Methods()
		for i := range methods.Len() {
			seen["/"+name+"/"+string(methods.Get(i).Name())] = true
		}
	}
	for proc := range rules {
		if !seen[proc] {
			t.Errorf("the rule of %s names no RPC of the API", proc)
		}
	}
}
