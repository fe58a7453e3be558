package main

import (
	"crypto/tls"
	"net"
	"os"

	"github.com/spf13/pflag"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/internal/certs"
	"github.com/leasehold/leasehold/sequencer"
)

// clientTLSFlags are the client commands' TLS flags (global).
type clientTLSFlags struct {
	cacert, cert, key string
}

func (f *clientTLSFlags) add(fs *pflag.FlagSet) {
	fs.StringVar(&f.cacert, "cacert", os.Getenv("LEASEHOLD_CACERT"), "CA certificate (PEM) that verifies the servers; turns TLS on (env LEASEHOLD_CACERT)")
	fs.StringVar(&f.cert, "cert", os.Getenv("LEASEHOLD_CERT"), "client certificate (PEM) for servers that require one; turns TLS on (env LEASEHOLD_CERT)")
	fs.StringVar(&f.key, "key", os.Getenv("LEASEHOLD_KEY"), "key of --cert (PEM) (env LEASEHOLD_KEY)")
}

// dialOptions returns client.WithTLS when any TLS flag is set. An https:// endpoint without
// TLS flags uses the system's roots.
func (f *clientTLSFlags) dialOptions() ([]client.DialOption, error) {
	if f.cacert == "" && f.cert == "" && f.key == "" {
		return nil, nil
	}
	cfg, err := certs.ClientConfig(f.cacert, f.cert, f.key)
	if err != nil {
		return nil, usageErr("%v", err)
	}
	return []client.DialOption{client.WithTLS(cfg)}, nil
}

// serveTLSFlags are serve's TLS flags.
type serveTLSFlags struct {
	cert, key, clientCA string
	insecure            bool
	sequencerKey        string
	peerCert, peerKey   string
	peerCA              string
}

func (f *serveTLSFlags) add(fs *pflag.FlagSet) {
	fs.StringVar(&f.cert, "cert", "", "this node's certificate (PEM): serve the API over TLS only (see: leasehold certs)")
	fs.StringVar(&f.key, "key", "", "key of --cert (PEM)")
	fs.StringVar(&f.clientCA, "client-ca", "", "CA certificate (PEM): require every client (and node) to present a certificate it signed (mutual TLS)")
	fs.BoolVar(&f.insecure, "insecure", false, "allow serving plaintext on a non-loopback address")
	fs.StringVar(&f.peerCert, "peer-cert", "", "this node's certificate (PEM) for Raft peer traffic: run every Raft connection inside mutual TLS")
	fs.StringVar(&f.peerKey, "peer-key", "", "key of --peer-cert (PEM)")
	fs.StringVar(&f.peerCA, "peer-ca", "", "CA certificate (PEM) that signed every peer's --peer-cert")
	fs.StringVar(&f.sequencerKey, "sequencer-key", "", "signer file (leasehold certs create-sequencer-key): sign the grants of sessions that ask for sequencers")
}

// signer loads --sequencer-key (nil without it).
func (f *serveTLSFlags) signer() (*sequencer.Signer, error) {
	if f.sequencerKey == "" {
		return nil, nil
	}
	s, err := sequencer.ReadSignerFile(f.sequencerKey)
	if err != nil {
		return nil, usageErr("--sequencer-key: %v", err)
	}
	return s, nil
}

// config returns the server's TLS configuration and the configuration of its calls to other
// nodes (nil, nil without --cert), after refusing plaintext on a non-loopback listen address.
// The node presents its own certificate to other nodes and verifies theirs with peerCA (the
// global --cacert), or with --client-ca when peerCA is empty.
func (f *serveTLSFlags) config(listen, peerCA string) (server, peer *tls.Config, err error) {
	if f.cert == "" && f.key == "" {
		if f.clientCA != "" {
			return nil, nil, usageErr("--client-ca needs --cert and --key")
		}
		if !f.insecure && !loopback(listen) {
			return nil, nil, usageErr("refusing to serve %s without TLS: give --cert and --key (see: leasehold certs), or --insecure", listen)
		}
		return nil, nil, nil
	}
	server, err = certs.ServerConfig(f.cert, f.key, f.clientCA)
	if err != nil {
		return nil, nil, usageErr("%v", err)
	}
	if peerCA == "" {
		peerCA = f.clientCA
	}
	peer, err = certs.ClientConfig(peerCA, f.cert, f.key)
	if err != nil {
		return nil, nil, usageErr("%v", err)
	}
	return server, peer, nil
}

// raftConfig returns the TLS configuration of Raft peer connections (nil without
// --peer-cert): each node presents its certificate and requires one signed by --peer-ca
// from the other end, in both directions.
func (f *serveTLSFlags) raftConfig(raftAddr string) (*tls.Config, error) {
	if f.peerCert == "" && f.peerKey == "" && f.peerCA == "" {
		if raftAddr != "" && !f.insecure && !loopback(raftAddr) {
			return nil, usageErr("refusing Raft traffic on %s without TLS: give --peer-cert, --peer-key and --peer-ca (see: leasehold certs), or --insecure", raftAddr)
		}
		return nil, nil
	}
	if f.peerCert == "" || f.peerKey == "" || f.peerCA == "" {
		return nil, usageErr("--peer-cert, --peer-key and --peer-ca go together")
	}
	conf, err := certs.ServerConfig(f.peerCert, f.peerKey, f.peerCA)
	if err != nil {
		return nil, usageErr("%v", err)
	}
	client, err := certs.ClientConfig(f.peerCA, f.peerCert, f.peerKey)
	if err != nil {
		return nil, usageErr("%v", err)
	}
	conf.RootCAs = client.RootCAs
	return conf, nil
}

// loopback reports whether the listen address host:port binds only loopback interfaces.
func loopback(listen string) bool {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
