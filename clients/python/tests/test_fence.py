"""The guards against real PostgreSQL and Redis."""

from __future__ import annotations

import pytest

import leasehold
from leasehold.fence import InvalidKey, InvalidToken, StaleTokenError

TABLE = "leasehold_fence_pytest"


@pytest.fixture
def pg(postgres_url):
    import psycopg

    with psycopg.connect(postgres_url) as conn:
        yield conn


@pytest.fixture
def rdb(redis_url):
    import redis

    r = redis.Redis.from_url(redis_url)
    yield r
    r.close()


def test_postgres_guard_refuses_stale_tokens_and_keeps_the_value(pg, unique):
    from leasehold.fence.postgres import Postgres

    g = Postgres(pg, table=TABLE)
    g.init()
    assert g.last(unique) == (0, None)
    g.write(unique, 7, b"a")
    g.write(unique, 7, b"b")  # the holder may write again with its token
    with pytest.raises(StaleTokenError) as e:
        g.write(unique, 6, b"old")
    assert (e.value.key, e.value.token, e.value.last_token) == (unique, 6, 7)
    assert isinstance(e.value, leasehold.StaleToken) and e.value.code == "stale-token"
    assert g.last(unique) == (7, b"b")
    strict = Postgres(pg, table=TABLE, strict=True)
    with pytest.raises(StaleTokenError):
        strict.write(unique, 7, b"again")
    strict.write(unique, 2**64 - 1, b"max")
    assert g.last(unique) == (2**64 - 1, b"max")
    with pytest.raises(InvalidToken):
        g.write(unique, 0, b"x")
    with pytest.raises(InvalidKey):
        g.write("", 1, b"x")


def test_postgres_guard_do_is_one_transaction_with_the_check(pg, unique):
    from leasehold.fence.postgres import Postgres

    g = Postgres(pg, table=TABLE)
    g.init()
    with pg.transaction():
        pg.execute("CREATE TABLE IF NOT EXISTS leasehold_pytest_orders (id text PRIMARY KEY, state text)")
    g.do(unique, 5, lambda cur: cur.execute("INSERT INTO leasehold_pytest_orders VALUES (%s, 'paid')", (unique,)))
    with pytest.raises(StaleTokenError):
        g.do(unique, 4, lambda cur: cur.execute("UPDATE leasehold_pytest_orders SET state = 'stale' WHERE id = %s", (unique,)))

    def fail(cur):
        cur.execute("UPDATE leasehold_pytest_orders SET state = 'half' WHERE id = %s", (unique,))
        raise RuntimeError("the effect failed")

    with pytest.raises(RuntimeError):
        g.do(unique, 9, fail)
    assert g.last(unique)[0] == 5  # the fence rolled back with the effect
    assert pg.execute("SELECT state FROM leasehold_pytest_orders WHERE id = %s", (unique,)).fetchone() == ("paid",)
    with pg.transaction():
        g.fence_tx(pg, unique, 6)
        pg.execute("UPDATE leasehold_pytest_orders SET state = 'shipped' WHERE id = %s", (unique,))
    assert g.last(unique)[0] == 6


def test_redis_guard_refuses_stale_tokens(rdb, unique):
    from leasehold.fence.redis import Redis

    g = Redis(rdb)
    assert g.last(unique) == (0, None)
    g.write(unique, 10, b"a")
    with pytest.raises(StaleTokenError) as e:
        g.write(unique, 9, b"old")
    assert e.value.last_token == 10
    # Tokens of different lengths and across the Lua split compare as integers.
    g.write(unique, 12345678901, b"b")
    with pytest.raises(StaleTokenError):
        g.write(unique, 9999999999, b"c")
    g.write(unique, 2**64 - 1, b"max")
    with pytest.raises(StaleTokenError):
        g.write(unique, 2**64 - 2, b"c")
    assert g.last(unique) == (2**64 - 1, b"max")
    assert rdb.hget("leasehold:fence:" + unique, "token") == str(2**64 - 1).encode()
    with pytest.raises(StaleTokenError):
        Redis(rdb, strict=True).write(unique, 2**64 - 1, b"again")
    rdb.delete(g.fence_key(unique))
