"""The PostgreSQL guard (psycopg 3): the Go guard's table and SQL
(fence/pgfence/pgfence.go), so that Go and Python writers of one database fence
each other on one table.

Table (created by :meth:`Postgres.init`; default ``leasehold_fence``)::

    resource   text          PRIMARY KEY,
    token      numeric(20,0) NOT NULL CHECK (token > 0 AND token <= 18446744073709551615),
    value      bytea,
    updated_at timestamptz   NOT NULL DEFAULT now()

The check is one ``INSERT … ON CONFLICT DO UPDATE … WHERE f.token <= EXCLUDED.token``
(``<`` when strict): the row lock makes check and update one atomic step,
and a refusal leaves nothing changed. :meth:`Postgres.do` runs your own
statements in the same transaction as the check::

    guard = Postgres(conn)
    guard.do("orders:17", lock.token, lambda cur: cur.execute("UPDATE orders SET ..."))
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from . import StaleTokenError, parse_stored, validate, validate_key

__all__ = ["Postgres", "DEFAULT_TABLE"]

DEFAULT_TABLE = "leasehold_fence"


def _ident(table: str) -> str:
    """pgx.Identifier.Sanitize: each dotted part quoted, quotes doubled, NULs dropped."""
    return ".".join('"' + p.replace('"', '""').replace("\x00", "") + '"' for p in table.split("."))


class Postgres:
    """A guard on a psycopg 3 connection (``psycopg.connect(...)``). Each
    call runs in a transaction of its own (``conn.transaction()``; a
    savepoint when one is open already), at the connection's isolation
    level (PostgreSQL's default, read committed, as the Go guard). Not for
    concurrent use of one connection by several threads: use one
    connection per thread, or a pool."""

    def __init__(self, conn: Any, *, table: str = DEFAULT_TABLE, strict: bool = False):
        self.conn = conn
        self.strict = strict
        t = _ident(table)
        cmp = "<" if strict else "<="
        self.sql_create = (
            "CREATE TABLE IF NOT EXISTS " + t + " (\n"
            "\tresource   text          PRIMARY KEY,\n"
            "\ttoken      numeric(20,0) NOT NULL CHECK (token > 0 AND token <= 18446744073709551615),\n"
            "\tvalue      bytea,\n"
            "\tupdated_at timestamptz   NOT NULL DEFAULT now()\n"
            ")"
        )
        self.sql_check = (
            "INSERT INTO " + t + " AS f (resource, token) VALUES (%s, %s::text::numeric)\n"
            "ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token, updated_at = now()\n"
            "\tWHERE f.token " + cmp + " EXCLUDED.token\n"
            "RETURNING f.token::text"
        )
        self.sql_check_value = (
            "INSERT INTO " + t + " AS f (resource, token, value) VALUES (%s, %s::text::numeric, %s)\n"
            "ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token, value = EXCLUDED.value, updated_at = now()\n"
            "\tWHERE f.token " + cmp + " EXCLUDED.token\n"
            "RETURNING f.token::text"
        )
        self.sql_token = "SELECT token::text FROM " + t + " WHERE resource = %s"
        self.sql_last = "SELECT token::text, value FROM " + t + " WHERE resource = %s"

    def init(self) -> None:
        """Creates the table if it does not exist."""
        with self.conn.transaction():
            self.conn.execute(self.sql_create)

    def write(self, key: str, token: int, value: bytes) -> None:
        """Stores value under key iff token is not stale; raises
        StaleTokenError (nothing changed) otherwise."""
        validate(key, token)
        with self.conn.transaction():
            with self.conn.cursor() as cur:
                self._check(cur, key, token, bytes(value))

    def do(self, key: str, token: int, fn: Callable[[Any], Any]) -> Any:
        """Checks token for key and, in the same transaction, calls
        fn(cursor) and returns its result; a stale token raises
        StaleTokenError before fn runs; an exception from fn rolls back
        both (the fence too)."""
        validate(key, token)
        with self.conn.transaction():
            with self.conn.cursor() as cur:
                self._check(cur, key, token, None)
                return fn(cur)

    def fence_tx(self, cur: Any, key: str, token: int) -> None:
        """The check alone, inside the caller's transaction (``cur`` is a
        cursor or connection of it): the caller commits it with its own
        writes, or rolls both back."""
        validate(key, token)
        self._check(cur, key, token, None)

    def _check(self, cur: Any, key: str, token: int, value: Optional[bytes]) -> None:
        if value is None:
            row = cur.execute(self.sql_check, (key, str(token))).fetchone()
        else:
            row = cur.execute(self.sql_check_value, (key, str(token), value)).fetchone()
        if row is not None:
            return
        row = cur.execute(self.sql_token, (key,)).fetchone()
        raise StaleTokenError(key, token, parse_stored(row[0]))

    def last(self, key: str) -> tuple[int, Optional[bytes]]:
        """The last accepted token for key and the value stored with it;
        (0, None) when no write was ever accepted."""
        validate_key(key)
        with self.conn.transaction():
            row = self.conn.execute(self.sql_last, (key,)).fetchone()
        if row is None:
            return 0, None
        return parse_stored(row[0]), (bytes(row[1]) if row[1] is not None else None)
