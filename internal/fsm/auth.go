package fsm

import (
	"errors"
	"fmt"
	"slices"

	"google.golang.org/protobuf/proto"

	"github.com/leasehold/leasehold/internal/auth"
	"github.com/leasehold/leasehold/internal/fsm/fsmpb"
)

// Auth state: the enable switch, policies and token hashes (see
// internal/auth). It is replicated like every other state, so a change
// takes effect on each node when that node applies it. Commands that
// change it return the recompiled policies in Result.Auth.

// Auth errors (business refusals in Result.Err).
var (
	// ErrAuthNotFound: the policy or token named does not exist.
	ErrAuthNotFound = errors.New("fsm: no such policy or token")
	// ErrAuthLimit: the auth state holds auth.MaxPolicies policies or auth.MaxTokens tokens.
	ErrAuthLimit = errors.New("fsm: too many policies or tokens")
)

// authState is the Machine's auth state. The zero value is "disabled,
// nothing defined". Records are replaced, never modified in place, so a
// snapshot view may share them.
type authState struct {
	enabled  bool
	policies map[string]*fsmpb.AuthPolicy
	tokens   map[string]*fsmpb.AuthToken
	compiled *auth.Policies // nil (disabled) until the first auth command or restore
}

func (m *Machine) applyAuth(a *applyCtx, cmd *fsmpb.Command) {
	st := &m.auth
	if st.policies == nil {
		st.policies, st.tokens = map[string]*fsmpb.AuthPolicy{}, map[string]*fsmpb.AuthToken{}
	}
	switch op := cmd.GetOp().(type) {
	case *fsmpb.Command_AuthEnable:
		st.enabled = op.AuthEnable.GetEnabled()
	case *fsmpb.Command_AuthPutPolicy:
		p := op.AuthPutPolicy.GetPolicy()
		if err := auth.ValidatePolicy(p); err != nil {
			a.res.Err = err
			return
		}
		if _, ok := st.policies[p.GetName()]; !ok && len(st.policies) >= auth.MaxPolicies {
			a.res.Err = fmt.Errorf("%w: %d policies", ErrAuthLimit, auth.MaxPolicies)
			return
		}
		st.policies[p.GetName()] = proto.CloneOf(p)
	case *fsmpb.Command_AuthDeletePolicy:
		if _, ok := st.policies[op.AuthDeletePolicy.GetName()]; !ok {
			a.res.Err = fmt.Errorf("%w: policy %q", ErrAuthNotFound, op.AuthDeletePolicy.GetName())
			return
		}
		delete(st.policies, op.AuthDeletePolicy.GetName())
	case *fsmpb.Command_AuthPutToken:
		t := op.AuthPutToken.GetToken()
		switch {
		case len(t.GetSha256()) != 32 || t.GetId() == "" || !auth.ValidPrincipal(t.GetPrincipal()):
			a.res.Err = fmt.Errorf("%w: malformed token record", auth.ErrInvalid)
			return
		case st.tokens[t.GetId()] != nil:
			a.res.Err = fmt.Errorf("%w: token id %s exists", auth.ErrInvalid, t.GetId())
			return
		case len(st.tokens) >= auth.MaxTokens:
			a.res.Err = fmt.Errorf("%w: %d tokens", ErrAuthLimit, auth.MaxTokens)
			return
		}
		st.tokens[t.GetId()] = proto.CloneOf(t)
	case *fsmpb.Command_AuthRevokeToken:
		if _, ok := st.tokens[op.AuthRevokeToken.GetId()]; !ok {
			a.res.Err = fmt.Errorf("%w: token %q", ErrAuthNotFound, op.AuthRevokeToken.GetId())
			return
		}
		delete(st.tokens, op.AuthRevokeToken.GetId())
	}
	st.compiled = auth.Compile(m.authSnapshot())
	a.res.Auth = st.compiled
}

// authSnapshot returns the auth state as one record, sorted.
func (m *Machine) authSnapshot() *fsmpb.AuthState {
	st := &m.auth
	out := &fsmpb.AuthState{Enabled: st.enabled}
	for _, p := range st.policies {
		out.Policies = append(out.Policies, p)
	}
	for _, t := range st.tokens {
		out.Tokens = append(out.Tokens, t)
	}
	slices.SortFunc(out.Policies, func(a, b *fsmpb.AuthPolicy) int { return cmpString(a.GetName(), b.GetName()) })
	slices.SortFunc(out.Tokens, func(a, b *fsmpb.AuthToken) int { return cmpString(a.GetId(), b.GetId()) })
	return out
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Auth returns the compiled auth state; nil (auth disabled) when it was
// never set up. It is immutable and safe to keep after the read.
func (m *Machine) Auth() *auth.Policies { return m.auth.compiled }

// SessionPrincipal returns the principal that created the live session
// leaseID, and whether it exists.
func (m *Machine) SessionPrincipal(leaseID string) (string, bool) {
	s, ok := m.sessions[leaseID]
	if !ok {
		return "", false
	}
	return s.pb.GetPrincipal(), true
}

// authRecord is the snapshot record of the auth state, or nil when there
// is none (so that states without auth keep their snapshot bytes).
func (m *Machine) authRecord() *fsmpb.AuthState {
	if !m.auth.enabled && len(m.auth.policies) == 0 && len(m.auth.tokens) == 0 {
		return nil
	}
	return m.authSnapshot()
}

// restoreAuth loads the auth record of a snapshot.
func (b *builder) auth(st *fsmpb.AuthState) error {
	a := &b.m.auth
	a.enabled = st.GetEnabled()
	a.policies, a.tokens = map[string]*fsmpb.AuthPolicy{}, map[string]*fsmpb.AuthToken{}
	for _, p := range st.GetPolicies() {
		a.policies[p.GetName()] = p
	}
	for _, t := range st.GetTokens() {
		if len(t.GetSha256()) != 32 {
			return fmt.Errorf("fsm: decode snapshot: token %q has no SHA-256", t.GetId())
		}
		a.tokens[t.GetId()] = t
	}
	a.compiled = auth.Compile(st)
	return nil
}
