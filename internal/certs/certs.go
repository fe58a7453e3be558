// Package certs is leasehold's local certificate authority for development and small
// deployments (`leasehold certs create-ca|create-node|create-client`, in the spirit of
// `cockroach cert` and `consul tls`), and the TLS configurations the server and the CLI build
// from its files.
//
// One directory (--certs-dir) holds:
//
//	ca.crt, ca.key                 the CA (self-signed; ca.key never leaves this directory)
//	node.crt, node.key             a node's certificate: server AND client auth (nodes call each
//	                               other), SANs from --host (DNS names or IP addresses)
//	client.NAME.crt, client.NAME.key  a client certificate with CN=NAME: the principal NAME
//	sequencer.key, sequencer-keys.json  the cluster's sequencer signing keys (0600) and their
//	                               public key set (CreateSequencerKey)
//
// Keys are ECDSA P-256 (default) or Ed25519, PKCS#8 PEM, mode 0600; certificates are PEM,
// mode 0644. Nothing is overwritten unless Options.Overwrite is set, and a refused command
// writes nothing.
package certs

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/leasehold/leasehold/internal/auth"
)

// File names inside the certs directory.
const (
	CACert   = "ca.crt"
	CAKey    = "ca.key"
	NodeCert = "node.crt"
	NodeKey  = "node.key"
)

// ClientCert and ClientKey return the file names of the client certificate for principal name.
func ClientCert(name string) string { return "client." + name + ".crt" }

// ClientKey returns the file name of the client key for principal name.
func ClientKey(name string) string { return "client." + name + ".key" }

// Key types.
const (
	KeyECDSA   = "ecdsa"   // ECDSA P-256
	KeyEd25519 = "ed25519" // Ed25519
)

// Defaults.
const (
	DefaultCALifetime   = 10 * 365 * 24 * time.Hour
	DefaultCertLifetime = 365 * 24 * time.Hour
	// backdate is how far before now a certificate becomes valid, for clocks a little behind.
	backdate = time.Hour
)

// Sentinel errors.
var (
	// ErrExists means a file to be written exists and Options.Overwrite is not set. Nothing
	// was written.
	ErrExists = errors.New("certs: file exists (use --overwrite to replace it)")
	// ErrInvalid means an option or argument is invalid (key type, lifetime, host, name).
	ErrInvalid = errors.New("certs: invalid argument")
	// ErrNoCA means the CA files are missing or unreadable; create the CA first.
	ErrNoCA = errors.New("certs: no CA (run create-ca first)")
)

// Options configure every command.
type Options struct {
	// Dir is the certs directory; created (0700) when missing.
	Dir string
	// KeyType is KeyECDSA (default when empty) or KeyEd25519.
	KeyType string
	// Lifetime of the certificate; 0 uses DefaultCALifetime or DefaultCertLifetime.
	Lifetime time.Duration
	// Overwrite replaces existing files.
	Overwrite bool
	// Now is the clock (time.Now when nil): certificates are valid from Now()−1h to
	// Now()+Lifetime.
	Now func() time.Time
}

func (o Options) validate() error {
	switch o.KeyType {
	case "", KeyECDSA, KeyEd25519:
	default:
		return fmt.Errorf("%w: key type %q: want %q or %q", ErrInvalid, o.KeyType, KeyECDSA, KeyEd25519)
	}
	if o.Lifetime < 0 {
		return fmt.Errorf("%w: lifetime %v is negative", ErrInvalid, o.Lifetime)
	}
	if o.Dir == "" {
		return fmt.Errorf("%w: no certs directory", ErrInvalid)
	}
	return nil
}

func (o Options) now() time.Time {
	if o.Now != nil {
		return o.Now()
	}
	return time.Now()
}

func (o Options) lifetime(def time.Duration) time.Duration {
	if o.Lifetime > 0 {
		return o.Lifetime
	}
	return def
}

func (o Options) newKey() (crypto.Signer, error) {
	if o.KeyType == KeyEd25519 {
		_, k, err := ed25519.GenerateKey(rand.Reader)
		return k, err
	}
	return ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
}

// CreateCA creates ca.crt and ca.key in o.Dir.
func CreateCA(o Options) error {
	if err := o.validate(); err != nil {
		return err
	}
	if err := o.refuseExisting(CACert, CAKey); err != nil {
		return err
	}
	key, err := o.newKey()
	if err != nil {
		return fmt.Errorf("certs: generate CA key: %w", err)
	}
	tmpl, err := o.template("leasehold CA", o.lifetime(DefaultCALifetime))
	if err != nil {
		return err
	}
	tmpl.IsCA = true
	tmpl.BasicConstraintsValid = true
	tmpl.MaxPathLenZero = true
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return fmt.Errorf("certs: create CA certificate: %w", err)
	}
	return o.writePair(CACert, CAKey, der, key)
}

// CreateNode creates node.crt and node.key, signed by the CA in o.Dir, valid for hosts (DNS
// names or IP addresses; at least one) as server and as client.
func CreateNode(o Options, hosts []string) error {
	if err := o.validate(); err != nil {
		return err
	}
	if len(hosts) == 0 {
		return fmt.Errorf("%w: a node certificate needs at least one --host", ErrInvalid)
	}
	tmpl, err := o.template("node", o.lifetime(DefaultCertLifetime))
	if err != nil {
		return err
	}
	for _, h := range hosts {
		switch ip := net.ParseIP(h); {
		case ip != nil:
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		case validDNSName(h):
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		default:
			return fmt.Errorf("%w: host %q is neither an IP address nor a DNS name", ErrInvalid, h)
		}
	}
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	return o.issue(tmpl, NodeCert, NodeKey)
}

// CreateClient creates client.NAME.crt and client.NAME.key with CN=name (the principal),
// signed by the CA in o.Dir, for client auth only. name is a principal name
// (auth.ValidPrincipal): 1..64 of A-Z a-z 0-9 . _ - @, not starting with '.', not "node".
func CreateClient(o Options, name string) error {
	if err := o.validate(); err != nil {
		return err
	}
	if !auth.ValidPrincipal(name) {
		return fmt.Errorf("%w: client name %q: want 1..64 of A-Z a-z 0-9 . _ - @, not starting with '.', not %q", ErrInvalid, name, auth.NodeName)
	}
	tmpl, err := o.template(name, o.lifetime(DefaultCertLifetime))
	if err != nil {
		return err
	}
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	return o.issue(tmpl, ClientCert(name), ClientKey(name))
}

func (o Options) template(cn string, lifetime time.Duration) (*x509.Certificate, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("certs: serial: %w", err)
	}
	now := o.now()
	return &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn, Organization: []string{"leasehold"}},
		NotBefore:    now.Add(-backdate),
		NotAfter:     now.Add(lifetime),
		KeyUsage:     x509.KeyUsageDigitalSignature,
	}, nil
}

// issue signs tmpl with the CA of o.Dir and writes the pair.
func (o Options) issue(tmpl *x509.Certificate, certFile, keyFile string) error {
	if err := o.refuseExisting(certFile, keyFile); err != nil {
		return err
	}
	ca, caKey, err := loadCA(o.Dir)
	if err != nil {
		return err
	}
	key, err := o.newKey()
	if err != nil {
		return fmt.Errorf("certs: generate key: %w", err)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), caKey)
	if err != nil {
		return fmt.Errorf("certs: sign %s: %w", certFile, err)
	}
	return o.writePair(certFile, keyFile, der, key)
}

func loadCA(dir string) (*x509.Certificate, crypto.Signer, error) {
	certPEM, err := os.ReadFile(filepath.Join(dir, CACert))
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrNoCA, err)
	}
	keyPEM, err := os.ReadFile(filepath.Join(dir, CAKey))
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrNoCA, err)
	}
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || cb.Type != "CERTIFICATE" || kb == nil || kb.Type != "PRIVATE KEY" {
		return nil, nil, fmt.Errorf("%w: %s or %s is not PEM of the expected type", ErrNoCA, CACert, CAKey)
	}
	ca, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %s: %v", ErrNoCA, CACert, err)
	}
	k, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %s: %v", ErrNoCA, CAKey, err)
	}
	signer, ok := k.(crypto.Signer)
	if !ok || !ca.IsCA {
		return nil, nil, fmt.Errorf("%w: %s is not a CA certificate with a signing key", ErrNoCA, CACert)
	}
	return ca, signer, nil
}

func (o Options) refuseExisting(files ...string) error {
	if o.Overwrite {
		return nil
	}
	for _, f := range files {
		p := filepath.Join(o.Dir, f)
		if _, err := os.Lstat(p); err == nil {
			return fmt.Errorf("%w: %s", ErrExists, p)
		}
	}
	return nil
}

// writePair writes the certificate (0644) and key (0600), each through a temporary file that is
// linked into place (refusing an existing file) or, with Overwrite, renamed over it.
func (o Options) writePair(certFile, keyFile string, der []byte, key crypto.Signer) error {
	if err := os.MkdirAll(o.Dir, 0o700); err != nil {
		return fmt.Errorf("certs: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return fmt.Errorf("certs: encode key: %w", err)
	}
	if err := o.writeFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return err
	}
	if err := o.writeFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		_ = os.Remove(filepath.Join(o.Dir, keyFile))
		return err
	}
	return nil
}

func (o Options) writeFile(name string, data []byte, mode os.FileMode) error {
	final := filepath.Join(o.Dir, name)
	f, err := os.CreateTemp(o.Dir, "."+name+".tmp*")
	if err != nil {
		return fmt.Errorf("certs: %w", err)
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	if err := f.Chmod(mode); err != nil {
		_ = f.Close()
		return fmt.Errorf("certs: %w", err)
	}
	if _, err := f.Write(data); err != nil {
		_ = f.Close()
		return fmt.Errorf("certs: write %s: %w", final, err)
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return fmt.Errorf("certs: sync %s: %w", final, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("certs: %w", err)
	}
	if o.Overwrite {
		err = os.Rename(tmp, final)
	} else if err = os.Link(tmp, final); errors.Is(err, os.ErrExist) {
		return fmt.Errorf("%w: %s", ErrExists, final)
	}
	if err != nil {
		return fmt.Errorf("certs: %w", err)
	}
	return nil
}

func validDNSName(h string) bool {
	if h == "" || len(h) > 253 {
		return false
	}
	for _, label := range strings.Split(strings.TrimPrefix(h, "*."), ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, c := range []byte(label) {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
}
