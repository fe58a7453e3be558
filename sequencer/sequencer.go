package sequencer

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Limits of the version-2 format.
const (
	// Version is the format version this package writes and reads. Version 1 carried neither
	// mode nor slot, so a reader's or another slot's grant could pass for the writer's; it is
	// refused (ErrVersion).
	Version = 2
	// MaxNameLen is the longest lock name, in bytes (the server's lock-name limit).
	MaxNameLen = 256
	// MaxIDLen is the longest key id, cluster id, lease id and group, in bytes.
	MaxIDLen = 64
	// SignatureLen is the length of the Ed25519 signature at the end of the binary form.
	SignatureLen = ed25519.SignatureSize
	// MaxLen is the longest binary form, in bytes.
	MaxLen = 1 + (1 + MaxIDLen) + (1 + MaxIDLen) + (2 + MaxNameLen) + 8 + (1 + MaxIDLen) + 8 + (1 + MaxIDLen) + 1 + 4 + SignatureLen
	// MaxTextLen is the longest text form, in bytes.
	MaxTextLen = (MaxLen*8 + 5) / 6
)

// signingContext prefixes the signed bytes, so a sequencer signature can never be mistaken for
// a signature over anything else made with the same key.
const signingContext = "leasehold-sequencer\x00"

// Mode is how a grant holds its lock (the lock modes of leasehold's recipes).
type Mode uint8

// The modes.
const (
	// Exclusive is a lock's one holder, a read/write lock's writer, an election's leader, or
	// one permit of a semaphore (then in its own Slot).
	Exclusive Mode = 0
	// Shared is a reader of a read/write lock, holding it beside other readers.
	Shared Mode = 1
)

func (m Mode) String() string {
	switch m {
	case Exclusive:
		return "exclusive"
	case Shared:
		return "shared"
	}
	return fmt.Sprintf("mode(%d)", uint8(m))
}

// Sequencer is one grant as a resource sees it: which lock, in which mode and slot, which
// token, which session, when, and which cluster and key vouch for it.
type Sequencer struct {
	// Name is the lock the grant is for. The resource compares it with the lock it expects.
	Name string
	// Token is the grant's fencing token (> 0).
	Token uint64
	// LeaseID is the session holding the lock (may be empty).
	LeaseID string
	// IssuedUnixMs is when the grantor issued the grant, in Unix milliseconds (its clock; for
	// display and key retirement only, never for exclusivity).
	IssuedUnixMs int64
	// ClusterID is the cluster that granted the lock.
	ClusterID string
	// KeyID names the signing key.
	KeyID string
	// Group is the Raft group that granted the lock: a routing hint, never compared (may be
	// empty).
	Group string
	// Mode is how the grant holds the lock: a resource that takes writes requires Exclusive.
	Mode Mode
	// Slot is the permit a semaphore's grant occupies (0..permits-1; 0 for any other grant).
	// The holder of slot K fences the key NAME/slot/K, which only a grant of slot K may write.
	Slot uint32
}

// Issued returns IssuedUnixMs as a time.
func (q Sequencer) Issued() time.Time { return time.UnixMilli(q.IssuedUnixMs) }

// String returns a one-line description (not the encoding).
func (q Sequencer) String() string {
	return fmt.Sprintf("lock %q %s slot %d token %d lease %q cluster %q key %q issued %s",
		q.Name, q.Mode, q.Slot, q.Token, q.LeaseID, q.ClusterID, q.KeyID, q.Issued().UTC().Format(time.RFC3339Nano))
}

// validate checks every field against the format's limits.
func (q Sequencer) validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, a...))
	}
	switch {
	case q.Name == "" || len(q.Name) > MaxNameLen:
		return bad("lock name is %d bytes, want 1..%d", len(q.Name), MaxNameLen)
	case !validName(q.Name):
		return bad("lock name %q is not UTF-8 without control characters", q.Name)
	case q.Token == 0:
		return bad("token 0")
	case q.IssuedUnixMs < 0:
		return bad("issue time %d ms is negative", q.IssuedUnixMs)
	case q.Mode != Exclusive && q.Mode != Shared:
		return bad("unknown %v", q.Mode)
	case q.Mode == Shared && q.Slot != 0:
		return bad("a shared grant in slot %d", q.Slot)
	}
	for _, f := range []struct {
		what, v  string
		required bool
	}{{"key id", q.KeyID, true}, {"cluster id", q.ClusterID, true}, {"lease id", q.LeaseID, false}, {"group", q.Group, false}} {
		if err := checkID(f.what, f.v, f.required); err != nil {
			return bad("%v", err)
		}
	}
	return nil
}

// checkID checks an id field: printable ASCII without spaces, at most MaxIDLen bytes.
func checkID(what, s string, required bool) error {
	if s == "" && required {
		return fmt.Errorf("%s is empty", what)
	}
	if len(s) > MaxIDLen {
		return fmt.Errorf("%s is %d bytes, longer than %d", what, len(s), MaxIDLen)
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return fmt.Errorf("%s has byte %#x at %d; want printable ASCII", what, s[i], i)
		}
	}
	return nil
}

func validName(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return false
		}
	}
	return true
}

// body appends the signed part of the binary form of q (everything but the signature).
// q must be valid.
func (q Sequencer) body(b []byte) []byte {
	b = append(b, Version)
	b = append(b, byte(len(q.KeyID)))
	b = append(b, q.KeyID...)
	b = append(b, byte(len(q.ClusterID)))
	b = append(b, q.ClusterID...)
	b = binary.BigEndian.AppendUint16(b, uint16(len(q.Name)))
	b = append(b, q.Name...)
	b = binary.BigEndian.AppendUint64(b, q.Token)
	b = append(b, byte(len(q.LeaseID)))
	b = append(b, q.LeaseID...)
	b = binary.BigEndian.AppendUint64(b, uint64(q.IssuedUnixMs))
	b = append(b, byte(len(q.Group)))
	b = append(b, q.Group...)
	b = append(b, byte(q.Mode))
	b = binary.BigEndian.AppendUint32(b, q.Slot)
	return b
}

// signedMessage returns what the signature covers: the signing context and the body.
func signedMessage(body []byte) []byte {
	return append([]byte(signingContext), body...)
}

// Parse decodes a binary sequencer WITHOUT verifying its signature (to display one, or to
// find its key id). A version-1 sequencer wraps ErrVersion; anything else but a canonical
// version-2 encoding wraps ErrMalformed. Use a Verifier before trusting any field.
func Parse(b []byte) (Sequencer, error) {
	q, _, err := parse(b)
	return q, err
}

// parse decodes b and returns the sequencer and the length of its body (b[:n] is signed,
// b[n:] is the signature).
func parse(b []byte) (Sequencer, int, error) {
	var q Sequencer
	if len(b) > MaxLen {
		return q, 0, fmt.Errorf("%w: %d bytes, longer than %d", ErrMalformed, len(b), MaxLen)
	}
	d := decoder{b: b}
	switch v := d.byte(); {
	case d.err == nil && v == 1:
		return q, 0, fmt.Errorf("%w: version 1 carries neither mode nor slot and is no longer accepted; acquire the lock again from a cluster that signs version %d", ErrVersion, Version)
	case d.err == nil && v != Version:
		return q, 0, fmt.Errorf("%w: version %d, want %d", ErrMalformed, v, Version)
	}
	q.KeyID = d.str(int(d.byte()))
	q.ClusterID = d.str(int(d.byte()))
	q.Name = d.str(int(d.uint16()))
	q.Token = d.uint64()
	q.LeaseID = d.str(int(d.byte()))
	q.IssuedUnixMs = int64(d.uint64())
	q.Group = d.str(int(d.byte()))
	q.Mode = Mode(d.byte())
	q.Slot = d.uint32()
	n := d.off
	d.str(SignatureLen)
	if d.err != nil {
		return Sequencer{}, 0, fmt.Errorf("%w: %d bytes: truncated", ErrMalformed, len(b))
	}
	if d.off != len(b) {
		return Sequencer{}, 0, fmt.Errorf("%w: %d trailing bytes", ErrMalformed, len(b)-d.off)
	}
	if err := q.validate(); err != nil {
		return Sequencer{}, 0, err
	}
	return q, n, nil
}

// decoder reads fields from b; after the first short read every read returns zero and err is
// set.
type decoder struct {
	b   []byte
	off int
	err error
}

func (d *decoder) take(n int) []byte {
	if d.err != nil || n > len(d.b)-d.off {
		d.err = ErrMalformed
		return nil
	}
	p := d.b[d.off : d.off+n]
	d.off += n
	return p
}

func (d *decoder) byte() byte {
	if p := d.take(1); p != nil {
		return p[0]
	}
	return 0
}

func (d *decoder) uint16() uint16 {
	if p := d.take(2); p != nil {
		return binary.BigEndian.Uint16(p)
	}
	return 0
}

func (d *decoder) uint32() uint32 {
	if p := d.take(4); p != nil {
		return binary.BigEndian.Uint32(p)
	}
	return 0
}

func (d *decoder) uint64() uint64 {
	if p := d.take(8); p != nil {
		return binary.BigEndian.Uint64(p)
	}
	return 0
}

func (d *decoder) str(n int) string { return string(d.take(n)) }

// text is the text form's encoding: unpadded base64url, strict (no stray bits, no newlines).
var text = base64.RawURLEncoding.Strict()

// EncodeToString returns the text form of a binary sequencer: unpadded base64url.
func EncodeToString(b []byte) string { return text.EncodeToString(b) }

// DecodeString returns the binary form of a text sequencer. It does not verify anything but
// the base64url; errors wrap ErrMalformed.
func DecodeString(s string) ([]byte, error) {
	if len(s) > MaxTextLen {
		return nil, fmt.Errorf("%w: text is %d bytes, longer than %d", ErrMalformed, len(s), MaxTextLen)
	}
	if strings.ContainsAny(s, "\r\n") {
		return nil, fmt.Errorf("%w: text contains a line break", ErrMalformed) // base64 would skip it
	}
	b, err := text.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("%w: not unpadded base64url: %v", ErrMalformed, err)
	}
	return b, nil
}
