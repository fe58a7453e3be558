package raftnode

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// The Raft stream layer: every connection between two nodes starts with a
// handshake in which both ends name their cluster id and node id, before
// raft's own protocol. The end that accepts answers with a status; either
// end closes the connection when the other belongs to another cluster, so
// a node of another (or a forked) cluster can neither replicate to nor
// vote in this one.
//
//	dialer   -> acceptor : hello{status ok, cluster id, node id}
//	acceptor -> dialer   : hello{status ok | refused, cluster id, node id}
//
// A hello is the 4-byte magic "LHR1", a status byte, and the cluster id and
// the node id, each preceded by its length in one byte.
//
// A node about to found a cluster from a list of several voters first
// probes every voter of the list (status probe): a peer of the same cluster
// answers formed when its log holds more than the founding configuration,
// ok otherwise (see found.go). Probe and answer are each followed by the
// sender's founding nonce (foundingNonceLen bytes, zero when it has none).
// A probe connection is closed after the answer.
//
// Before the hello, each end proves it is a node (peerauth.go): with a TLS
// config the hello runs inside mutual TLS with node certificates, and with
// a secret it follows a challenge-response over it. A peer that proves
// nothing learns nothing, not even the cluster id.

const helloMagic = "LHR1"

const (
	helloOK      byte = 0
	helloRefused byte = 1
	helloProbe   byte = 2 // dialer: was this cluster formed?
	helloFormed  byte = 3 // acceptor: yes, my log holds more than its founding
)

// errProbed ends a probe connection on the accepting side.
var errProbed = errors.New("raftnode: founding probe answered")

// handshakeTimeout bounds the handshake on an accepted connection.
const handshakeTimeout = 5 * time.Second

type hello struct {
	status    byte
	clusterID string
	nodeID    string
}

func (h hello) encode() []byte {
	b := make([]byte, 0, len(helloMagic)+3+len(h.clusterID)+len(h.nodeID))
	b = append(b, helloMagic...)
	b = append(b, h.status, byte(len(h.clusterID)))
	b = append(b, h.clusterID...)
	b = append(b, byte(len(h.nodeID)))
	return append(b, h.nodeID...)
}

func readHello(r io.Reader) (hello, error) {
	var head [6]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return hello{}, fmt.Errorf("read handshake: %w", err)
	}
	if string(head[:4]) == proofMagic {
		return hello{}, fmt.Errorf("%w: it proves a node secret; this node has none (is --node-secret-file the same on every node?)", errUnproven)
	}
	if string(head[:4]) != helloMagic {
		return hello{}, fmt.Errorf("not a leasehold raft handshake (first bytes %q)", head[:4])
	}
	h := hello{status: head[4]}
	cid := make([]byte, head[5])
	if _, err := io.ReadFull(r, cid); err != nil {
		return hello{}, fmt.Errorf("read handshake: %w", err)
	}
	var n [1]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return hello{}, fmt.Errorf("read handshake: %w", err)
	}
	nid := make([]byte, n[0])
	if _, err := io.ReadFull(r, nid); err != nil {
		return hello{}, fmt.Errorf("read handshake: %w", err)
	}
	h.clusterID, h.nodeID = string(cid), string(nid)
	return h, nil
}

// streamLayer is a raft.StreamLayer over TCP (optionally TLS) that checks
// the cluster id of every connection.
type streamLayer struct {
	ln        net.Listener
	advertise string      // the configured address; "" when its port was 0
	tls       *tls.Config // nil: plain TCP; else accepts node certificates only
	secret    []byte      // nil: no proof of a shared secret
	self      hello
	logger    *slog.Logger
	// formed reports whether this node holds more of the cluster than its
	// founding configuration; nil answers no.
	formed func() bool
	// founding is this process's founding (found.go); nil: it founded
	// nothing since it started.
	founding *founding

	mu       sync.Mutex // protects following
	accepted map[*acceptedConn]struct{}
	closed   bool
}

var _ raft.StreamLayer = (*streamLayer)(nil)

// newStreamLayer listens on addr. addr must be an address peers can dial
// (not 0.0.0.0): raft advertises it. With tlsConf, peers must present node
// certificates; with secret, peers must prove they know it.
func newStreamLayer(addr string, tlsConf *tls.Config, secret []byte, clusterID, nodeID string, logger *slog.Logger) (*streamLayer, error) {
	if len(clusterID) > 255 || len(nodeID) > 255 {
		return nil, errors.New("raftnode: cluster id or node id longer than 255 bytes")
	}
	tcp, err := net.ResolveTCPAddr("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("raftnode: raft address: %w", err)
	}
	if tcp.IP == nil || tcp.IP.IsUnspecified() {
		return nil, fmt.Errorf("raftnode: raft address %q is not one peers can reach; give a specific host", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("raftnode: raft transport: %w", err)
	}
	advertise := addr
	if tcp.Port == 0 {
		advertise = ""
	}
	return &streamLayer{ln: ln, advertise: advertise, tls: nodeTLS(tlsConf), secret: secret, self: hello{status: helloOK, clusterID: clusterID, nodeID: nodeID}, logger: logger, accepted: map[*acceptedConn]struct{}{}}, nil
}

// Accept returns the next connection; its handshake runs on its first
// Read or Write, so one slow peer does not hold up the others.
func (s *streamLayer) Accept() (net.Conn, error) {
	c, err := s.ln.Accept()
	if err != nil {
		return nil, err
	}
	if s.tls != nil {
		c = tls.Server(c, s.tls)
	}
	ac := &acceptedConn{Conn: c, s: s}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		_ = c.Close()
		return nil, net.ErrClosed
	}
	s.accepted[ac] = struct{}{}
	return ac, nil
}

// Close stops accepting and closes every accepted connection (raft's
// transport leaves their handlers blocked in Read otherwise).
func (s *streamLayer) Close() error {
	s.mu.Lock()
	s.closed = true
	conns := s.accepted
	s.accepted = map[*acceptedConn]struct{}{}
	s.mu.Unlock()
	for c := range conns {
		_ = c.Conn.Close()
	}
	return s.ln.Close()
}

// Addr is the address raft advertises for this node: the address it was
// given (a DNS name stays a name, so a peer whose IP changes is still
// found), or the listener's when the port was 0.
func (s *streamLayer) Addr() net.Addr {
	if s.advertise != "" {
		return advertisedAddr(s.advertise)
	}
	return s.ln.Addr()
}

// advertisedAddr is a raft address as configured (host:port).
type advertisedAddr string

func (a advertisedAddr) Network() string { return "tcp" }
func (a advertisedAddr) String() string  { return string(a) }

// Dial connects to a peer and runs the handshake before returning.
func (s *streamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	d := net.Dialer{Timeout: timeout}
	c, err := d.Dial("tcp", string(address))
	if err != nil {
		return nil, err
	}
	_ = c.SetDeadline(time.Now().Add(timeout))
	c = s.clientConn(c, string(address))
	peer, err := s.dialHandshake(c)
	if err != nil {
		_ = c.Close()
		s.logger.Log(context.Background(), refusalLevel(err), "raft connection refused", "peer_addr", address, "peer_node", peer.nodeID, "peer_cluster", peer.clusterID, "cluster", s.self.clusterID, "err", err)
		return nil, err
	}
	_ = c.SetDeadline(time.Time{})
	return c, nil
}

// clientConn wraps an outgoing connection in TLS when configured; the
// server name defaults to the host dialed.
func (s *streamLayer) clientConn(c net.Conn, address string) net.Conn {
	if s.tls == nil {
		return c
	}
	conf := s.tls
	if conf.ServerName == "" && !conf.InsecureSkipVerify {
		conf = conf.Clone()
		conf.ServerName, _, _ = net.SplitHostPort(address)
	}
	return tls.Client(c, conf)
}

// probeAnswer is what a founding probe learnt from one peer.
type probeAnswer struct {
	answered     bool   // the peer answered (in this cluster or another)
	formed       bool   // the peer's log holds more than the founding configuration
	otherCluster string // the peer is in this other cluster
	nonce        nonce  // the founding nonce the peer answered with
}

// probe asks the peer at address whether this cluster was formed (see
// found.go). A peer that cannot be reached, or whose answer makes no
// sense, has not answered.
func (s *streamLayer) probe(address string, timeout time.Duration) probeAnswer {
	d := net.Dialer{Timeout: timeout}
	c, err := d.Dial("tcp", address)
	if err != nil {
		return probeAnswer{}
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	c = s.clientConn(c, address)
	if s.secret != nil && proveDialer(c, s.secret) != nil {
		return probeAnswer{}
	}
	q := s.self
	q.status = helloProbe
	if _, err := c.Write(append(q.encode(), s.founding.ownNonce()...)); err != nil {
		return probeAnswer{}
	}
	peer, err := readHello(c)
	if err != nil {
		return probeAnswer{}
	}
	if peer.clusterID != s.self.clusterID {
		return probeAnswer{otherCluster: peer.clusterID}
	}
	var a probeAnswer
	if _, err := io.ReadFull(c, a.nonce[:]); err != nil {
		return probeAnswer{}
	}
	switch peer.status {
	case helloFormed:
		a.answered, a.formed = true, true
	case helloOK:
		a.answered = true
	default:
		return probeAnswer{}
	}
	return a
}

func (s *streamLayer) dialHandshake(c net.Conn) (hello, error) {
	if s.secret != nil {
		if err := proveDialer(c, s.secret); err != nil {
			return hello{}, fmt.Errorf("raftnode: handshake: %w", err)
		}
	}
	if _, err := c.Write(s.self.encode()); err != nil {
		return hello{}, fmt.Errorf("raftnode: handshake: %w", err)
	}
	peer, err := readHello(c)
	if err != nil {
		return hello{}, fmt.Errorf("raftnode: handshake: %w", err)
	}
	if peer.status != helloOK || peer.clusterID != s.self.clusterID {
		return peer, fmt.Errorf("%w: peer %q is in cluster %q, this node %q is in %q", ErrClusterMismatch, peer.nodeID, peer.clusterID, s.self.nodeID, s.self.clusterID)
	}
	return peer, nil
}

// refusalLevel is WARN for a handshake that was refused or made no sense,
// DEBUG for a connection that merely closed (a peer or this node stopping).
func refusalLevel(err error) slog.Level {
	if errors.Is(err, errUnproven) {
		return slog.LevelWarn
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) {
		return slog.LevelDebug
	}
	return slog.LevelWarn
}

// acceptedConn is an accepted connection whose handshake runs once, on
// first use; a refused handshake fails every Read and Write.
type acceptedConn struct {
	net.Conn
	s    *streamLayer
	once sync.Once
	err  error // written once, inside once
}

func (c *acceptedConn) handshake() error {
	c.once.Do(func() {
		_ = c.Conn.SetDeadline(time.Now().Add(handshakeTimeout))
		var peer hello
		err := c.prove()
		if err == nil {
			peer, err = readHello(c.Conn)
		}
		if err != nil {
			c.err = fmt.Errorf("raftnode: handshake: %w", err)
		} else {
			reply := c.s.self
			if peer.status == helloProbe && peer.clusterID == c.s.self.clusterID {
				c.err = errProbed
				var theirs nonce
				if _, err := io.ReadFull(c.Conn, theirs[:]); err == nil {
					if c.s.formed != nil && c.s.formed() && !c.s.founding.cofounder(peer.nodeID, theirs) {
						reply.status = helloFormed
					}
					_, _ = c.Conn.Write(append(reply.encode(), c.s.founding.ownNonce()...))
				}
				_ = c.Conn.Close()
				return
			}
			if peer.clusterID != c.s.self.clusterID {
				reply.status = helloRefused
				c.err = fmt.Errorf("%w: peer %q is in cluster %q, this node %q is in %q", ErrClusterMismatch, peer.nodeID, peer.clusterID, c.s.self.nodeID, c.s.self.clusterID)
			}
			if _, werr := c.Conn.Write(reply.encode()); werr != nil && c.err == nil {
				c.err = fmt.Errorf("raftnode: handshake: %w", werr)
			}
		}
		if c.err != nil {
			c.s.logger.Log(context.Background(), refusalLevel(c.err), "raft connection refused", "peer_addr", c.Conn.RemoteAddr().String(), "peer_node", peer.nodeID, "peer_cluster", peer.clusterID, "cluster", c.s.self.clusterID, "err", c.err)
			_ = c.Conn.Close()
			return
		}
		_ = c.Conn.SetDeadline(time.Time{})
	})
	return c.err
}

// prove checks that the peer is a node before anything is read from it or
// told to it: the TLS handshake (node certificates only) and the proof of
// the secret.
func (c *acceptedConn) prove() error {
	if tc, ok := c.Conn.(*tls.Conn); ok {
		if err := tc.Handshake(); err != nil {
			return err
		}
	}
	if c.s.secret != nil {
		return proveAcceptor(c.Conn, c.s.secret)
	}
	return nil
}

// Close closes the connection and forgets it.
func (c *acceptedConn) Close() error {
	c.s.mu.Lock()
	delete(c.s.accepted, c)
	c.s.mu.Unlock()
	return c.Conn.Close()
}

func (c *acceptedConn) Read(p []byte) (int, error) {
	if err := c.handshake(); err != nil {
		return 0, err
	}
	return c.Conn.Read(p)
}

func (c *acceptedConn) Write(p []byte) (int, error) {
	if err := c.handshake(); err != nil {
		return 0, err
	}
	return c.Conn.Write(p)
}
