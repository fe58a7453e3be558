package raftnode

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"fmt"
	"io"

	"github.com/leasehold/leasehold/internal/auth"
)

// Who may speak Raft. A Raft connection is a write into the replicated
// state, so every peer proves it is a node of the cluster before it learns
// anything (the cluster id included) or is read:
//
//   - With Config.PeerTLS, both ends present a certificate the configured
//     CA signed, and it must be a node certificate (auth.IsNodeCert, the
//     same test as on the API port): a client certificate of the same CA is
//     refused during the TLS handshake.
//   - With Config.PeerSecret, both ends prove they know the secret with a
//     challenge-response before the hello; the secret never travels:
//
//     dialer   -> acceptor : "LHP1" nonce_d          (32 random bytes)
//     acceptor -> dialer   : "LHP1" nonce_a          (32 random bytes)
//     dialer   -> acceptor : HMAC-SHA256(secret, "leasehold raft dialer"   || nonce_d || nonce_a)
//     acceptor -> dialer   : HMAC-SHA256(secret, "leasehold raft acceptor" || nonce_d || nonce_a)
//
//     The dialer proves itself first, so a caller that does not know the
//     secret gets one random nonce and a closed connection. The proof
//     authenticates the peer, not the bytes that follow: without TLS the
//     traffic itself is neither private nor protected from a machine on
//     the path.
//   - With both, both checks run; with neither, any process that can reach
//     the Raft port is a peer (serve allows that only on a loopback address,
//     or with --insecure).

const (
	proofMagic = "LHP1"
	nonceLen   = 32
)

// errUnproven marks a peer that did not prove it is a node.
var errUnproven = errors.New("raftnode: peer is not a node of this cluster")

// nodeTLS returns a copy of conf that completes a handshake only with a
// peer presenting a verified node certificate, on either end.
func nodeTLS(conf *tls.Config) *tls.Config {
	if conf == nil {
		return nil
	}
	c := conf.Clone()
	c.ClientAuth = tls.RequireAndVerifyClientCert
	prev := c.VerifyConnection
	c.VerifyConnection = func(cs tls.ConnectionState) error {
		if len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
			return fmt.Errorf("%w: no verified certificate", errUnproven)
		}
		if leaf := cs.VerifiedChains[0][0]; !auth.IsNodeCert(leaf) {
			return fmt.Errorf("%w: certificate %q is not a node certificate (leasehold certs create-node)", errUnproven, leaf.Subject.CommonName)
		}
		if prev != nil {
			return prev(cs)
		}
		return nil
	}
	return c
}

// proofMAC is the MAC one end sends: role names the sender.
func proofMAC(secret []byte, role string, nonceD, nonceA []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("leasehold raft " + role))
	m.Write(nonceD)
	m.Write(nonceA)
	return m.Sum(nil)
}

func newNonce() []byte {
	b := make([]byte, nonceLen)
	_, _ = rand.Read(b)
	return b
}

// readProofHead reads "LHP1" and a nonce.
func readProofHead(r io.Reader) ([]byte, error) {
	var b [len(proofMagic) + nonceLen]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return nil, err
	}
	switch string(b[:len(proofMagic)]) {
	case proofMagic:
	case helloMagic:
		return nil, fmt.Errorf("%w: it sent no proof of the node secret (is --node-secret-file the same on every node?)", errUnproven)
	default:
		return nil, fmt.Errorf("not a leasehold raft handshake (first bytes %q)", b[:len(proofMagic)])
	}
	return b[len(proofMagic):], nil
}

// proveDialer runs the dialer's side of the secret proof on rw.
func proveDialer(rw io.ReadWriter, secret []byte) error {
	nonceD := newNonce()
	if _, err := rw.Write(append([]byte(proofMagic), nonceD...)); err != nil {
		return err
	}
	nonceA, err := readProofHead(rw)
	if err != nil {
		return err
	}
	if _, err := rw.Write(proofMAC(secret, "dialer", nonceD, nonceA)); err != nil {
		return err
	}
	got := make([]byte, sha256.Size)
	if _, err := io.ReadFull(rw, got); err != nil {
		return fmt.Errorf("%w: it refused this node's proof of the node secret (%w)", errUnproven, err)
	}
	if !hmac.Equal(got, proofMAC(secret, "acceptor", nonceD, nonceA)) {
		return fmt.Errorf("%w: wrong proof of the node secret", errUnproven)
	}
	return nil
}

// proveAcceptor runs the accepting side of the secret proof on rw.
func proveAcceptor(rw io.ReadWriter, secret []byte) error {
	nonceD, err := readProofHead(rw)
	if err != nil {
		return err
	}
	nonceA := newNonce()
	if _, err := rw.Write(append([]byte(proofMagic), nonceA...)); err != nil {
		return err
	}
	got := make([]byte, sha256.Size)
	if _, err := io.ReadFull(rw, got); err != nil {
		return err
	}
	if !hmac.Equal(got, proofMAC(secret, "dialer", nonceD, nonceA)) {
		return fmt.Errorf("%w: wrong proof of the node secret", errUnproven)
	}
	_, err = rw.Write(proofMAC(secret, "acceptor", nonceD, nonceA))
	return err
}
