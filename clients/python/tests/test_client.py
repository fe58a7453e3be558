"""The client against a real server: locks, modes, the fenced KV, the seed
scenario, done before a regrant, withdrawals, and the watch."""

from __future__ import annotations

import threading
import time

import pytest

import leasehold
from leasehold import errors

from .conftest import until
from .proxy import Proxy


def test_lock_context_manager_writes_with_its_token(client, unique):
    with client.lock(unique, timeout=10, owner="py-worker") as lock:
        assert lock.name == unique and lock.token > 0 and lock.mode == "exclusive"
        client.kv_put(unique, b"v1", lock.token)
        assert client.kv_get(unique) == (b"v1", lock.token)
        assert client.status(unique).holder.owner == "py-worker"
    assert lock.done.is_set() and isinstance(lock.err, errors.Released)
    assert not client.status(unique).HasField("holder")


def test_try_acquire_on_a_held_name_is_locked(client, unique):
    with client.session(ttl=5) as a, client.session(ttl=5) as b:
        la = a.acquire(unique)
        with pytest.raises(leasehold.Locked, match="is held by"):
            b.try_acquire(unique)
        with pytest.raises(leasehold.DeadlineExceeded):
            b.acquire(unique, timeout=0.3)
        # The timed-out wait was withdrawn: b is not queued.
        assert [w.lease_id for w in client.status(unique).waiters] == []
        # Re-entrant: the same holding, not a second grant.
        assert a.acquire(unique).token == la.token
        la.release()
        with pytest.raises(leasehold.NotHolder):
            la.release()
        assert b.try_acquire(unique).token > la.token


def test_shared_and_semaphore_modes(client, unique):
    with client.session() as r1, client.session() as r2, client.session() as w:
        a, b = r1.acquire(unique, mode="shared"), r2.acquire(unique, mode="shared")
        assert a.mode == b.mode == "shared" and a.token != b.token
        with pytest.raises(leasehold.Locked):
            w.try_acquire(unique)
        a.release()
        b.release()
        assert w.acquire(unique, timeout=5).token > b.token
    name = unique + ":sem"
    with client.session() as s1, client.session() as s2, client.session() as s3:
        l1, l2 = s1.acquire(name, permits=2), s2.acquire(name, permits=2)
        assert {l1.slot, l2.slot} == {0, 1}
        assert l1.slot_key == f"{name}/slot/{l1.slot}"
        with pytest.raises(leasehold.Locked):
            s3.try_acquire(name, permits=2)
        with pytest.raises(leasehold.InvalidArgument):
            s3.try_acquire(name, permits=3)


def test_renewals_keep_a_short_lease_alive(client, unique):
    with client.session(ttl=1) as s:
        lock = s.acquire(unique)
        d0 = s.deadline
        until("the deadline moved two TTLs on", lambda: s.deadline > d0 + 2 * s.ttl, 10)
        assert not lock.done.is_set()
        assert client.status(unique).holder.token == lock.token


def test_a_session_closed_behind_its_back_is_lost_at_once(client, server, unique):
    s = client.session(ttl=5, keepalive=0.2)
    lock = s.acquire(unique)
    other = leasehold.Client(server.addr)
    other._t.call("close", "CloseSession", leasehold.v1.leasehold_pb2.CloseSessionRequest(lease_id=s.id), "harmless")
    other.close()
    until("done", lock.done.is_set, 3)
    assert isinstance(s.err, leasehold.LeaseLost) and "expired" in str(s.err)
    assert time.monotonic() < s.deadline, "lost on the server's word, before the local deadline"
    with pytest.raises(leasehold.LeaseLost):
        s.acquire(unique + ":other")


def test_seed_scenario(client, unique, postgres_url):
    """DESIGN.md's six events, with the built-in KV and the PostgreSQL guard
    as the resources: the stale writer is refused with StaleToken."""
    import psycopg

    from leasehold.fence.postgres import Postgres

    name, key = unique, unique + ":resource"
    a = client.session(ttl=1, owner="worker-A")
    la = a.acquire(name)  # t=0: A holds with token 1
    a.orphan()  # A's process lives on but sends no keepalive
    assert isinstance(la.err, leasehold.LeaseLost)
    b = client.session(ttl=10, owner="worker-B")
    lb = b.acquire(name, timeout=10)  # granted once A's lease expired at the server
    assert lb.token > la.token
    with psycopg.connect(postgres_url) as conn:
        guard = Postgres(conn, table="leasehold_fence_pytest")
        guard.init()
        client.kv_put(key, b"v2", lb.token)  # t=6100: B's write accepted
        guard.write(key, lb.token, b"v2")
        with pytest.raises(leasehold.StaleToken) as e:  # t=6200: A resumes and writes
            client.kv_put(key, b"v1", la.token)
        assert e.value.last_token == lb.token
        with pytest.raises(leasehold.StaleToken) as e:
            guard.write(key, la.token, b"v1")
        assert e.value.last_token == lb.token
        assert guard.last(key) == (lb.token, b"v2")
    assert client.kv_get(key) == (b"v2", lb.token)
    with pytest.raises(leasehold.NotHolder):  # A's release changes nothing
        client.release(name, a.id, la.token)
    assert client.status(name).holder.lease_id == b.id
    b.close()


def test_done_fires_before_a_waiter_is_granted_when_the_holder_is_cut_off(server, unique):
    proxy = Proxy(server.addr)
    cut = leasehold.Client(proxy.addr, retry_timeout=2)
    direct = leasehold.Client(server.addr)
    try:
        holder = cut.session(ttl=2)
        lock = holder.acquire(unique)
        fired: list[float] = []
        lock.on_done(lambda cause: fired.append(time.monotonic()))
        waiter = direct.session(ttl=10)
        granted: list = []
        t = threading.Thread(target=lambda: granted.append((waiter.acquire(unique, timeout=20), time.monotonic())))
        t.start()
        until("the waiter queued", lambda: len(direct.status(unique).waiters) == 1)
        proxy.blackhole()
        t.join(20)
        assert granted, "the waiter was never granted"
        wlock, at = granted[0]
        assert fired, "done never fired"
        assert isinstance(lock.err, leasehold.LeaseLost)
        assert wlock.token > lock.token
        margin = at - fired[0]
        print(f"done fired {margin * 1000:.0f} ms before the waiter was granted (TTL 2 s)")
        assert margin > 0
        waiter.close()
    finally:
        direct.close()
        cut.close()
        proxy.close()


def test_a_wait_cut_off_by_the_lost_lease_is_withdrawn(server, unique):
    proxy = Proxy(server.addr)
    cut = leasehold.Client(proxy.addr, retry_timeout=2)
    direct = leasehold.Client(server.addr)
    try:
        with direct.session() as h:
            hl = h.acquire(unique)
            s = cut.session(ttl=2)
            raised: list[BaseException] = []

            def wait():
                try:
                    s.acquire(unique)
                except BaseException as e:  # noqa: BLE001
                    raised.append(e)

            t = threading.Thread(target=wait)
            t.start()
            until("queued", lambda: len(direct.status(unique).waiters) == 1)
            proxy.blackhole()
            t.join(15)
            assert raised and isinstance(raised[0], (leasehold.LeaseLost, leasehold.OutcomeUnknown)), raised
            hl.release()
            # Whatever the withdrawal reached, the lost session is never
            # granted once its lease is gone at the server.
            until("the lost session left the queue", lambda: not direct.status(unique).waiters, 10)
            assert not direct.status(unique).HasField("holder")
    finally:
        direct.close()
        cut.close()
        proxy.close()


def test_watch_delivers_events_and_replays_from_an_index(client, unique):
    with client.watch(unique) as w:
        with client.lock(unique):
            pass
        it = iter(w)
        evs = [next(it), next(it)]
    assert [e.type for e in evs] == [leasehold.v1.leasehold_pb2.EVENT_TYPE_ACQUIRED, leasehold.v1.leasehold_pb2.EVENT_TYPE_RELEASED]
    assert evs[0].index < evs[1].index
    with client.watch(unique, from_index=evs[0].index) as w:
        again = next(iter(w))
    assert (again.type, again.index, again.token) == (evs[0].type, evs[0].index, evs[0].token)


def test_the_first_call_to_no_server_fails_at_once():
    c = leasehold.Client("127.0.0.1:1,127.0.0.1:2")
    start = time.monotonic()
    with pytest.raises(leasehold.Unavailable, match="no server at"):
        c.session()
    assert time.monotonic() - start < 5
    c.close()


def test_endpoint_schemes():
    with pytest.raises(leasehold.InvalidArgument, match="use https"):
        leasehold.Client("http://127.0.0.1:7420", tls=leasehold.TLS())
    with pytest.raises(leasehold.InvalidArgument, match="no endpoints"):
        leasehold.Client(" , ")
    c = leasehold.Client("https://127.0.0.1:7420,127.0.0.1:7421")
    assert [e.host_port for e in c._t.eps] == ["127.0.0.1:7420", "127.0.0.1:7421"]
    c.close()


def test_a_lost_acquire_reply_is_retried_into_the_same_grant(server, unique):
    from leasehold.v1 import leasehold_pb2 as pb

    proxy = Proxy(server.addr)
    c = leasehold.Client([proxy.addr, server.addr])
    direct = leasehold.Client(server.addr)
    try:
        with direct.watch(unique) as w:
            s = c.session(ttl=10)
            proxy.cut_replies(after=2)  # the grant applies; its answer never arrives
            got: list = []
            t = threading.Thread(target=lambda: got.append(s.acquire(unique, timeout=10)))
            t.start()
            until("granted at the server while the answer is held back", lambda: direct.status(unique).holder.lease_id == s.id, 2)
            assert not got
            t.join(15)
            (lock,) = got
            assert c._t.current() == 1, "the acquire was sent again to the other endpoint"
            st = direct.status(unique)
            assert [h.token for h in st.holders] == [lock.token]
            lock.release()
            it = iter(w)
            # One grant, the one the caller holds: the retry was not a second.
            assert [(e.type, e.token) for e in (next(it), next(it))] == [
                (pb.EVENT_TYPE_ACQUIRED, lock.token),
                (pb.EVENT_TYPE_RELEASED, lock.token),
            ]
        s.close()
    finally:
        direct.close()
        c.close()
        proxy.close()


def test_a_write_whose_reply_is_lost_is_outcome_unknown_not_retried(server, unique):
    proxy = Proxy(server.addr)
    c = leasehold.Client(proxy.addr)
    direct = leasehold.Client(server.addr)
    try:
        with direct.session() as s:
            lock = s.acquire(unique)
            with pytest.raises(leasehold.NotFound):
                c.kv_get(unique)
            proxy.cut_replies(after=0.5)
            with pytest.raises(leasehold.OutcomeUnknown, match="may have applied"):
                c.kv_put(unique, b"v", lock.token)
            assert direct.kv_get(unique) == (b"v", lock.token)  # it had applied
    finally:
        direct.close()
        c.close()
        proxy.close()


def test_watch_resumes_across_a_server_restart_without_gap_or_duplicate(unique):
    from leasehold.v1 import leasehold_pb2 as pb

    from .conftest import Server

    srv = Server().start()
    try:
        c = leasehold.Client(srv.addr, retry_timeout=30)
        with c.watch(unique) as w:
            it = iter(w)
            with c.lock(unique + ":a"):
                pass
            before = [next(it), next(it)]
            srv.stop()
            srv.start(listen=srv.addr)  # the same port and data dir
            with c.lock(unique + ":b"):
                pass
            after = [next(it), next(it)]
        evs = before + after
        assert [(e.type, e.name) for e in evs] == [
            (pb.EVENT_TYPE_ACQUIRED, unique + ":a"),
            (pb.EVENT_TYPE_RELEASED, unique + ":a"),
            (pb.EVENT_TYPE_ACQUIRED, unique + ":b"),
            (pb.EVENT_TYPE_RELEASED, unique + ":b"),
        ]
        assert [e.index for e in evs] == sorted(set(e.index for e in evs))
        c.close()
    finally:
        srv.close()
