package authedge

import (
	"context"

	"connectrpc.com/connect"

	"github.com/leasehold/leasehold/api"
	"github.com/leasehold/leasehold/api/leaseholdv1/leaseholdv1connect"
	"github.com/leasehold/leasehold/internal/auth"
	"github.com/leasehold/leasehold/internal/fsm"
)

// Interceptor returns the connect interceptor of authorization: it
// decides every unary call and every message of a stream a node decides
// itself, audits administrative procedures and redacts answers.
func (e *Edge) Interceptor() connect.Interceptor { return authz{e} }

// authz is the connect interceptor of authorization.
type authz struct{ e *Edge }

func (a authz) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		proc := req.Spec().Procedure
		pol, err := a.e.AuthorizeOp(ctx, proc, req.Any())
		if err != nil {
			return nil, err
		}
		res, err := next(ctx, req)
		var msg any
		if err == nil {
			msg = res.Any()
		}
		a.e.FinishOp(ctx, pol, proc, msg, err)
		return res, err
	}
}

func (a authz) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (a authz) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		pol := a.e.Policies()
		if !pol.On() {
			return next(ctx, conn)
		}
		if auth.DecidedAtLeader(conn.Spec().Procedure) {
			return next(ctx, conn) // each renewal is decided by the leader as a KeepAlive (DecideAtLeader)
		}
		if conn.Spec().Procedure == leaseholdv1connect.LeaseholdServiceLockStreamProcedure {
			return next(ctx, conn) // each message is authorized as its unary RPC (AuthorizeOp)
		}
		err := next(ctx, &authzConn{StreamingHandlerConn: conn, e: a.e, ctx: ctx, pol: pol})
		if auth.AdminProcedure(conn.Spec().Procedure) {
			a.e.AuditAdmin(ctx, conn.Spec().Procedure, err)
		}
		return err
	}
}

// authzConn checks every received message and redacts every sent one.
type authzConn struct {
	connect.StreamingHandlerConn
	e   *Edge
	ctx context.Context
	pol *auth.Policies
}

func (c *authzConn) Receive(msg any) error {
	if err := c.StreamingHandlerConn.Receive(msg); err != nil {
		return err
	}
	return c.e.authorize(c.ctx, c.pol, c.Spec().Procedure, msg)
}

func (c *authzConn) Send(msg any) error {
	c.e.redact(c.ctx, c.pol, msg)
	return c.StreamingHandlerConn.Send(msg)
}

// AuthorizeOp decides one operation: a unary RPC, or one message of a
// LockStream as the unary procedure proc, unless the leader decides it
// (auth.DecidedAtLeader; DecideAtLeader). It returns the policies FinishOp
// needs.
func (e *Edge) AuthorizeOp(ctx context.Context, proc string, msg any) (*auth.Policies, error) {
	pol := e.Policies()
	if !pol.On() || auth.DecidedAtLeader(proc) { // the plain path: one atomic load
		return pol, nil
	}
	return pol, e.authorize(ctx, pol, proc, msg)
}

// FinishOp audits an administrative operation and redacts an answer
// (res, nil when the operation failed with err) for the caller.
func (e *Edge) FinishOp(ctx context.Context, pol *auth.Policies, proc string, res any, err error) {
	if auth.AdminProcedure(proc) {
		e.AuditAdmin(ctx, proc, err)
	}
	if err == nil && pol.On() {
		e.redact(ctx, pol, res)
	}
}

// DecideAtLeader decides, on the leader just before it runs a request
// locally, a request of a procedure the leader decides (auth.LeaderRule
// names its rule from the message), as the principal ctx carries: the
// caller's, the one a proven node forwarded for, or the node's own
// (AsNode). The node that received it left it undecided
// (auth.DecidedAtLeader).
func (e *Edge) DecideAtLeader(ctx context.Context, msg any) error {
	pol := e.Policies()
	if !pol.On() { // the plain path: one atomic load
		return nil
	}
	rule, ok := auth.LeaderRule(msg)
	if !ok {
		return nil
	}
	return e.authorize(ctx, pol, rule, msg)
}

// authorize decides whether the caller may send msg to proc: nil or a
// permission-denied error, logged for audit.
func (e *Edge) authorize(ctx context.Context, pol *auth.Policies, proc string, msg any) error {
	if err := e.decideAudited(ctx, pol, proc, msg); err != nil {
		return api.ToConnect(err)
	}
	return nil
}

// decideAudited is authorize with the error as an api error: the decision
// is auth.Decide's, against this node's sessions (sessionOwner).
func (e *Edge) decideAudited(ctx context.Context, pol *auth.Policies, proc string, msg any) error {
	p := Principal(ctx)
	err := auth.Decide(pol, p, proc, msg, e.sessionOwner)
	if err != nil {
		err = deniedToAPI(err)
		e.cfg.Audit.Warn("audit", "action", auth.Action(proc), "principal", p.String(), "result", "denied", "reason", api.FromError(err).Message)
	}
	return err
}

// sessionOwner is the auth.SessionOwner of this node's state.
func (e *Edge) sessionOwner(leaseID string) (owner string, ok bool) {
	e.cfg.Read(func(m *fsm.Machine) { owner, ok = m.SessionPrincipal(leaseID) })
	return owner, ok
}

// deniedToAPI maps a refusal of package auth to permission-denied with
// its reason.
func deniedToAPI(err error) error {
	if reason, ok := auth.Reason(err); ok {
		return api.Errorf(api.CodePermissionDenied, "%s", reason)
	}
	return err
}

// AuditAdmin writes the audit line of an administrative procedure proc
// called by the caller of ctx, which ended with err.
func (e *Edge) AuditAdmin(ctx context.Context, proc string, err error) {
	p := Principal(ctx)
	if err != nil {
		e.cfg.Audit.Info("audit", "action", auth.Action(proc), "principal", p.String(), "result", "error", "err", err.Error())
		return
	}
	e.cfg.Audit.Info("audit", "action", auth.Action(proc), "principal", p.String(), "result", "ok")
}

// redact removes the lease ids of other principals' sessions from an
// answer for the caller of ctx (auth.Redact).
func (e *Edge) redact(ctx context.Context, pol *auth.Policies, msg any) {
	auth.Redact(pol, Principal(ctx), msg, e.sessionOwner)
}
