"""The package as a user gets it: the wheel in a fresh virtualenv, the
runnable examples, and python -m leasehold run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]


def test_the_wheel_installed_in_a_fresh_venv_takes_a_lock_and_fences_postgres(server, tmp_path, unique, postgres_url):
    subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--wheel", "--outdir", str(tmp_path / "dist"), str(HERE)],
        check=True,
        capture_output=True,
    )
    (wheel,) = (tmp_path / "dist").glob("leasehold-*.whl")
    venv = tmp_path / "venv"
    # Without its own pip (bootstrapping one costs most of a minute here):
    # the system's pip, seen through --system-site-packages, installs into
    # the venv it runs in.
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], check=True)
    py = str(venv / "bin" / "python")
    # --no-index: the declared dependencies (grpcio, protobuf) must be met
    # by what is installed; nothing is downloaded.
    subprocess.run([py, "-m", "pip", "install", "--no-index", "--quiet", str(wheel)], check=True)
    code = f"""
import sys, psycopg, leasehold
from leasehold.fence.postgres import Postgres
assert leasehold.__file__.startswith(sys.prefix), leasehold.__file__
client = leasehold.Client({server.addr!r})
with psycopg.connect({postgres_url!r}) as conn:
    guard = Postgres(conn, table="leasehold_fence_pytest")
    guard.init()
    with client.lock({unique!r}, timeout=10) as old:
        guard.write({unique!r}, old.token, b"old")
    with client.lock({unique!r}, timeout=10) as new:
        guard.write({unique!r}, new.token, b"new")
    try:
        guard.write({unique!r}, old.token, b"late")
    except leasehold.StaleToken as e:
        print(old.token, new.token, e.last_token)
"""
    out = subprocess.run([py, "-c", code], cwd=tmp_path, check=True, capture_output=True, text=True).stdout
    old, new, last = map(int, out.split())
    assert 0 < old < new == last


def _run(*args: str, **kw) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(HERE))
    return subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True, timeout=60, **kw)


def test_run_if_free_skips_while_the_lock_is_held(client, server, unique):
    r = _run("-m", "leasehold", "run", unique, "--endpoints", server.addr, "--if-free", "--", "sh", "-c", 'echo "t=$LEASEHOLD_TOKEN"; exit 3')
    assert r.returncode == 3 and r.stdout.startswith("t="), r
    with client.lock(unique) as lock:
        r = _run("-m", "leasehold", "run", unique, "--endpoints", server.addr, "--if-free", "--", "echo", "ran")
        assert r.returncode == 0 and "ran" not in r.stdout and "is held" in r.stderr, r
        assert int(client.status(unique).holder.token) == lock.token


def test_the_examples_run(server, postgres_url, redis_url):
    import psycopg
    import redis

    from leasehold.fence.postgres import Postgres

    # The examples use fixed names: clear their fences of earlier runs.
    with psycopg.connect(postgres_url) as conn:
        Postgres(conn).init()
        conn.execute("DELETE FROM leasehold_fence WHERE resource = 'report:417'")
    redis.Redis.from_url(redis_url).delete("leasehold:fence:cache:warm")
    for args in (["postgres_guard.py", postgres_url], ["redis_guard.py", redis_url], ["cron_job.py"]):
        r = _run(str(HERE / "examples" / args[0]), *args[1:], server.addr)
        assert r.returncode == 0, r
        assert "token" in r.stdout, r


def test_run_stops_the_command_when_the_lease_is_lost(server, unique):
    from .proxy import Proxy

    proxy = Proxy(server.addr)
    script = 'trap "echo term; exit 7" TERM; echo started; while :; do sleep 0.05; done'
    env = dict(os.environ, PYTHONPATH=str(HERE))
    p = subprocess.Popen(
        [sys.executable, "-m", "leasehold", "run", unique, "--endpoints", proxy.addr, "--ttl", "2", "--", "sh", "-c", script],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert p.stdout.readline() == "started\n"
        proxy.blackhole()
        out, err = p.communicate(timeout=30)
        assert p.returncode == 7 and out == "term\n", (p.returncode, out, err)
        assert "stopping the command" in err
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        proxy.close()
