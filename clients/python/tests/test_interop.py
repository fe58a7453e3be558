"""The Python client beside the Go one: a Go holder (the CLI) and Python
holders contend on one name in FIFO order with rising tokens; the error
table matches api/codes.go; the guards carry the Go guards' SQL and Lua,
and Go and Python writers (tests/gofence, package fence) fence each other
on one PostgreSQL table and one Redis."""

from __future__ import annotations

import re
import subprocess
import threading

import pytest

import leasehold
from leasehold import errors

from .conftest import REPO, binary, until


def test_go_and_python_holders_take_turns_in_fifo_order(client, server, unique):
    py1 = client.session(owner="py-1")
    first = py1.acquire(unique)
    go = subprocess.Popen(
        [binary(), "run", unique, "--endpoints", server.addr, "--owner", "go-holder", "--", "sh", "-c", 'echo "token=$LEASEHOLD_TOKEN"; cat >/dev/null'],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        until("the Go holder queued", lambda: [w.owner for w in client.status(unique).waiters] == ["go-holder"])
        py2 = client.session(owner="py-2")
        got: list = []
        t = threading.Thread(target=lambda: got.append(py2.acquire(unique, timeout=30)))
        t.start()
        until("the second Python holder queued", lambda: [w.owner for w in client.status(unique).waiters] == ["go-holder", "py-2"])
        first.release()
        line = go.stdout.readline()  # the Go holder runs its command: it holds
        go_token = int(re.fullmatch(r"token=(\d+)\n", line).group(1))
        assert go_token > first.token
        st = client.status(unique)
        assert st.holder.owner == "go-holder" and st.holder.token == go_token
        assert [w.owner for w in st.waiters] == ["py-2"] and not got
        go.stdin.close()  # the command ends; leasehold run releases
        assert go.wait(15) == 0
        t.join(15)
        assert got and got[0].token > go_token
        py2.close()
    finally:
        if go.poll() is None:
            go.kill()
            go.wait()
        py1.close()


def _go_codes() -> dict[str, tuple[str, int]]:
    src = (REPO / "api" / "codes.go").read_text()
    names = dict(re.findall(r'(Code\w+)\s+Code = "([a-z-]+)"', src))
    table = re.findall(r"(Code\w+):\s+\{connect\.\w+, (\d+)\}", src)
    return {names[n]: int(exit_) for n, exit_ in table}


def test_the_error_classes_cover_the_server_codes():
    go = _go_codes()
    assert go == errors.EXIT_CODES
    for code in go:
        e = errors.error_for(code, "m")
        assert e.code == code and isinstance(e, leasehold.LeaseholdError)
        assert type(e).__name__ != "Internal" or code == "internal"
    assert isinstance(errors.error_for("no-such-code"), errors.Internal)


def _go_const(path: str, name: str) -> str:
    """The value of the Go string constant name: raw literals joined with +
    and other constants of the file."""
    src = (REPO / path).read_text()
    m = re.search(r"\bconst " + name + r" = ((?:`[^`]*`|\w+|\s*\+\s*)+)", src)
    assert m, f"{name} not found in {path}"
    out = ""
    for lit, ident in re.findall(r"`([^`]*)`|(\w+)", m.group(1)):
        out += lit if not ident else _go_const(path, ident)
    return out


def test_the_redis_guard_runs_the_go_guards_script():
    from leasehold.fence import redis as guard

    assert guard.WRITE_SCRIPT == _go_const("fence/redisfence/redisfence.go", "redisWriteScript")


def test_the_postgres_guard_runs_the_go_guards_sql():
    from leasehold.fence.postgres import Postgres

    src = (REPO / "fence" / "pgfence" / "pgfence.go").read_text()
    p = Postgres(None)
    for field, attr in [("sqlCreate", "sql_create"), ("sqlCheck", "sql_check"), ("sqlCheckValue", "sql_check_value")]:
        m = re.search(field + r": `(.*?)`,\n", src, re.S)
        go = m.group(1).replace("` + t + `", '"leasehold_fence"').replace("` + cmp + `", "<=")
        go = re.sub(r"\$\d", "%s", go)
        assert getattr(p, attr) == go, field


@pytest.fixture(scope="module")
def gofence(tmp_path_factory) -> str:
    """tests/gofence built: writes through the Go guards."""
    out = tmp_path_factory.mktemp("gofence") / "gofence"
    subprocess.run(["go", "build", "-o", str(out), "./clients/python/tests/gofence"], cwd=REPO, check=True)
    return str(out)


def _go_write(gofence: str, *args: str) -> int | None:
    """Writes through a Go guard: None when accepted, the last token when refused as stale."""
    r = subprocess.run([gofence, *args], capture_output=True, text=True, timeout=60)
    if r.returncode == 4:
        return int(r.stdout.split()[1])
    assert r.returncode == 0, r
    return None


def test_go_and_python_writers_fence_each_other_in_postgres(gofence, postgres_url, unique):
    import psycopg

    from leasehold.fence import StaleTokenError
    from leasehold.fence.postgres import Postgres

    table = "leasehold_fence_pytest"
    with psycopg.connect(postgres_url) as conn:
        g = Postgres(conn, table=table)
        g.init()
        assert _go_write(gofence, "postgres", postgres_url, table, unique, "5", "go5") is None
        with pytest.raises(StaleTokenError) as e:
            g.write(unique, 4, b"py4")
        assert e.value.last_token == 5
        assert g.last(unique) == (5, b"go5")
        g.write(unique, 6, b"py6")
        assert _go_write(gofence, "postgres", postgres_url, table, unique, "5", "go5") == 6
        assert g.last(unique) == (6, b"py6")


def test_go_and_python_writers_fence_each_other_in_redis(gofence, redis_url, unique):
    import redis

    from leasehold.fence import StaleTokenError
    from leasehold.fence.redis import DEFAULT_PREFIX, Redis

    rdb = redis.Redis.from_url(redis_url)
    g = Redis(rdb)
    try:
        assert _go_write(gofence, "redis", redis_url, DEFAULT_PREFIX, unique, "12345678901", "go") is None
        with pytest.raises(StaleTokenError) as e:
            g.write(unique, 9999999999, b"py")
        assert e.value.last_token == 12345678901
        g.write(unique, 12345678902, b"py")
        assert _go_write(gofence, "redis", redis_url, DEFAULT_PREFIX, unique, "12345678901", "go") == 12345678902
        assert g.last(unique) == (12345678902, b"py")
    finally:
        rdb.delete(g.fence_key(unique))
        rdb.close()
