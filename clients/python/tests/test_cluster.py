"""The client against a real 3-node cluster: it moves to the leader a
follower names, and its sessions and calls survive the leader's loss."""

from __future__ import annotations

import pytest

import leasehold

from .conftest import metric, start_cluster, until


@pytest.fixture(scope="module")
def nodes():
    ns = start_cluster(3)
    yield ns
    for n in ns:
        n.close()


def _leader(nodes):
    def find():
        for n in nodes:
            if n.proc.poll() is None and metric(n.addr, "leasehold_is_leader") == 1:
                return n
        return None

    return until("a leader", find, 15)


def test_a_followers_answer_sends_the_next_calls_to_the_leader(nodes, unique):
    leader = _leader(nodes)
    fs = [n for n in nodes if n is not leader]
    before = [metric(f.addr, "leasehold_forwarded_total") for f in fs]
    c = leasehold.Client([fs[0].addr, fs[1].addr, leader.addr])
    with c.session() as s:
        for i in range(20):
            s.acquire(f"{unique}:{i}").release()
    c.close()
    n0, n1 = (metric(f.addr, "leasehold_forwarded_total") - b for f, b in zip(fs, before))
    assert 1 <= n0 <= 2, f"the first follower forwarded {n0} calls; want the client at the leader after the first"
    assert n1 == 0


def test_a_session_outlives_the_leader(nodes, unique):
    leader = _leader(nodes)
    c = leasehold.Client([n.addr for n in nodes])
    try:
        s = c.session(ttl=10)
        lock = s.acquire(unique)
        leader.stop()
        rest = [n for n in nodes if n is not leader]
        _leader(rest)
        d = s.deadline
        until("a renewal through the new leader", lambda: s.deadline > d, 15)
        assert not lock.done.is_set()
        c.kv_put(unique, b"after", lock.token)
        assert c.status(unique).holder.token == lock.token
        lock.release()
        s.close()
    finally:
        c.close()
