package fsm

import (
	"fmt"
	"slices"

	"github.com/leasehold/leasehold/internal/fsm/fsmpb"
)

// fence checks a fenced write with token on key: the token must have been
// issued, and not be older than the key's last accepted one (nor equal
// when strict). It returns the key's entry (nil when absent; a tombstone
// is an entry).
func (m *Machine) fence(key string, token uint64, strict bool) (*fsmpb.KV, error) {
	if token == 0 || token > m.token {
		return nil, fmt.Errorf("%w: token %d was never issued (newest is %d)", ErrInvalidToken, token, m.token)
	}
	e := m.kv[key]
	if e != nil && staleKV(token, e.Token, strict) {
		return nil, &StaleTokenError{Key: key, Token: token, LastToken: e.Token, Strict: strict}
	}
	return e, nil
}

func (m *Machine) kvPut(c *fsmpb.KVPut, res *Result) {
	old, err := m.fence(c.GetKey(), c.GetToken(), c.GetStrict())
	if err != nil {
		res.Err = err
		return
	}
	if old == nil && len(m.kv) >= m.limits.MaxKVKeys {
		res.Err = ErrTooManyKeys
		return
	}
	e := &fsmpb.KV{Key: c.GetKey(), Value: slices.Clone(c.GetValue()), Token: c.GetToken()}
	if err := m.reserve(kvBytes(e) - kvBytes(old)); err != nil {
		res.Err = err
		return
	}
	m.setKV(old, e)
	res.KV = e
}

// kvDelete replaces the value of key with a token-only tombstone: the
// fence stays, so a write with an older token is still refused, and a
// later write with a newer token brings the key back.
func (m *Machine) kvDelete(c *fsmpb.KVDelete, res *Result) {
	old, err := m.fence(c.GetKey(), c.GetToken(), c.GetStrict())
	if err != nil {
		res.Err = err
		return
	}
	if old == nil {
		res.Err = fmt.Errorf("%w: %q", ErrKeyNotFound, c.GetKey())
		return
	}
	e := &fsmpb.KV{Key: c.GetKey(), Token: c.GetToken(), Deleted: true}
	m.setKV(old, e)
	res.KV = e
}

// setKV replaces old (nil when absent) with e and keeps the byte count.
// Entries are immutable once stored: a snapshot may still be writing old.
func (m *Machine) setKV(old, e *fsmpb.KV) {
	m.bytes += kvBytes(e) - kvBytes(old)
	m.kv[e.Key] = e
}
