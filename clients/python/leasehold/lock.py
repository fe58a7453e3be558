"""A holding as the client sees it: Lock, the view a caller holds, and
_Held, the record its Session keeps and its keepalive thread ends."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Callable, Optional

from . import errors
from .v1 import leasehold_pb2 as pb

if TYPE_CHECKING:
    from .client import Session

__all__ = ["Lock", "slot_key"]


def slot_key(name: str, slot: int) -> str:
    """The fenced key of permit slot ``slot`` of the semaphore ``name``: NAME/slot/K."""
    return f"{name}/slot/{slot}"


class _Held:
    """The client's record of one holding, shared by its Lock views."""

    def __init__(self, holding: pb.Holding):
        self.holding = holding
        self.done = threading.Event()
        self.err: Optional[BaseException] = None
        self._mu = threading.Lock()  # protects err, callbacks
        self._callbacks: list[Callable[[BaseException], None]] = []

    def end(self, cause: BaseException) -> None:
        with self._mu:
            if self.err is not None:
                return
            self.err = cause
            cbs, self._callbacks = self._callbacks, []
            self.done.set()
        for cb in cbs:
            cb(cause)

    def on_done(self, cb: Callable[[BaseException], None]) -> None:
        with self._mu:
            if self.err is None:
                self._callbacks.append(cb)
                return
            cause = self.err
        cb(cause)


class Lock:
    """A view of one holding: (name, lease id, token).

    ``done`` (a ``threading.Event``) is set when the lease may be lost, or
    the holding ended (released, or replaced by a newer grant to the
    session); ``err`` says why (LeaseLost, SessionClosed, Released or
    NotHolder). Used as a context manager it releases the lock at the end
    of the block.
    """

    def __init__(self, s: Session, h: _Held):
        self.session = s
        self._h = h

    def __repr__(self) -> str:
        return f"Lock(name={self.name!r}, token={self.token}, lease_id={self.lease_id!r})"

    @property
    def name(self) -> str:
        return self._h.holding.name

    @property
    def token(self) -> int:
        """The fencing token: pass it with every write to the protected resource."""
        return self._h.holding.token

    @property
    def lease_id(self) -> str:
        return self._h.holding.lease_id

    @property
    def mode(self) -> str:
        """``"exclusive"`` or ``"shared"``."""
        return "shared" if self._h.holding.mode == pb.LOCK_MODE_SHARED else "exclusive"

    @property
    def slot(self) -> int:
        """The permit slot 0..n-1 of a semaphore holding (0 otherwise)."""
        return self._h.holding.slot

    @property
    def slot_key(self) -> str:
        """The key a semaphore holder fences its slot with: NAME/slot/SLOT."""
        return slot_key(self.name, self.slot)

    @property
    def holding(self) -> pb.Holding:
        return self._h.holding

    @property
    def done(self) -> threading.Event:
        return self._h.done

    @property
    def err(self) -> Optional[BaseException]:
        return self._h.err

    def on_done(self, cb: Callable[[BaseException], None]) -> None:
        """Calls cb(cause) when ``done`` is set (at once if it is), on the
        thread that sets it (the keepalive thread at the deadline)."""
        self._h.on_done(cb)

    def check(self) -> None:
        """Raises the cause when ``done`` is set: a cheap check inside a loop."""
        if self._h.err is not None:
            raise self._h.err

    def release(self, *, timeout: Optional[float] = None) -> None:
        """Ends the holding. ``done`` is set first (Released), so the
        critical section stops before the name can pass on. Raises
        NotHolder when the holding is no longer current, changing nothing."""
        self._h.end(errors.Released("lock released"))
        self.session._forget(self._h)
        self.session.client.release(self.name, self.lease_id, self.token, timeout=timeout)

    def __enter__(self) -> "Lock":
        return self

    def __exit__(self, et, ev, tb) -> None:
        lost = self._h.err
        if isinstance(lost, errors.Released):
            return  # released inside the block
        try:
            self.release()
        except (errors.NotHolder, errors.LeaseExpired):
            if et is None and lost is None:
                raise
        if et is None and lost is not None:
            # The lease may have been lost during the block: what the block
            # did after that was not protected by the lock (the token was).
            raise lost
