"""The asyncio API: the synchronous client's calls run on worker threads
(``asyncio.to_thread``), so both APIs share one implementation and one
set of guarantees; the keepalive is the same thread.

    import leasehold.aio

    async with leasehold.aio.Client("127.0.0.1:7420") as client:
        async with client.lock("reports", timeout=30) as lock:
            await write_report(token=lock.token)
            if lock.done.is_set(): ...          # an asyncio.Event

Cancelling a task that waits in ``acquire`` cancels the call and withdraws
the wait (CancelWait) before the cancellation propagates, so a grant that
raced with it is released.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import AsyncIterator, Optional

from . import client as _sync
from . import errors
from ._transport import TLS, Canceler
from .v1 import leasehold_pb2 as pb

__all__ = ["Client", "Session", "Lock", "TLS"]


def _event_for(register) -> asyncio.Event:
    """An asyncio.Event of the running loop, set when the sync object's done fires."""
    loop = asyncio.get_running_loop()
    ev = asyncio.Event()

    def fire(_cause) -> None:
        try:
            loop.call_soon_threadsafe(ev.set)
        except RuntimeError:  # the loop is closed
            pass

    register(fire)
    return ev


class Client:
    """The asyncio twin of :class:`leasehold.Client` (same arguments)."""

    def __init__(self, endpoints=_sync.DEFAULT_ENDPOINT, *, tls: Optional[TLS] = None, token: Optional[str] = None, retry_timeout: float = 10.0):
        self.sync = _sync.Client(endpoints, tls=tls, token=token, retry_timeout=retry_timeout)

    async def close(self) -> None:
        await asyncio.to_thread(self.sync.close)

    async def __aenter__(self) -> "Client":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def session(self, **kw) -> "Session":
        """As :meth:`leasehold.Client.session`."""
        return Session(await asyncio.to_thread(lambda: self.sync.session(**kw)))

    @contextlib.asynccontextmanager
    async def lock(self, name: str, *, timeout: Optional[float] = None, ttl: float = 10.0, owner: str = "", **kw) -> AsyncIterator["Lock"]:
        """As :meth:`leasehold.Client.lock`: a session of its own, released and closed at the end."""
        s = await self.session(ttl=ttl, owner=owner)
        try:
            lock = await s.acquire(name, timeout=timeout, **kw)
            async with lock:
                yield lock
        finally:
            await s.close()

    async def release(self, name: str, lease_id: str, token: int, **kw) -> None:
        await asyncio.to_thread(lambda: self.sync.release(name, lease_id, token, **kw))

    async def status(self, name: str, **kw) -> pb.LockInfo:
        return await asyncio.to_thread(lambda: self.sync.status(name, **kw))

    async def kv_put(self, key: str, value, token: int, **kw) -> None:
        await asyncio.to_thread(lambda: self.sync.kv_put(key, value, token, **kw))

    async def kv_get(self, key: str, **kw) -> tuple[bytes, int]:
        return await asyncio.to_thread(lambda: self.sync.kv_get(key, **kw))

    async def kv_delete(self, key: str, token: int, **kw) -> None:
        await asyncio.to_thread(lambda: self.sync.kv_delete(key, token, **kw))

    async def watch(self, prefix: str = "", **kw) -> AsyncIterator[pb.Event]:
        """An async iterator of the resumable watch's events."""
        w = await asyncio.to_thread(lambda: self.sync.watch(prefix, **kw))
        it = iter(w)
        done = object()
        try:
            while True:
                ev = await asyncio.to_thread(next, it, done)
                if ev is done:
                    return
                yield ev
        finally:
            w.close()


class Session:
    """The asyncio view of a :class:`leasehold.Session`; ``done`` is an asyncio.Event."""

    def __init__(self, s: _sync.Session):
        self.sync = s
        self.id, self.ttl, self.owner = s.id, s.ttl, s.owner
        self.done = _event_for(s.on_done)

    @property
    def err(self) -> Optional[BaseException]:
        return self.sync.err

    async def __aenter__(self) -> "Session":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def close(self) -> None:
        await asyncio.to_thread(self.sync.close)

    async def acquire(self, name: str, **kw) -> "Lock":
        """As :meth:`leasehold.Session.acquire`; cancelling the task withdraws the wait."""
        c = Canceler()
        fut = asyncio.ensure_future(asyncio.to_thread(lambda: self.sync.acquire(name, _canceler=c, **kw)))
        try:
            return Lock(await asyncio.shield(fut))
        except asyncio.CancelledError:
            c.cancel(errors.Canceled(f"acquire {name}: cancelled"))
            try:
                granted = await fut  # the withdrawal runs before the cancellation goes on
            except BaseException:
                granted = None
            if granted is not None:  # granted before the cancel reached the call
                with contextlib.suppress(errors.LeaseholdError):
                    await asyncio.to_thread(granted.release)
            raise

    async def try_acquire(self, name: str, **kw) -> "Lock":
        return Lock(await asyncio.to_thread(lambda: self.sync.try_acquire(name, **kw)))


class Lock:
    """The asyncio view of a :class:`leasehold.Lock`; ``done`` is an asyncio.Event."""

    def __init__(self, lock: _sync.Lock):
        self.sync = lock
        self.name, self.token, self.lease_id, self.mode, self.slot = lock.name, lock.token, lock.lease_id, lock.mode, lock.slot
        self.done = _event_for(lock.on_done)

    @property
    def err(self) -> Optional[BaseException]:
        return self.sync.err

    def check(self) -> None:
        self.sync.check()

    async def release(self, **kw) -> None:
        await asyncio.to_thread(lambda: self.sync.release(**kw))

    async def __aenter__(self) -> "Lock":
        return self

    async def __aexit__(self, et, ev, tb) -> None:
        await asyncio.to_thread(self.sync.__exit__, et, ev, tb)
