package e2e

import (
	"context"
	"crypto/tls"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/leasehold/leasehold/api"
	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/api/leaseholdv1/leaseholdv1connect"
	"github.com/leasehold/leasehold/internal/certs"
)

// principalClients are raw API clients of one principal (a client
// certificate) against one node.
type principalClients struct {
	locks   leaseholdv1connect.LeaseholdServiceClient
	cluster leaseholdv1connect.ClusterServiceClient
	auth    leaseholdv1connect.AuthServiceClient
}

func clientsFor(t *testing.T, cfg *tls.Config, addr string) principalClients {
	var protos http.Protocols
	protos.SetHTTP2(true)
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg, Protocols: &protos}, Timeout: 10 * time.Second}
	t.Cleanup(hc.CloseIdleConnections)
	base := "https://" + addr
	return principalClients{
		locks:   leaseholdv1connect.NewLeaseholdServiceClient(hc, base, connect.WithGRPC()),
		cluster: leaseholdv1connect.NewClusterServiceClient(hc, base, connect.WithGRPC()),
		auth:    leaseholdv1connect.NewAuthServiceClient(hc, base, connect.WithGRPC()),
	}
}

func wantDenied(t *testing.T, what string, err error) {
	t.Helper()
	if got := api.CodeOf(err); got != api.CodePermissionDenied {
		t.Fatalf("%s: %v (code %q), want permission-denied", what, err, got)
	}
}

func must(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// TestAuthAttacks: three real processes with mutual TLS and auth enabled by
// the --admin principal. Requests go through a follower, which forwards them
// with the caller's principal; the attacks of issue 9 are refused with
// permission-denied and logged for audit.
func TestAuthAttacks(t *testing.T) {
	dir := t.TempDir()
	o := certs.Options{Dir: dir}
	must(t, "ca", certs.CreateCA(o))
	must(t, "node", certs.CreateNode(o, []string{"127.0.0.1"}))
	p := func(f string) string { return filepath.Join(dir, f) }
	cfgs := map[string]*tls.Config{}
	for _, who := range []string{"root", "alice", "bob", "mallory"} {
		must(t, "client "+who, certs.CreateClient(o, who))
		cfg, err := certs.ClientConfig(p(certs.CACert), p(certs.ClientCert(who)), p(certs.ClientKey(who)))
		must(t, "client config", err)
		cfgs[who] = cfg
	}
	var protos http.Protocols
	protos.SetHTTP1(true)
	protos.SetHTTP2(true)
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: cfgs["root"], Protocols: &protos}, Timeout: 5 * time.Second}
	defer hc.CloseIdleConnections()
	procs := startClusterWith(t, 3, hc, "https://",
		"--cert", p(certs.NodeCert), "--key", p(certs.NodeKey), "--client-ca", p(certs.CACert),
		"--peer-cert", p(certs.NodeCert), "--peer-key", p(certs.NodeKey), "--peer-ca", p(certs.CACert),
		"--admin", "root")

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rootAny := clientsFor(t, cfgs["root"], procs[0].api)
	mem, err := rootAny.cluster.Members(ctx, connect.NewRequest(&pb.MembersRequest{}))
	must(t, "members", err)
	var leader, follower *proc
	for _, pr := range procs {
		if pr.id == mem.Msg.GetLeaderId() {
			leader = pr
		} else if follower == nil {
			follower = pr
		}
	}
	if leader == nil {
		t.Fatalf("no leader among %v", mem.Msg.GetMembers())
	}
	root := clientsFor(t, cfgs["root"], follower.api)
	alice := clientsFor(t, cfgs["alice"], follower.api)
	bob := clientsFor(t, cfgs["bob"], follower.api)
	mallory := clientsFor(t, cfgs["mallory"], follower.api)
	aliceAtLeader := clientsFor(t, cfgs["alice"], leader.api)

	// Enabling is refused to a caller that would not be an admin after it.
	_, err = alice.auth.SetEnabled(ctx, connect.NewRequest(&pb.SetEnabledRequest{Enabled: true}))
	if api.CodeOf(err) != api.CodePermissionDenied {
		t.Fatalf("alice enables auth: %v, want permission-denied", err)
	}
	for _, pol := range []*pb.Policy{
		{Name: "reports", Principals: []string{"alice", "mallory"}, Permissions: []string{"lock", "read"}, Prefixes: []string{"report:"}},
		{Name: "readers", Principals: []string{"bob"}, Permissions: []string{"read"}, Prefixes: []string{"report:"}},
	} {
		var err error
		waitFor(t, "set policy "+pol.GetName(), func() bool {
			_, err = root.auth.SetPolicy(ctx, connect.NewRequest(&pb.SetPolicyRequest{Policy: pol}))
			return api.CodeOf(err) != api.CodeUnavailable // the leader registers its address
		})
		must(t, "set policy "+pol.GetName(), err)
	}
	_, err = root.auth.SetEnabled(ctx, connect.NewRequest(&pb.SetEnabledRequest{Enabled: true}))
	must(t, "root enables auth", err)
	// Every node applies the change without a restart.
	for _, pr := range procs {
		c := clientsFor(t, cfgs["root"], pr.api)
		waitFor(t, "auth enabled with 2 policies on "+pr.id, func() bool {
			st, err := c.auth.Status(ctx, connect.NewRequest(&pb.AuthStatusRequest{}))
			return err == nil && st.Msg.GetEnabled() && st.Msg.GetPolicies() == 2 && st.Msg.GetPrincipal() == "root" && slices.Contains(st.Msg.GetRoles(), "admin")
		})
	}

	// alice works through the follower; the leader records her as the
	// session's principal (not the forwarding node): she can use the
	// session at the leader directly.
	sess, err := alice.locks.CreateSession(ctx, connect.NewRequest(&pb.CreateSessionRequest{TtlMs: 30000, Owner: "alice"}))
	must(t, "alice session through the follower", err)
	lease := sess.Msg.GetLeaseId()
	acq, err := alice.locks.Acquire(ctx, connect.NewRequest(&pb.AcquireRequest{Name: "report:1", LeaseId: lease}))
	must(t, "alice acquires through the follower", err)
	_, err = aliceAtLeader.locks.KeepAlive(ctx, connect.NewRequest(&pb.KeepAliveRequest{LeaseId: lease}))
	must(t, "alice renews at the leader", err)
	_, err = alice.locks.TryAcquire(ctx, connect.NewRequest(&pb.TryAcquireRequest{Name: "other:1", LeaseId: lease}))
	wantDenied(t, "alice acquires outside her prefix", err)

	// A reader forwarded through a follower cannot write.
	_, err = bob.locks.CreateSession(ctx, connect.NewRequest(&pb.CreateSessionRequest{TtlMs: 30000}))
	wantDenied(t, "bob (read only) creates a session", err)
	_, err = bob.locks.KvPut(ctx, connect.NewRequest(&pb.KvPutRequest{Key: "report:1", Value: []byte("x"), Token: acq.Msg.GetHolding().GetToken()}))
	wantDenied(t, "bob writes KV", err)
	st, err := bob.locks.Status(ctx, connect.NewRequest(&pb.StatusRequest{Name: "report:1"}))
	must(t, "bob reads status", err)
	if h := st.Msg.GetLock().GetHolder(); h.GetLeaseId() != "" || h.GetOwner() != "alice" || h.GetToken() != acq.Msg.GetHolding().GetToken() {
		t.Fatalf("bob sees holder %+v: want owner and token, lease id redacted", h)
	}
	st, err = alice.locks.Status(ctx, connect.NewRequest(&pb.StatusRequest{Name: "report:1"}))
	must(t, "alice reads status", err)
	if st.Msg.GetLock().GetHolder().GetLeaseId() != lease {
		t.Fatalf("alice sees her holding as %+v, want her lease id", st.Msg.GetLock().GetHolder())
	}

	// Lease takeover with an observed lease id.
	tok := acq.Msg.GetHolding().GetToken()
	_, err = mallory.locks.Release(ctx, connect.NewRequest(&pb.ReleaseRequest{Name: "report:1", LeaseId: lease, Token: tok}))
	wantDenied(t, "mallory releases alice's lock", err)
	_, err = mallory.locks.KeepAlive(ctx, connect.NewRequest(&pb.KeepAliveRequest{LeaseId: lease}))
	wantDenied(t, "mallory renews alice's session", err)
	_, err = mallory.locks.CloseSession(ctx, connect.NewRequest(&pb.CloseSessionRequest{LeaseId: lease}))
	wantDenied(t, "mallory closes alice's session", err)
	_, err = mallory.locks.TryAcquire(ctx, connect.NewRequest(&pb.TryAcquireRequest{Name: "report:2", LeaseId: lease}))
	wantDenied(t, "mallory acquires with alice's session", err)

	// Cluster administration needs admin.
	_, err = alice.cluster.AddMember(ctx, connect.NewRequest(&pb.AddMemberRequest{Id: leader.id, RaftAddr: leader.raft, ApiAddr: "127.0.0.1:1"}))
	wantDenied(t, "alice adds a member", err)
	_, err = alice.cluster.BumpToken(ctx, connect.NewRequest(&pb.BumpTokenRequest{MinToken: 1 << 62}))
	wantDenied(t, "alice bumps the token counter", err)
	_, err = alice.auth.CreateToken(ctx, connect.NewRequest(&pb.CreateTokenRequest{Principal: "root"}))
	wantDenied(t, "alice creates a token", err)

	// A client forging the forwarded-principal header is refused.
	forged := connect.NewRequest(&pb.BumpTokenRequest{MinToken: 1 << 62})
	forged.Header().Set("Leasehold-Principal", "root")
	forged.Header().Set("Leasehold-Forwarded-By", follower.id)
	_, err = aliceAtLeader.cluster.BumpToken(ctx, forged)
	wantDenied(t, "alice forges the principal header", err)
	if !strings.Contains(err.Error(), "Leasehold-Principal") {
		t.Fatalf("forged header refused with %v; want the header named", err)
	}

	// Nothing the attacks tried happened.
	st, err = alice.locks.Status(ctx, connect.NewRequest(&pb.StatusRequest{Name: "report:1"}))
	must(t, "status", err)
	if st.Msg.GetLock().GetHolder().GetLeaseId() != lease || st.Msg.GetLock().GetHolder().GetToken() != tok {
		t.Fatalf("report:1 after the attacks: %+v, want alice's holding", st.Msg.GetLock().GetHolder())
	}
	mem, err = root.cluster.Members(ctx, connect.NewRequest(&pb.MembersRequest{}))
	must(t, "root lists members", err)
	if len(mem.Msg.GetMembers()) != 3 {
		t.Fatalf("members after the attacks: %v", mem.Msg.GetMembers())
	}

	// A new policy takes effect without restart: mallory gets kv-write.
	_, err = root.auth.SetPolicy(ctx, connect.NewRequest(&pb.SetPolicyRequest{Policy: &pb.Policy{Name: "kv", Principals: []string{"mallory"}, Permissions: []string{"kv-write"}, Prefixes: []string{"report:"}}}))
	must(t, "set kv policy", err)
	_, err = mallory.locks.KvPut(ctx, connect.NewRequest(&pb.KvPutRequest{Key: "report:1", Value: []byte("v"), Token: tok}))
	must(t, "mallory writes KV once granted", err)

	// Denials and administrative actions are in the audit log.
	waitFor(t, "audit lines", func() bool {
		var all string
		for _, pr := range procs {
			b, _ := os.ReadFile(pr.log.Name())
			all += string(b)
		}
		return strings.Contains(all, "component=audit") &&
			strings.Contains(all, "action=AddMember principal=alice result=denied") &&
			strings.Contains(all, "action=SetPolicy principal=root result=ok")
	})
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 15s", what)
		}
		<-time.After(20 * time.Millisecond)
	}
}

// TestAuthNodeSecret: three real processes without TLS between nodes,
// identified to each other by --node-secret-file; clients use bearer
// tokens, minted (while auth is off) and enabled by the operator with the
// node secret, which no token can replace. A follower forwards a token
// holder's writes as that principal.
func TestAuthNodeSecret(t *testing.T) {
	secret := filepath.Join(t.TempDir(), "node.secret")
	secretValue := strings.Repeat("5e", 32)
	must(t, "secret", os.WriteFile(secret, []byte(secretValue+"\n"), 0o600))
	procs := startClusterWith(t, 3, http.DefaultClient, "http://", "--node-secret-file", secret, "--admin", "ops")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	h2cWith := func(tok, sec string) *http.Client {
		var protos http.Protocols
		protos.SetUnencryptedHTTP2(true)
		hc := &http.Client{Transport: bearerTransport{tok: tok, secret: sec, rt: &http.Transport{Protocols: &protos}}, Timeout: 10 * time.Second}
		t.Cleanup(hc.CloseIdleConnections)
		return hc
	}
	h2c := func(tok string) *http.Client { return h2cWith(tok, "") }
	anonymous := leaseholdv1connect.NewAuthServiceClient(h2c(""), "http://"+procs[0].api, connect.WithGRPC())
	_, err := anonymous.CreateToken(ctx, connect.NewRequest(&pb.CreateTokenRequest{Principal: "ops"}))
	wantDenied(t, "an anonymous caller mints a token for the --admin principal", err)
	anyNode := leaseholdv1connect.NewAuthServiceClient(h2cWith("", secretValue), "http://"+procs[0].api, connect.WithGRPC())
	var opsTok, ciTok string
	waitFor(t, "tokens", func() bool {
		a, err1 := anyNode.CreateToken(ctx, connect.NewRequest(&pb.CreateTokenRequest{Principal: "ops"}))
		if err1 != nil {
			return false
		}
		b, err2 := anyNode.CreateToken(ctx, connect.NewRequest(&pb.CreateTokenRequest{Principal: "ci"}))
		if err2 != nil {
			return false
		}
		opsTok, ciTok = a.Msg.GetToken(), b.Msg.GetToken()
		return true
	})
	ops := leaseholdv1connect.NewAuthServiceClient(h2c(opsTok), "http://"+procs[0].api, connect.WithGRPC())
	_, err = ops.SetEnabled(ctx, connect.NewRequest(&pb.SetEnabledRequest{Enabled: true}))
	wantDenied(t, "the --admin principal's token enables auth", err)
	_, err = anyNode.SetPolicy(ctx, connect.NewRequest(&pb.SetPolicyRequest{Policy: &pb.Policy{Name: "ci", Principals: []string{"ci"}, Permissions: []string{"lock"}, Prefixes: []string{"deploy:"}}}))
	must(t, "policy", err)
	_, err = anyNode.SetEnabled(ctx, connect.NewRequest(&pb.SetEnabledRequest{Enabled: true}))
	must(t, "enable", err)
	_, err = ops.ListTokens(ctx, connect.NewRequest(&pb.ListTokensRequest{}))
	must(t, "ops (--admin) lists tokens once auth is on", err)
	for _, pr := range procs {
		c := leaseholdv1connect.NewLeaseholdServiceClient(h2c(ciTok), "http://"+pr.api, connect.WithGRPC())
		var s *connect.Response[pb.CreateSessionResponse]
		waitFor(t, "ci session through "+pr.id, func() bool {
			s, err = c.CreateSession(ctx, connect.NewRequest(&pb.CreateSessionRequest{TtlMs: 30000}))
			return err == nil
		})
		_, err = c.TryAcquire(ctx, connect.NewRequest(&pb.TryAcquireRequest{Name: "deploy:" + pr.id, LeaseId: s.Msg.GetLeaseId()}))
		must(t, "ci acquires through "+pr.id, err)
		_, err = c.TryAcquire(ctx, connect.NewRequest(&pb.TryAcquireRequest{Name: "other:" + pr.id, LeaseId: s.Msg.GetLeaseId()}))
		wantDenied(t, "ci outside its prefix through "+pr.id, err)
	}

	// Revoking ci's token ends, on every node (followers too), its open
	// KeepAliveStream and its queued Acquire within a second, and the
	// queued Acquires are never granted.
	opsLocks := leaseholdv1connect.NewLeaseholdServiceClient(h2c(opsTok), "http://"+procs[0].api, connect.WithGRPC())
	opsSess, err := opsLocks.CreateSession(ctx, connect.NewRequest(&pb.CreateSessionRequest{TtlMs: 30000}))
	must(t, "ops session", err)
	held, err := opsLocks.TryAcquire(ctx, connect.NewRequest(&pb.TryAcquireRequest{Name: "deploy:held", LeaseId: opsSess.Msg.GetLeaseId()}))
	must(t, "ops holds deploy:held", err)
	var kaEnds, queued []chan error
	for _, pr := range procs {
		c := leaseholdv1connect.NewLeaseholdServiceClient(h2c(ciTok), "http://"+pr.api, connect.WithGRPC())
		s, err := c.CreateSession(ctx, connect.NewRequest(&pb.CreateSessionRequest{TtlMs: 30000}))
		must(t, "ci session through "+pr.id, err)
		ka := c.KeepAliveStream(ctx)
		must(t, "keepalive through "+pr.id, ka.Send(&pb.KeepAliveStreamRequest{LeaseId: s.Msg.GetLeaseId()}))
		if r, err := ka.Receive(); err != nil || r.GetErrorCode() != "" {
			t.Fatalf("ci's renewal through %s: %v %v", pr.id, r, err)
		}
		kaEnd, q := make(chan error, 1), make(chan error, 1)
		go func() {
			for {
				if _, err := ka.Receive(); err != nil {
					kaEnd <- err
					return
				}
			}
		}()
		go func() {
			_, err := c.Acquire(ctx, connect.NewRequest(&pb.AcquireRequest{Name: "deploy:held", LeaseId: s.Msg.GetLeaseId()}))
			q <- err
		}()
		kaEnds, queued = append(kaEnds, kaEnd), append(queued, q)
	}
	waitFor(t, "ci's three Acquires queued", func() bool {
		st, err := opsLocks.Status(ctx, connect.NewRequest(&pb.StatusRequest{Name: "deploy:held"}))
		return err == nil && len(st.Msg.GetLock().GetWaiters()) == len(procs)
	})
	toks, err := anyNode.ListTokens(ctx, connect.NewRequest(&pb.ListTokensRequest{}))
	must(t, "list tokens", err)
	for _, tk := range toks.Msg.GetTokens() {
		if tk.GetPrincipal() == "ci" {
			_, err := anyNode.RevokeToken(ctx, connect.NewRequest(&pb.RevokeTokenRequest{Id: tk.GetId()}))
			must(t, "revoke ci's token", err)
		}
	}
	for i, pr := range procs {
		for what, ch := range map[string]chan error{"KeepAliveStream": kaEnds[i], "queued Acquire": queued[i]} {
			select {
			case err := <-ch:
				wantDenied(t, "ci's "+what+" through "+pr.id+" after the revocation", err)
			case <-time.After(time.Second):
				t.Fatalf("ci's %s through %s still open a second after the revocation", what, pr.id)
			}
		}
	}
	waitFor(t, "ci's Acquires withdrawn", func() bool {
		st, err := opsLocks.Status(ctx, connect.NewRequest(&pb.StatusRequest{Name: "deploy:held"}))
		return err == nil && len(st.Msg.GetLock().GetWaiters()) == 0
	})
	_, err = opsLocks.Release(ctx, connect.NewRequest(&pb.ReleaseRequest{Name: "deploy:held", LeaseId: opsSess.Msg.GetLeaseId(), Token: held.Msg.GetHolding().GetToken()}))
	must(t, "ops releases deploy:held", err)
	st, err := opsLocks.Status(ctx, connect.NewRequest(&pb.StatusRequest{Name: "deploy:held"}))
	must(t, "status", err)
	if h := st.Msg.GetLock().GetHolder(); h != nil {
		t.Fatalf("deploy:held was granted to %v after ci's token was revoked", h)
	}
}

type bearerTransport struct {
	tok    string
	secret string // the node secret, sent when set
	rt     http.RoundTripper
}

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if b.tok != "" {
		r.Header.Set("Authorization", "Bearer "+b.tok)
	}
	if b.secret != "" {
		r.Header.Set("Leasehold-Node-Secret", b.secret)
	}
	return b.rt.RoundTrip(r)
}
