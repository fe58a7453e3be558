package pgfence

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/leasehold/leasehold/fence"
)

// PgxConn is the part of *pgxpool.Pool and *pgx.Conn that the PostgreSQL guard uses.
type PgxConn interface {
	BeginTx(ctx context.Context, txOptions pgx.TxOptions) (pgx.Tx, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Exec(ctx context.Context, sql string, arguments ...any) (pgconn.CommandTag, error)
}

// Guard is a fence.Guard over a PostgreSQL fence table (pgx v5). Its general form Do runs the
// token check and YOUR statements in one transaction, so the effect commits iff the token was
// accepted, and a stale and a fresh writer can never interleave.
//
// The table (see Init; create it yourself in a migration if you prefer):
//
//	CREATE TABLE IF NOT EXISTS leasehold_fence (
//	    resource   text          PRIMARY KEY,
//	    token      numeric(20,0) NOT NULL CHECK (token > 0 AND token <= 18446744073709551615),
//	    value      bytea,
//	    updated_at timestamptz   NOT NULL DEFAULT now()
//	)
//
// Tokens are numeric(20,0), so the whole uint64 range is stored exactly (bigint would stop at
// 2^63-1). The check, inside a READ COMMITTED transaction, is one statement (fence.Monotonic shown;
// fence.Strict uses < instead of <=; Write also sets value):
//
//	INSERT INTO leasehold_fence AS f (resource, token) VALUES ($1, $2::text::numeric)
//	ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token, updated_at = now()
//	    WHERE f.token <= EXCLUDED.token
//	RETURNING f.token::text
//
// Why it is atomic: the upsert takes the row lock of the key's fence row (or inserts it, the
// primary key arbitrating between concurrent first writers) and evaluates the WHERE against the
// newest committed version of the row after waiting for that lock. PostgreSQL keeps the row
// locked even when the WHERE is false, until the transaction ends. So from the check until
// COMMIT or ROLLBACK no other transaction can check the same key: everything the caller does in
// between is ordered after every earlier accepted writer and before every later one. When no
// row is returned the token is stale: the guard reads the (locked) row's token for the
// StaleTokenError and rolls back. When the caller's function fails, the rollback also undoes
// the token update. Effects on different keys do not block each other.
type Guard struct {
	db   PgxConn
	mode fence.Mode

	sqlCreate, sqlCheck, sqlCheckValue, sqlToken, sqlLast string
}

var _ fence.Guard = (*Guard)(nil)

// New returns a guard over db. WithMode and WithTable apply. It does not create the
// table: call Init or run its DDL in a migration.
func New(db PgxConn, opts ...fence.Option) *Guard {
	o := fence.Apply(opts...)
	t := pgx.Identifier(strings.Split(o.Table, ".")).Sanitize()
	cmp := "<="
	if o.Mode == fence.Strict {
		cmp = "<"
	}
	return &Guard{
		db:   db,
		mode: o.Mode,
		sqlCreate: `CREATE TABLE IF NOT EXISTS ` + t + ` (
	resource   text          PRIMARY KEY,
	token      numeric(20,0) NOT NULL CHECK (token > 0 AND token <= 18446744073709551615),
	value      bytea,
	updated_at timestamptz   NOT NULL DEFAULT now()
)`,
		sqlCheck: `INSERT INTO ` + t + ` AS f (resource, token) VALUES ($1, $2::text::numeric)
ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token, updated_at = now()
	WHERE f.token ` + cmp + ` EXCLUDED.token
RETURNING f.token::text`,
		sqlCheckValue: `INSERT INTO ` + t + ` AS f (resource, token, value) VALUES ($1, $2::text::numeric, $3)
ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token, value = EXCLUDED.value, updated_at = now()
	WHERE f.token ` + cmp + ` EXCLUDED.token
RETURNING f.token::text`,
		sqlToken: `SELECT token::text FROM ` + t + ` WHERE resource = $1`,
		sqlLast:  `SELECT token::text, value FROM ` + t + ` WHERE resource = $1`,
	}
}

// Init creates the fence table if it does not exist.
func (p *Guard) Init(ctx context.Context) error {
	if _, err := p.db.Exec(ctx, p.sqlCreate); err != nil {
		return fmt.Errorf("fence: postgres create table: %w", err)
	}
	return nil
}

// Write implements Guard: the value lives in the fence table's value column.
func (p *Guard) Write(ctx context.Context, key string, token uint64, value []byte) error {
	if value == nil {
		value = []byte{} // nil would store NULL, which Last reports as "no value"
	}
	return p.do(ctx, key, token, value, nil)
}

// Do runs fn inside one READ COMMITTED transaction that first checks and advances key's token
// (the statement in the type comment, leaving value as it is) and commits after fn returns
// nil. If the token is stale Do returns a *StaleTokenError and fn is not called. If fn
// returns an error, the transaction — fn's statements and the token update — is rolled back
// and the error is returned as is. fn must not commit or roll back tx. While fn runs, every
// other writer for key waits, so keep fn short.
func (p *Guard) Do(ctx context.Context, key string, token uint64, fn func(tx pgx.Tx) error) error {
	return p.do(ctx, key, token, nil, fn)
}

func (p *Guard) do(ctx context.Context, key string, token uint64, value []byte, fn func(pgx.Tx) error) (err error) {
	if err := fence.ValidateWrite(key, token); err != nil {
		return err
	}
	tx, err := p.db.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return fmt.Errorf("fence: postgres begin: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
	}()
	if err := p.check(ctx, tx, key, token, value); err != nil {
		return err
	}
	if fn != nil {
		if err := fn(tx); err != nil {
			return err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("fence: postgres commit: %w", err)
	}
	return nil
}

// FenceTx checks and advances key's token inside tx, a transaction the caller owns: the same
// statement as Do. After nil, the caller's statements in tx are fenced and the caller commits;
// after an error the caller must roll back (a stale token changed nothing, but the
// transaction must not commit effects the fence refused). tx must be READ COMMITTED: at
// REPEATABLE READ or SERIALIZABLE a concurrent writer makes the statement fail with a
// serialization error (safe, but not a StaleTokenError).
func (p *Guard) FenceTx(ctx context.Context, tx pgx.Tx, key string, token uint64) error {
	if err := fence.ValidateWrite(key, token); err != nil {
		return err
	}
	return p.check(ctx, tx, key, token, nil)
}

func (p *Guard) check(ctx context.Context, tx pgx.Tx, key string, token uint64, value []byte) error {
	q, args := p.sqlCheck, []any{key, fmt.Sprint(token)}
	if value != nil {
		q, args = p.sqlCheckValue, append(args, value)
	}
	var got string
	err := tx.QueryRow(ctx, q, args...).Scan(&got)
	if err == nil {
		return nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("fence: postgres check %q: %w", key, err)
	}
	// Refused: the row exists and is locked by us, so this read is its current token.
	if err := tx.QueryRow(ctx, p.sqlToken, key).Scan(&got); err != nil {
		return fmt.Errorf("fence: postgres read last token of %q: %w", key, err)
	}
	last, err := fence.ParseStoredToken(got)
	if err != nil {
		return err
	}
	return &fence.StaleTokenError{Key: key, Token: token, LastToken: last}
}

// Last implements Guard.
func (p *Guard) Last(ctx context.Context, key string) (uint64, []byte, error) {
	if err := fence.ValidateKey(key); err != nil {
		return 0, nil, err
	}
	var tok string
	var val []byte
	err := p.db.QueryRow(ctx, p.sqlLast, key).Scan(&tok, &val)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil, nil
	}
	if err != nil {
		return 0, nil, fmt.Errorf("fence: postgres last %q: %w", key, err)
	}
	t, err := fence.ParseStoredToken(tok)
	return t, val, err
}
