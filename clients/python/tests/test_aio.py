"""The asyncio API."""

from __future__ import annotations

import asyncio

import pytest

import leasehold
import leasehold.aio

from .conftest import until


def test_async_lock_and_cancelled_wait(server, unique):
    async def main():
        async with leasehold.aio.Client(server.addr) as c:
            events = c.watch(unique)
            first = asyncio.ensure_future(events.__anext__())
            async with c.lock(unique, timeout=10) as lock:
                assert lock.token > 0 and not lock.done.is_set()
                await c.kv_put(unique, "v", lock.token)
                s = await c.session(ttl=5)
                waiting = asyncio.ensure_future(s.acquire(unique))
                await asyncio.to_thread(until, "queued", lambda: len(c.sync.status(unique).waiters) == 1)
                waiting.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await waiting
                # The cancelled wait was withdrawn.
                assert len((await c.status(unique)).waiters) == 0
                await s.close()
            assert lock.done.is_set() and isinstance(lock.err, leasehold.Released)
            assert await c.kv_get(unique) == (b"v", lock.token)
            ev = await first
            assert (ev.name, ev.token) == (unique, lock.token)
            await events.aclose()

    asyncio.run(main())
