package browsertest

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/chromedp/chromedp"

	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/api/leaseholdv1/leaseholdv1connect"
	"github.com/leasehold/leasehold/internal/harness/servertest"
	"github.com/leasehold/leasehold/internal/server"
)

// bearer sends "Authorization: Bearer tok" on every request.
type bearer string

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+string(b))
	return http.DefaultTransport.RoundTrip(r)
}

// nodeSecret proves the node secret on every request (the node role).
type nodeSecret string

func (n nodeSecret) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Leasehold-Node-Secret", string(n))
	return http.DefaultTransport.RoundTrip(r)
}

// authed is a server with auth enabled, the admin ops and a principal
// reader with the policy ui-read (read and kv-read on job:), and a lock
// client as ops.
type authed struct {
	c                 *servertest.Cluster
	opsTok, readerTok string
	locks             leaseholdv1connect.LeaseholdServiceClient
}

func startAuthed(t *testing.T) authed {
	t.Helper()
	const secret = "dashboard-test-node-secret-0123456789"
	c := servertest.Start(t, servertest.Options{Configure: func(cfg *server.Config) {
		cfg.Admins = []string{"ops"}
		cfg.NodeSecret = secret
	}})
	// While auth is off only the node role (or a --admin certificate) may
	// mint tokens and policies and enable auth.
	nodeHTTP := &http.Client{Transport: nodeSecret(secret)}
	t.Cleanup(nodeHTTP.CloseIdleConnections)
	node := leaseholdv1connect.NewAuthServiceClient(nodeHTTP, c.URL, connect.WithProtoJSON())
	token := func(who string) string {
		res, err := node.CreateToken(ctxT(t), connect.NewRequest(&pb.CreateTokenRequest{Principal: who}))
		mustOK(t, "create token "+who, err)
		return res.Msg.GetToken()
	}
	a := authed{c: c, opsTok: token("ops"), readerTok: token("reader")}
	opsHTTP := &http.Client{Transport: bearer(a.opsTok)}
	t.Cleanup(opsHTTP.CloseIdleConnections)
	_, err := node.SetPolicy(ctxT(t), connect.NewRequest(&pb.SetPolicyRequest{Policy: &pb.Policy{
		Name: "ui-read", Principals: []string{"reader"}, Permissions: []string{"read", "kv-read"}, Prefixes: []string{"job:"}}}))
	mustOK(t, "set policy", err)
	_, err = node.SetEnabled(ctxT(t), connect.NewRequest(&pb.SetEnabledRequest{Enabled: true}))
	mustOK(t, "enable auth", err)
	a.locks = leaseholdv1connect.NewLeaseholdServiceClient(opsHTTP, c.URL, connect.WithProtoJSON())
	return a
}

// TestDashboardLoginRolesKVAndForceRelease: with auth enabled the page asks
// for a token and refuses a wrong one; a principal with read and kv-read
// on job: sees its locks and fenced keys only, with no admin action, and
// the server refuses the action it forges; an admin force-releases a
// holding with a confirm step.
func TestDashboardLoginRolesKVAndForceRelease(t *testing.T) {
	bctx := browser(t)
	a := startAuthed(t)
	c, opsTok, readerTok, locks := a.c, a.opsTok, a.readerTok, a.locks
	lease := session(t, locks, 30000, "worker-A")
	tok := acquire(t, locks, "job:1", lease)
	acquire(t, locks, "secret:1", lease)
	_, err := locks.KvPut(ctxT(t), connect.NewRequest(&pb.KvPutRequest{Key: "job:1", Value: []byte("report v2"), Token: tok}))
	mustOK(t, "fenced write", err)

	login := func(what, tok string, then ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		within(t, bctx, 10*time.Second, what, append([]chromedp.Action[chromedp.Void]{
			chromedp.WaitVisible(chromedp.CSS(`#token`)),
			chromedp.SendKeys(chromedp.CSS(`#token`), tok),
			chromedp.Click(chromedp.CSS(`#login-submit`)),
		}, then...)...)
	}
	within(t, bctx, 20*time.Second, "the page asks for a token", chromedp.Navigate(c.URL+"/ui/"), chromedp.WaitVisible(chromedp.CSS(`#login`)))
	login("a wrong token is refused", "lh.0000000000000000."+strings.Repeat("0", 64),
		chromedp.Poll[chromedp.Void](`document.querySelector("#login-msg").textContent.includes("Token refused") && !document.querySelector("#login").hidden`))

	row := `#locks tr[data-lock="job:1"]`
	login("the reader's token opens the dashboard", readerTok,
		chromedp.WaitVisible(chromedp.CSS(row)),
		chromedp.WaitVisible(chromedp.CSS(`#kv tr[data-key="job:1"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#conn.conn-up`)))
	if got := text(t, bctx, row+" td.token"); got != strconv.FormatUint(tok, 10) {
		t.Errorf("reader's token cell = %q, want %d", got, tok)
	}
	if got := text(t, bctx, `#kv tr[data-key="job:1"] td.kv-token`); got != strconv.FormatUint(tok, 10) {
		t.Errorf("KV browser's last token = %q, want %d", got, tok)
	}
	if got := text(t, bctx, `#kv tr[data-key="job:1"] td.kv-value`); got != "report v2" {
		t.Errorf("KV browser's value = %q, want report v2", got)
	}
	seen, err := chromedp.Run(bctx, chromedp.Evaluate[[]int](`[
		document.querySelectorAll('#locks tr[data-lock="secret:1"]').length,
		document.querySelectorAll('button[data-action]').length,
		document.querySelector('#sessions-section').hidden ? 0 : 1]`))
	mustOK(t, "read the reader's page", err)
	if fmt.Sprint(seen) != "[0 0 0]" {
		t.Errorf("the reader sees [locks outside job:, admin buttons, sessions] = %v, want none", seen)
	}

	// The reader forges the admin call the page did not offer it.
	body := fmt.Sprintf(`{"name":"job:1","lease_id":%q,"token":%d}`, lease, tok)
	req, _ := http.NewRequestWithContext(ctxT(t), http.MethodPost, c.URL+"/ui/api/release", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+readerTok)
	resp, err := c.HTTP.Do(req)
	mustOK(t, "forged release", err)
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || resp.Header.Get("Leasehold-Code") != "permission-denied" {
		t.Errorf("the reader's forged release: HTTP %d %q, want 403 permission-denied", resp.StatusCode, resp.Header.Get("Leasehold-Code"))
	}
	st, err := locks.Status(ctxT(t), connect.NewRequest(&pb.StatusRequest{Name: "job:1"}))
	mustOK(t, "status", err)
	if st.Msg.GetLock().GetHolder().GetToken() != tok {
		t.Fatal("the reader's forged release ended the holding")
	}

	release := fmt.Sprintf(`button[data-action="release:job:1:%s:%d"]`, lease, tok)
	within(t, bctx, 5*time.Second, "log out", chromedp.Click(chromedp.CSS(`#logout`)), chromedp.WaitVisible(chromedp.CSS(`#login`)))
	login("the admin's token shows admin actions", opsTok, chromedp.WaitVisible(chromedp.CSS(release)))
	within(t, bctx, 5*time.Second, "force-release after confirming",
		chromedp.Click(chromedp.CSS(release)),
		chromedp.WaitVisible(chromedp.CSS(release+`.confirm`)),
		chromedp.Click(chromedp.CSS(release+`.confirm`)),
		chromedp.WaitNotPresent(chromedp.CSS(row)))
	st, err = locks.Status(ctxT(t), connect.NewRequest(&pb.StatusRequest{Name: "job:1"}))
	mustOK(t, "status", err)
	if h := st.Msg.GetLock().GetHolder(); h != nil {
		t.Fatalf("job:1 is still held after the force-release: %v", h)
	}
}
