package fence

import (
	"bytes"
	"context"
	"sync"
)

// Memory is an in-memory Guard for tests and single-process use. Atomicity comes from one
// mutex held across the check, the effect and the update of the last token, so effects on
// different keys are serialized too; nothing survives the process.
type Memory struct {
	mode Mode

	mu      sync.Mutex // protects entries
	entries map[string]memEntry
}

type memEntry struct {
	token uint64
	value []byte
}

var _ Guard = (*Memory)(nil)

// NewMemory returns an empty in-memory guard. Only WithMode applies.
func NewMemory(opts ...Option) *Memory {
	return &Memory{mode: Apply(opts...).Mode, entries: make(map[string]memEntry)}
}

// Write implements Guard.
func (m *Memory) Write(ctx context.Context, key string, token uint64, value []byte) error {
	v := bytes.Clone(value)
	return m.do(ctx, key, token, &v, nil)
}

// Do runs fn iff token is not stale for key, while holding the guard's lock, and records token
// as key's last token iff fn returns nil (the stored value is left as it is). An error from fn
// is returned as is and records nothing. fn must not call back into m.
func (m *Memory) Do(ctx context.Context, key string, token uint64, fn func() error) error {
	return m.do(ctx, key, token, nil, fn)
}

func (m *Memory) do(ctx context.Context, key string, token uint64, value *[]byte, fn func() error) error {
	if err := ValidateWrite(key, token); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.entries[key]
	if !m.mode.Admits(token, e.token) {
		return &StaleTokenError{Key: key, Token: token, LastToken: e.token}
	}
	if fn != nil {
		if err := fn(); err != nil {
			return err
		}
	}
	e.token = token
	if value != nil {
		e.value = *value
	}
	m.entries[key] = e
	return nil
}

// Last implements Guard.
func (m *Memory) Last(ctx context.Context, key string) (uint64, []byte, error) {
	if err := ValidateKey(key); err != nil {
		return 0, nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.entries[key]
	return e.token, bytes.Clone(e.value), nil
}
