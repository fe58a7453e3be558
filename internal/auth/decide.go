package auth

import (
	"errors"
	"fmt"
	"strings"

	pb "github.com/leasehold/leasehold/api/leaseholdv1"
)

// The decision: which permission each procedure needs, on which name, and
// whether the caller may use the sessions a request names. Everything here
// is a pure function of the policies, the principal, the procedure and its
// request message; the one fact it does not hold, who created a session,
// it asks through a SessionOwner.

// DeniedError is a refused request. It matches ErrDenied; Reason is the
// message the caller and the audit log see.
type DeniedError struct{ Reason string }

func (e *DeniedError) Error() string { return e.Reason }

// Is makes a DeniedError match ErrDenied.
func (e *DeniedError) Is(target error) bool { return target == ErrDenied }

func denied(format string, args ...any) error {
	return &DeniedError{Reason: fmt.Sprintf(format, args...)}
}

// Reason returns the reason of a refusal (a DeniedError in err's chain),
// or "" and false for any other error.
func Reason(err error) (string, bool) {
	var d *DeniedError
	if errors.As(err, &d) {
		return d.Reason, true
	}
	return "", false
}

// SessionOwner reports the principal that created the session leaseID,
// and whether the session is known at all.
type SessionOwner func(leaseID string) (principal string, known bool)

// rule is what one procedure needs.
type rule struct {
	perm  Perm
	scope scope
}

type scope uint8

const (
	scopeAny     scope = iota // the permission on some name
	scopeName                 // on the request's name (GetName)
	scopePrefix               // on the request's prefix (GetPrefix)
	scopeKey                  // on the request's key (GetKey)
	scopeCluster              // admin (nodes too)
	scopeOpen                 // anyone (auth status)
)

// The services and procedures, named as connect-go names them
// ("/leasehold.v1.LeaseholdService/Acquire"). They are spelled here, not
// taken from leaseholdv1connect, so that this package, and the state
// machine that compiles policies with it, link no RPC or HTTP code;
// TestProcedureNames checks them against the API's descriptors.
const (
	lockService    = "leasehold.v1.LeaseholdService"
	clusterService = "leasehold.v1.ClusterService"
	authService    = "leasehold.v1.AuthService"
)

func lockProc(method string) string    { return "/" + lockService + "/" + method }
func clusterProc(method string) string { return "/" + clusterService + "/" + method }
func authProc(method string) string    { return "/" + authService + "/" + method }

// rules maps a procedure to what it needs; a procedure not listed needs
// admin.
var rules = map[string]rule{
	lockProc("CreateSession"):   {PermLock, scopeAny},
	lockProc("KeepAlive"):       {PermLock, scopeAny},
	lockProc("KeepAliveStream"): {PermLock, scopeAny},
	lockProc("LockStream"):      {PermLock, scopeAny}, // the stream; each request is decided as its RPC
	lockProc("CloseSession"):    {PermLock, scopeAny},
	lockProc("Acquire"):         {PermLock, scopeName},
	lockProc("TryAcquire"):      {PermLock, scopeName},
	lockProc("Release"):         {PermLock, scopeName},
	lockProc("CancelWait"):      {PermLock, scopeName},
	lockProc("Proclaim"):        {PermLock, scopeName},
	lockProc("Status"):          {PermRead, scopeName},
	lockProc("List"):            {PermRead, scopePrefix},
	lockProc("Watch"):           {PermRead, scopePrefix},
	lockProc("KvPut"):           {PermKVWrite, scopeKey},
	lockProc("KvDelete"):        {PermKVWrite, scopeKey},
	lockProc("KvGet"):           {PermKVRead, scopeKey},
	authProc("Status"):          {0, scopeOpen},
}

// AdminProcedure reports whether proc is an administrative action (a
// cluster or auth change), logged for audit (INFO) whatever its outcome and
// whether or not auth is enabled.
func AdminProcedure(proc string) bool {
	return (strings.HasPrefix(proc, "/"+clusterService+"/") && proc != clusterProc("Members")) ||
		(strings.HasPrefix(proc, "/"+authService+"/") && proc != authProc("Status") && proc != authProc("ListPolicies") && proc != authProc("ListTokens"))
}

// Action is the method name of proc, as audit lines and refusals name it.
func Action(proc string) string {
	if i := strings.LastIndexByte(proc, '/'); i >= 0 {
		return proc[i+1:]
	}
	return proc
}

// DecidedAtLeader reports whether proc is decided by the leader, not by
// the node that received it: a follower forwards these to the leader, which
// decides them against its policies and state, so that a follower that has
// not applied a policy change yet neither refuses nor allows in its place.
// The node that receives such a request does not decide it; the leader
// does, with LeaderRule, just before it runs it.
func DecidedAtLeader(proc string) bool {
	switch proc {
	case lockProc("CreateSession"), lockProc("KeepAlive"), lockProc("KeepAliveStream"), lockProc("CloseSession"),
		lockProc("Acquire"), lockProc("TryAcquire"), lockProc("Release"), lockProc("CancelWait"), lockProc("Proclaim"),
		lockProc("KvPut"), lockProc("KvDelete"),
		clusterProc("AddMember"), clusterProc("RemoveMember"), clusterProc("TransferLeader"), clusterProc("BumpToken"),
		authProc("SetEnabled"), authProc("CreateToken"), authProc("RevokeToken"), authProc("SetPolicy"), authProc("DeletePolicy"):
		return true
	}
	return false
}

// LeaderRule returns the procedure whose rule the leader checks for msg,
// a request message of a procedure DecidedAtLeader, and false for any
// other message. It is keyed by the message, not by how it arrived: a
// unary call, a LockStream message or a KeepAliveStream's renewal (a
// KeepAliveRequest) are decided alike.
func LeaderRule(msg any) (proc string, ok bool) {
	switch msg.(type) {
	case *pb.CreateSessionRequest:
		return lockProc("CreateSession"), true
	case *pb.KeepAliveRequest:
		return lockProc("KeepAlive"), true
	case *pb.CloseSessionRequest:
		return lockProc("CloseSession"), true
	case *pb.AcquireRequest:
		return lockProc("Acquire"), true
	case *pb.TryAcquireRequest:
		return lockProc("TryAcquire"), true
	case *pb.ReleaseRequest:
		return lockProc("Release"), true
	case *pb.CancelWaitRequest:
		return lockProc("CancelWait"), true
	case *pb.ProclaimRequest:
		return lockProc("Proclaim"), true
	case *pb.KvPutRequest:
		return lockProc("KvPut"), true
	case *pb.KvDeleteRequest:
		return lockProc("KvDelete"), true
	case *pb.AddMemberRequest:
		return clusterProc("AddMember"), true
	case *pb.RemoveMemberRequest:
		return clusterProc("RemoveMember"), true
	case *pb.TransferLeaderRequest:
		return clusterProc("TransferLeader"), true
	case *pb.BumpTokenRequest:
		return clusterProc("BumpToken"), true
	case *pb.SetEnabledRequest:
		return authProc("SetEnabled"), true
	case *pb.CreateTokenRequest:
		return authProc("CreateToken"), true
	case *pb.RevokeTokenRequest:
		return authProc("RevokeToken"), true
	case *pb.SetPolicyRequest:
		return authProc("SetPolicy"), true
	case *pb.DeletePolicyRequest:
		return authProc("DeletePolicy"), true
	}
	return "", false
}

// Decide decides whether p may send msg (a request message) to proc under
// pol: nil, or a *DeniedError. It checks the permission the procedure
// needs on the name, prefix or key the message carries, then that every
// session the message names belongs to p (CheckOwner). Callers skip it
// when auth is off (pol.On() false).
func Decide(pol *Policies, p Principal, proc string, msg any, owner SessionOwner) error {
	r, ok := rules[proc]
	if !ok {
		r = rule{PermAdmin, scopeCluster}
	}
	// A request a node forwards is decided as its caller: a node is
	// trusted only for what it does itself.
	var allowed bool
	switch r.scope {
	case scopeOpen:
		allowed = true
	case scopeAny:
		allowed = pol.AllowAny(p, r.perm)
	case scopeName:
		n, _ := msg.(interface{ GetName() string })
		allowed = n != nil && pol.Allow(p, r.perm, n.GetName())
	case scopePrefix:
		n, _ := msg.(interface{ GetPrefix() string })
		allowed = n != nil && pol.Allow(p, r.perm, n.GetPrefix())
	case scopeKey:
		n, _ := msg.(interface{ GetKey() string })
		allowed = n != nil && pol.Allow(p, r.perm, n.GetKey())
	case scopeCluster:
		allowed = pol.IsAdmin(p)
	}
	if !allowed {
		return denied("%s may not %s (needs %s)", p, Action(proc), r.perm)
	}
	var ids []string
	if l, ok := msg.(interface{ GetLeaseId() string }); ok && l.GetLeaseId() != "" {
		ids = []string{l.GetLeaseId()}
	}
	if l, ok := msg.(interface{ GetLeaseIds() []string }); ok {
		ids = append(ids, l.GetLeaseIds()...) // a batched renewal
	}
	if len(ids) == 0 {
		return nil
	}
	return CheckOwner(pol, p, ids, owner)
}

// CheckOwner refuses the use of another principal's sessions: a request
// naming several (a batched renewal) is refused whole. A session owner
// does not know (replication lag on a follower) passes: the leader
// decides, and the command itself refuses an unknown session.
func CheckOwner(pol *Policies, p Principal, leaseIDs []string, owner SessionOwner) error {
	if pol.IsAdmin(p) {
		return nil
	}
	for _, id := range leaseIDs {
		if o, ok := owner(id); ok && o != p.Name {
			return denied("session %s… belongs to another principal, not %s", id[:min(len(id), 6)], p)
		}
	}
	return nil
}
