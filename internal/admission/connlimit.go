package admission

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/leasehold/leasehold/api"
)

// Connection limits.
//
// Every connection to the API port is counted from the moment it is
// accepted until it is closed, in time independent of how many are open:
//
//	accept ──► conn-rate-per-address, conns-per-address ──► (TLS) handshakes-per-address, handshakes ──► handshake-timeout
//	                                                                                   │
//	http.Server ◄── (mTLS) conns-per-principal ◄── conns ◄─────── handshake done ◄─────┘
//
// An address is a remote IPv4 address, or the /64 an IPv6 address is in
// (what one host or one site is usually given). Without TLS a connection
// counts toward conns at once. With TLS the listener runs the handshake
// itself, bounded by HandshakeTimeout, before http.Server sees the
// connection: a connection counts toward conns (and, with a verified
// client certificate, toward its principal's share) only once its
// handshake is done, so connections that never finish one cannot fill
// conns; they count toward their address's small handshake budget
// instead, and are closed at the timeout. A connection that proved a node
// certificate counts toward nothing once its handshake is done, so that
// clients cannot lock the nodes out of each other.
//
// A refusal at accept is answered with an HTTP/1.1 429 naming the limit,
// and closed (as the client has not spoken yet, a TLS client sees its
// handshake fail). A connection refused after its handshake is handed to
// http.Server all the same, marked: its first request is answered with
// resource-exhausted naming the limit, in the caller's protocol (gRPC,
// Connect, or an HTTP 429), and the connection is then closed, or after
// refusedConnGrace if no request comes.

// connGate counts the connections of one listener, per address and per
// principal; Limiter.conns holds the node's total.
type connGate struct {
	l *Limiter

	mu          sync.Mutex             // protects following
	addrs       map[netip.Prefix]*addr // per address; no entries without connections
	handshaking int                    // connections in their TLS handshake
	principals  map[string]int         // open connections per principal; no zero entries
}

// addr is what one address holds.
type addr struct {
	open        int // connections counted by conns-per-address, handshaking included
	handshaking int // of which in their TLS handshake
}

func newConnGate(l *Limiter) *connGate {
	return &connGate{l: l, addrs: map[netip.Prefix]*addr{}, principals: map[string]int{}}
}

// addrKey is the address a connection counts under: its IPv4 address, or
// its IPv6 address's /64. Connections without an IP address (a Unix
// socket) share the zero key.
func addrKey(a net.Addr) netip.Prefix {
	ta, ok := a.(*net.TCPAddr)
	if !ok {
		return netip.Prefix{}
	}
	ip := ta.AddrPort().Addr().Unmap().WithZone("")
	if ip.Is4() {
		return netip.PrefixFrom(ip, 32)
	}
	p, _ := ip.Prefix(64)
	return p
}

// addrString names key in a message.
func addrString(key netip.Prefix) string {
	switch {
	case !key.IsValid():
		return "a non-IP address"
	case key.Addr().Is4():
		return key.Addr().String()
	}
	return key.String()
}

// gatedConnState is what one connection holds; the gate's mu protects it.
type gatedConnState struct {
	key         netip.Prefix
	addr        bool   // holds a place of its address
	handshaking bool   // holds a handshake place
	conn        bool   // holds a place of conns
	principal   string // holds a place of this principal ("": none)
}

// admit counts a connection of key just accepted, or refuses it: the
// returned name is the limit that refused it ("" when admitted) and msg
// says why. With handshake it waits for its TLS handshake; without it
// counts toward conns at once.
func (g *connGate) admit(key netip.Prefix, handshake bool) (st *gatedConnState, name, msg string) {
	c := &g.l.cfg
	// Every connection accepted is charged, refused or not: accepting it
	// is what the rate bounds. The meter's lock is not held under g.mu.
	if err := g.l.meters.connOpens.take(addrString(key), 1); err != nil {
		return nil, "conn-rate-per-address", err.Message
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	a := g.addrs[key]
	if a == nil {
		a = &addr{}
	}
	if c.ConnsPerAddress > 0 && a.open >= c.ConnsPerAddress {
		return nil, "conns-per-address", Exhausted("conns-per-address", "%d connections from %s are open on this node, the limit", a.open, addrString(key)).Message
	}
	st = &gatedConnState{key: key, addr: true}
	if handshake {
		if c.HandshakesPerAddress > 0 && a.handshaking >= c.HandshakesPerAddress {
			return nil, "handshakes-per-address", Exhausted("handshakes-per-address", "%d connections from %s are in their TLS handshake on this node, the limit", a.handshaking, addrString(key)).Message
		}
		if c.Handshakes > 0 && g.handshaking >= c.Handshakes {
			return nil, "handshakes", Exhausted("handshakes", "%d connections are in their TLS handshake on this node, the limit", g.handshaking).Message
		}
		a.handshaking++
		g.handshaking++
		st.handshaking = true
	} else {
		if name, msg := g.enterConnsLocked(); name != "" {
			return nil, name, msg
		}
		st.conn = true
	}
	a.open++
	g.addrs[key] = a
	return st, "", ""
}

// enterConnsLocked takes a place of conns, or refuses.
func (g *connGate) enterConnsLocked() (name, msg string) {
	max := int64(g.l.cfg.Conns)
	if max <= 0 {
		return "", ""
	}
	if g.l.conns.Add(1) > max {
		g.l.conns.Add(-1)
		return "conns", Exhausted("conns", "%d connections are open on this node, the limit", max).Message
	}
	return "", ""
}

// handshaken moves st, whose TLS handshake is done, from its address's
// handshake budget to conns and the share of principal (a verified client
// certificate's principal, "" for none), or refuses it (it then keeps its
// address's place until closed). A node (a node certificate) gives back
// its places and counts toward nothing.
func (g *connGate) handshaken(st *gatedConnState, principal string, node bool) (name, msg string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.leaveHandshakeLocked(st)
	if node {
		g.leaveAddrLocked(st)
		return "", ""
	}
	if name, msg := g.enterConnsLocked(); name != "" {
		return name, msg
	}
	st.conn = true
	if max := g.l.cfg.ConnsPerPrincipal; principal != "" && max > 0 {
		if n := g.principals[principal]; n >= max {
			return "conns-per-principal", Exhausted("conns-per-principal", "principal %s has %d connections open on this node, the limit", principal, n).Message
		}
		g.principals[principal]++
		st.principal = principal
	}
	return "", ""
}

// release gives back every place st holds.
func (g *connGate) release(st *gatedConnState) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.leaveHandshakeLocked(st)
	g.leaveAddrLocked(st)
	if st.conn {
		st.conn = false
		if g.l.cfg.Conns > 0 {
			g.l.conns.Add(-1)
		}
	}
	if p := st.principal; p != "" {
		st.principal = ""
		if g.principals[p]--; g.principals[p] <= 0 {
			delete(g.principals, p)
		}
	}
}

func (g *connGate) leaveHandshakeLocked(st *gatedConnState) {
	if !st.handshaking {
		return
	}
	st.handshaking = false
	g.handshaking--
	if a := g.addrs[st.key]; a != nil {
		a.handshaking--
	}
}

func (g *connGate) leaveAddrLocked(st *gatedConnState) {
	if !st.addr {
		return
	}
	st.addr = false
	if a := g.addrs[st.key]; a != nil {
		if a.open--; a.open <= 0 {
			delete(g.addrs, st.key)
		}
	}
}

// refuseAccepted answers a connection refused at accept with an HTTP/1.1
// 429 that carries msg, and closes it.
func refuseAccepted(c net.Conn, msg string) {
	_ = c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
	write429(c, msg)
	_ = c.Close()
}

func write429(w io.Writer, msg string) {
	body := "resource-exhausted: " + msg + "\n"
	_, _ = fmt.Fprintf(w, "HTTP/1.1 429 Too Many Requests\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
}

// Listen applies the connection limits to hs and ln: the listener it
// returns counts every connection and, when conf is not nil, completes
// its TLS handshake with conf (bounded by handshake-timeout) before
// hs sees it. isNode tells a node certificate, which counts toward
// nothing once its handshake is done; log reports failed handshakes.
func (l *Limiter) Listen(hs *http.Server, ln net.Listener, conf *tls.Config, isNode func(*x509.Certificate) bool, log *slog.Logger) (*http.Server, net.Listener) {
	c := l.cfg
	hs.ReadHeaderTimeout = c.ReadHeaderTimeout
	hs.IdleTimeout = c.IdleTimeout
	hs.ConnContext = connContext
	g := newConnGate(l)
	if conf != nil {
		return hs, newHandshakeListener(ln, g, conf, isNode, c.HandshakeTimeout, log)
	}
	return hs, readBufferedListener{&connLimiter{Listener: ln, g: g}}
}

// connLimiter counts the connections of a cleartext listener as they are
// accepted, and refuses those beyond conns-per-address or conns.
type connLimiter struct {
	net.Listener
	g *connGate
}

func (cl *connLimiter) Accept() (net.Conn, error) {
	for {
		c, err := cl.Listener.Accept()
		if err != nil {
			return nil, err
		}
		st, name, msg := cl.g.admit(addrKey(c.RemoteAddr()), false)
		if name == "" {
			return &countedConn{Conn: c, st: st, gate: cl.g}, nil
		}
		cl.g.l.refuse(name)
		refuseAccepted(c, msg)
	}
}

// countedConn is one counted connection; it gives its places back when
// closed.
type countedConn struct {
	net.Conn
	st      *gatedConnState
	gate    *connGate
	once    sync.Once
	refused *refusedConn // set, before Accept returns it, on a connection refused after its handshake
}

func (c *countedConn) Close() error {
	c.once.Do(func() { c.gate.release(c.st) })
	return c.Conn.Close()
}

// handshakeListener accepts TLS connections: it counts each as it is
// accepted, runs its handshake (bounded by timeout) in a goroutine of its
// own, counts it again once the handshake is done and only then hands it
// to Accept, a *tls.Conn whose handshake is complete (so http.Server
// reads its negotiated protocol and client certificate as usual).
type handshakeListener struct {
	net.Listener
	g       *connGate
	conf    *tls.Config
	isNode  func(*x509.Certificate) bool
	timeout time.Duration
	log     *slog.Logger

	ready  chan *tls.Conn  // handshaken connections for Accept
	ctx    context.Context // ends at Close: pending handshakes stop
	cancel context.CancelFunc
	wg     sync.WaitGroup // the accept loop and the handshakes
	closed sync.Once
	done   chan struct{} // closed when the accept loop ends
	err    error         // why it ended; set before done is closed
}

func newHandshakeListener(ln net.Listener, g *connGate, conf *tls.Config, isNode func(*x509.Certificate) bool, timeout time.Duration, log *slog.Logger) *handshakeListener {
	ctx, cancel := context.WithCancel(context.Background())
	hl := &handshakeListener{Listener: ln, g: g, conf: conf, isNode: isNode, timeout: timeout, log: log,
		ready: make(chan *tls.Conn), ctx: ctx, cancel: cancel, done: make(chan struct{})}
	hl.wg.Go(hl.acceptLoop)
	return hl
}

func (hl *handshakeListener) Accept() (net.Conn, error) {
	select {
	case c := <-hl.ready:
		return c, nil
	case <-hl.done:
		return nil, hl.err
	}
}

// Close stops accepting, ends the handshakes in progress and waits for
// them. It is idempotent.
func (hl *handshakeListener) Close() error {
	var err error
	hl.closed.Do(func() {
		hl.cancel()
		err = hl.Listener.Close()
		hl.wg.Wait()
	})
	return err
}

// acceptLoop accepts raw connections until the listener fails or closes.
func (hl *handshakeListener) acceptLoop() {
	defer close(hl.done)
	var backoff time.Duration
	for {
		c, err := hl.Listener.Accept()
		if err != nil {
			var te interface{ Temporary() bool }
			if errors.As(err, &te) && te.Temporary() && hl.ctx.Err() == nil {
				// As http.Server does: out of descriptors, say.
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				select {
				case <-time.After(backoff):
				case <-hl.ctx.Done():
				}
				continue
			}
			hl.err = err
			return
		}
		backoff = 0
		st, name, msg := hl.g.admit(addrKey(c.RemoteAddr()), true)
		if name != "" {
			hl.g.l.refuse(name)
			refuseAccepted(c, msg)
			continue
		}
		gc := &countedConn{Conn: c, st: st, gate: hl.g}
		hl.wg.Go(func() { hl.handshake(gc) })
	}
}

// handshake runs c's TLS handshake and passes it to Accept, or closes it.
func (hl *handshakeListener) handshake(c *countedConn) {
	ctx := hl.ctx
	if hl.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, hl.timeout)
		defer cancel()
	}
	tc := tls.Server(c, hl.conf)
	if err := tc.HandshakeContext(ctx); err != nil {
		var re tls.RecordHeaderError
		if errors.As(err, &re) && re.Conn != nil && looksLikeHTTP(re.RecordHeader) {
			_ = re.Conn.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
			_, _ = io.WriteString(re.Conn, "HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n")
		}
		if hl.ctx.Err() == nil {
			hl.log.Warn("TLS handshake failed", "remote", c.RemoteAddr().String(), "err", err)
		}
		_ = tc.Close()
		return
	}
	st := tc.ConnectionState()
	principal, node := certPrincipal(st, hl.isNode)
	if name, msg := hl.g.handshaken(c.st, principal, node); name != "" {
		hl.g.l.refuse(name)
		var once sync.Once
		closeConn := func() { once.Do(func() { _ = tc.Close() }) }
		c.refused = &refusedConn{err: &api.Error{Code: api.CodeResourceExhausted, Message: msg}, close: closeConn}
		time.AfterFunc(refusedConnGrace, closeConn)
	}
	select {
	case hl.ready <- tc:
	case <-hl.ctx.Done():
		_ = tc.Close()
	}
}

// certPrincipal is the principal of a verified client certificate (as
// the per-principal limits name it, "user:NAME"; "" without one), or
// node when it is a node certificate (isNode).
func certPrincipal(st tls.ConnectionState, isNode func(*x509.Certificate) bool) (principal string, node bool) {
	if len(st.VerifiedChains) == 0 || len(st.VerifiedChains[0]) == 0 {
		return "", false
	}
	c := st.VerifiedChains[0][0]
	if isNode(c) {
		return "", true
	}
	return "user:" + c.Subject.CommonName, false
}

// refusedConn is the refusal of a connection whose handshake is done,
// delivered as the answer to its first request (ConnRefusal) and
// carried in its requests' context.
type refusedConn struct {
	err   *api.Error
	close func() // closes the connection (once)
}

type refusedConnKey struct{}

// connContext is http.Server.ConnContext: a connection refused after its
// handshake carries its refusal into its requests.
func connContext(ctx context.Context, c net.Conn) context.Context {
	if tc, ok := c.(*tls.Conn); ok {
		if cc, ok := tc.NetConn().(*countedConn); ok && cc.refused != nil {
			return context.WithValue(ctx, refusedConnKey{}, cc.refused)
		}
	}
	return ctx
}

// ConnRefusal answers every request on a connection refused after its
// handshake with its refusal, resource-exhausted in the caller's protocol
// (an HTTP 429 for a plain HTTP client), and then closes the connection:
// HTTP/1.1 with the response, HTTP/2 a moment after it.
func ConnRefusal(h http.Handler) http.Handler {
	ew := connect.NewErrorWriter()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc, ok := r.Context().Value(refusedConnKey{}).(*refusedConn)
		if !ok {
			h.ServeHTTP(w, r)
			return
		}
		if r.ProtoMajor == 1 {
			w.Header().Set("Connection", "close")
		}
		if ew.IsSupported(r) {
			_ = ew.Write(w, r, api.ToConnect(rc.err))
		} else {
			http.Error(w, string(rc.err.Code)+": "+rc.err.Message, http.StatusTooManyRequests)
		}
		if r.ProtoMajor > 1 {
			time.AfterFunc(refusedConnLinger, rc.close)
		}
	})
}

// refusedConnLinger is how long an HTTP/2 connection refused after its
// handshake stays open once its first request was answered, for the
// answer to reach the client.
const refusedConnLinger = 100 * time.Millisecond

// refusedConnGrace closes a connection refused after its handshake that
// sends no request.
const refusedConnGrace = 5 * time.Second

// looksLikeHTTP reports whether a TLS record header is the start of a
// cleartext HTTP request.
func looksLikeHTTP(hdr [5]byte) bool {
	switch string(hdr[:]) {
	case "GET /", "HEAD ", "POST ", "PUT /", "OPTIO":
		return true
	}
	return false
}

// connReadBuffer is the read buffer of a cleartext connection.
const connReadBuffer = 1024

// readBufferedListener gives every cleartext connection a small read
// buffer. The HTTP/2 server reads each frame from its connection with two
// reads, the 9-byte header and then the payload, and without a buffer each
// is a system call of its own: at 64 concurrent lock operations on a lock
// stream those reads were an eighth of the server's CPU. With the buffer
// the header's read brings in the payload and the frames behind it. (A TLS
// connection reads whole records into a buffer of its own already.) An
// idle connection holds connReadBuffer bytes more.
type readBufferedListener struct{ net.Listener }

func (l readBufferedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &readBufferedConn{Conn: c, r: bufio.NewReaderSize(c, connReadBuffer)}, nil
}

type readBufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *readBufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }
