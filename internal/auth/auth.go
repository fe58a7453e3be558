// Package auth is leasehold's authentication and authorization model:
// principals, permissions on name prefixes, bearer tokens stored hashed, and
// the check.
//
//	request ──► authenticate (mTLS CN / bearer token / forwarded header from a node)
//	                 │ Principal
//	                 ▼
//	            Policies.Allow(principal, perm, name)  ◄── compiled from the replicated state
//
// The replicated state (fsm) holds an enable switch, policies and token
// hashes; every node compiles it into an immutable *Policies after each
// change, so a check is a map lookup and never waits on Raft. When auth is
// disabled (the default), Allow returns true at once.
//
// Rules:
//
//  1. Default deny once enabled: a principal may do what a policy naming it
//     (or "*", any authenticated principal) grants on a prefix of the name.
//  2. admin implies every permission on every name.
//  3. Nodes (a node certificate, see IsNodeCert) have the node role and may
//     do everything; they act for a caller only through the forwarding
//     header, which only a node may send.
//  4. A token is "lh." + id + "." + secret (256 random bits); the state keeps
//     the id, the principal and SHA-256(token), never the token.
package auth

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/leasehold/leasehold/internal/fsm/fsmpb"
)

// Perm is a set of permissions.
type Perm uint8

// The permissions a policy grants.
const (
	// PermLock: create sessions, acquire, release, keepalive, close.
	PermLock Perm = 1 << iota
	// PermRead: status, ls, watch.
	PermRead
	// PermKVRead: kv get.
	PermKVRead
	// PermKVWrite: kv put and delete.
	PermKVWrite
	// PermAdmin: members, bump-token, snapshot, auth policies and tokens;
	// implies every other permission on every name.
	PermAdmin
)

var permNames = []struct {
	p    Perm
	name string
}{{PermLock, "lock"}, {PermRead, "read"}, {PermKVRead, "kv-read"}, {PermKVWrite, "kv-write"}, {PermAdmin, "admin"}}

// String returns the permission names joined by ",".
func (p Perm) String() string { return strings.Join(p.Names(), ",") }

// Names returns the names of the permissions in p.
func (p Perm) Names() []string {
	var out []string
	for _, n := range permNames {
		if p&n.p != 0 {
			out = append(out, n.name)
		}
	}
	return out
}

// Sentinel errors.
var (
	// ErrInvalid marks a malformed policy, principal or token.
	ErrInvalid = errors.New("auth: invalid")
	// ErrDenied marks a refused request.
	ErrDenied = errors.New("auth: permission denied")
)

// ParsePerms parses permission names (lock, read, kv-read, kv-write, admin).
func ParsePerms(names []string) (Perm, error) {
	var p Perm
	for _, s := range names {
		i := slices.IndexFunc(permNames, func(n struct {
			p    Perm
			name string
		}) bool {
			return n.name == s
		})
		if i < 0 {
			return 0, fmt.Errorf("%w: unknown permission %q (want lock, read, kv-read, kv-write, admin)", ErrInvalid, s)
		}
		p |= permNames[i].p
	}
	if p == 0 {
		return 0, fmt.Errorf("%w: a policy grants at least one permission", ErrInvalid)
	}
	return p, nil
}

// Principal is an authenticated caller.
type Principal struct {
	// Name is the certificate CN or the token's principal; "" is anonymous.
	Name string
	// Node is set for another node of the cluster (node certificate).
	Node bool
	// Admin is set for a principal named by the server's --admin flag.
	Admin bool
}

// Anonymous is the caller with neither certificate nor token.
var Anonymous = Principal{}

// String names the principal for logs: its name, "node:NAME" or "anonymous".
func (p Principal) String() string {
	switch {
	case p.Node:
		return "node:" + p.Name
	case p.Name == "":
		return "anonymous"
	}
	return p.Name
}

// NodeName is the CN of node certificates (leasehold certs create-node).
const NodeName = "node"

// IsNodeCert reports whether c is a node certificate: CN "node" and usable
// as a server certificate. Client certificates (certs create-client) are
// for client auth only, so a client named "node" is not a node.
func IsNodeCert(c *x509.Certificate) bool {
	return c.Subject.CommonName == NodeName && slices.Contains(c.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
}

// ValidPrincipal reports whether s may name a principal: 1..64 of
// A-Z a-z 0-9 . _ - @, not starting with '.', and not "node" or "*".
func ValidPrincipal(s string) bool {
	if len(s) == 0 || len(s) > 64 || s[0] == '.' || s == NodeName {
		return false
	}
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '_', r == '-', r == '@':
		default:
			return false
		}
	}
	return true
}

// Limits of the auth state.
const (
	MaxPolicies         = 1000
	MaxTokens           = 10000
	MaxPolicyPrincipals = 100
	MaxPolicyPrefixes   = 100
	MaxPrefixLen        = 512
	// MaxPolicyBytes bounds the encoded size of one policy, so that the
	// auth state stays within MaxPolicies × MaxPolicyBytes plus
	// MaxTokens token records of about 130 bytes: about 17 MiB.
	MaxPolicyBytes = 16 << 10
)

// ValidatePolicy checks a policy before it is proposed.
func ValidatePolicy(p *fsmpb.AuthPolicy) error {
	switch {
	case !ValidPrincipal(p.GetName()):
		return fmt.Errorf("%w: policy name %q: want 1..64 of A-Z a-z 0-9 . _ - @", ErrInvalid, p.GetName())
	case len(p.GetPrincipals()) == 0 || len(p.GetPrincipals()) > MaxPolicyPrincipals:
		return fmt.Errorf("%w: policy %q names %d principals (want 1..%d)", ErrInvalid, p.GetName(), len(p.GetPrincipals()), MaxPolicyPrincipals)
	case len(p.GetPrefixes()) > MaxPolicyPrefixes:
		return fmt.Errorf("%w: policy %q has %d prefixes (at most %d)", ErrInvalid, p.GetName(), len(p.GetPrefixes()), MaxPolicyPrefixes)
	}
	for _, pr := range p.GetPrincipals() {
		if pr != "*" && !ValidPrincipal(pr) {
			return fmt.Errorf("%w: policy %q: principal %q: want 1..64 of A-Z a-z 0-9 . _ - @ (or *), not node", ErrInvalid, p.GetName(), pr)
		}
	}
	for _, pre := range p.GetPrefixes() {
		if len(pre) > MaxPrefixLen {
			return fmt.Errorf("%w: policy %q: a prefix is longer than %d bytes", ErrInvalid, p.GetName(), MaxPrefixLen)
		}
	}
	_, err := ParsePerms(p.GetPermissions())
	return err
}

type grant struct {
	perm     Perm
	prefixes []string // empty: every name
}

func (g grant) covers(perm Perm, name string) bool {
	if g.perm&PermAdmin == 0 && g.perm&perm == 0 {
		return false
	}
	if len(g.prefixes) == 0 {
		return true
	}
	for _, p := range g.prefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// Policies is the compiled, immutable auth state. The zero value and nil
// are "auth disabled".
type Policies struct {
	Enabled bool
	grants  map[string][]grant // principal ("*" for any authenticated) → grants
	tokens  map[string]*fsmpb.AuthToken
	state   *fsmpb.AuthState
}

// Compile builds Policies from the replicated state; invalid entries (none
// pass ValidatePolicy) grant nothing.
func Compile(st *fsmpb.AuthState) *Policies {
	p := &Policies{Enabled: st.GetEnabled(), grants: map[string][]grant{}, tokens: map[string]*fsmpb.AuthToken{}, state: st}
	for _, pol := range st.GetPolicies() {
		perm, err := ParsePerms(pol.GetPermissions())
		if err != nil {
			continue
		}
		var prefixes []string
		if !slices.Contains(pol.GetPrefixes(), "") {
			prefixes = pol.GetPrefixes()
		}
		for _, pr := range pol.GetPrincipals() {
			p.grants[pr] = append(p.grants[pr], grant{perm: perm, prefixes: prefixes})
		}
	}
	for _, t := range st.GetTokens() {
		p.tokens[t.GetId()] = t
	}
	return p
}

// State returns the state p was compiled from (read only).
func (p *Policies) State() *fsmpb.AuthState {
	if p == nil {
		return &fsmpb.AuthState{}
	}
	return p.state
}

// On reports whether authorization is enabled.
func (p *Policies) On() bool { return p != nil && p.Enabled }

// Allow reports whether pr may do perm on name (a lock name or KV key; ""
// for cluster-wide actions, which only admin covers unless a policy has no
// prefix). With auth disabled it is always true.
func (p *Policies) Allow(pr Principal, perm Perm, name string) bool {
	if !p.On() || pr.Node || pr.Admin {
		return true
	}
	if pr.Name == "" {
		return false
	}
	for _, g := range p.grants[pr.Name] {
		if g.covers(perm, name) {
			return true
		}
	}
	for _, g := range p.grants["*"] {
		if g.covers(perm, name) {
			return true
		}
	}
	return false
}

// IsAdmin reports whether pr has admin on every name (node, --admin, or a
// policy granting admin without a prefix). With auth disabled, everyone is.
func (p *Policies) IsAdmin(pr Principal) bool { return p.Allow(pr, PermAdmin, "") }

// Authenticate maps a bearer token to its principal name.
func (p *Policies) Authenticate(token string) (string, error) {
	id, ok := TokenID(token)
	if !ok {
		return "", fmt.Errorf("%w: malformed bearer token", ErrDenied)
	}
	var t *fsmpb.AuthToken
	if p != nil {
		t = p.tokens[id]
	}
	sum := Hash(token)
	if t == nil || subtle.ConstantTimeCompare(sum[:], t.GetSha256()) != 1 {
		return "", fmt.Errorf("%w: unknown or revoked bearer token %s", ErrDenied, id)
	}
	if !t.GetProven() {
		return "", fmt.Errorf("%w: bearer token %s was minted by leasehold v0.1.0, which let any caller mint a token while auth was off; mint a new one (leasehold auth token create) and revoke this one", ErrDenied, id)
	}
	return t.GetPrincipal(), nil
}

// Tokens returns the token records sorted by id.
func (p *Policies) Tokens() []*fsmpb.AuthToken {
	out := slices.Clone(p.State().GetTokens())
	sort.Slice(out, func(i, j int) bool { return out[i].GetId() < out[j].GetId() })
	return out
}

const tokenPrefix = "lh."

// NewToken returns a new bearer token and its record for principal: 256
// random bits, and a 64-bit id to revoke it by.
func NewToken(principal string, unixMs int64) (string, *fsmpb.AuthToken) {
	var id [8]byte
	var secret [32]byte
	_, _ = rand.Read(id[:])
	_, _ = rand.Read(secret[:])
	idHex := hex.EncodeToString(id[:])
	tok := tokenPrefix + idHex + "." + hex.EncodeToString(secret[:])
	sum := Hash(tok)
	return tok, &fsmpb.AuthToken{Id: idHex, Principal: principal, Sha256: sum[:], CreatedUnixMs: unixMs, Proven: true}
}

// TokenID returns the id part of a token.
func TokenID(tok string) (string, bool) {
	rest, ok := strings.CutPrefix(tok, tokenPrefix)
	if !ok {
		return "", false
	}
	id, secret, ok := strings.Cut(rest, ".")
	if !ok || len(id) != 16 || len(secret) != 64 {
		return "", false
	}
	return id, true
}

// Hash is what the state stores of a token.
func Hash(tok string) [32]byte { return sha256.Sum256([]byte(tok)) }

// AllowAny reports whether pr has perm on at least one name (creating a
// session, which is not tied to a name).
func (p *Policies) AllowAny(pr Principal, perm Perm) bool {
	if !p.On() || pr.Node || pr.Admin {
		return true
	}
	if pr.Name == "" {
		return false
	}
	for _, who := range []string{pr.Name, "*"} {
		for _, g := range p.grants[who] {
			if g.perm&(perm|PermAdmin) != 0 {
				return true
			}
		}
	}
	return false
}
