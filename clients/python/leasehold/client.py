"""The synchronous client: Client, Session, Lock (Go: package client).

The lease and the clock
-----------------------
A Session counts its lease from the moment it SENT each request that
renewed it (create, acquire, keepalive) and considers it possibly lost at::

    sent + TTL·(1−drift) − margin        (defaults: drift 0.02, margin 0.1 s)

unless a later renewal was confirmed first. At that moment ``Session.done``
and every ``Lock.done`` are set and their callbacks run: stop the critical
section. The server frees the lock no earlier than answered + TTL·(1+drift),
so as long as clock rates differ by less than drift the holder stops first.
Pauses (GC, a frozen VM) can still let a write out late: pass
``Lock.token`` to the resource so that it refuses it (``leasehold.fence``).

Retries and unknown outcomes
----------------------------
Calls fail over between endpoints on unavailable and not-leader. Every
acquire carries a fresh random wait id; when it ends in anything but a
definite refusal (a timeout, a cancel, a lost reply, outcome-unknown) the
client withdraws that wait id with CancelWait, which also releases a grant
that raced with giving up, so an unknown outcome never leaves a second
grant behind. If even the withdrawal fails, the error is OutcomeUnknown.
A write whose reply was lost (kv_put, kv_delete) raises OutcomeUnknown.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import threading
import time
from typing import Callable, Iterator, Optional

from . import errors
from ._keeper import Keeper
from ._transport import HARMLESS, READ, TLS, WRITE, Canceler, Transport
from .v1 import leasehold_pb2 as pb
from .lock import Lock, _Held, slot_key
from .watch import Watch

__all__ = ["Client", "Session", "Lock", "TLS", "DEFAULT_ENDPOINT", "slot_key"]

#: The address ``leasehold serve`` listens on by default.
DEFAULT_ENDPOINT = "127.0.0.1:7420"

# cancel_wait_timeout bounds the withdrawal of an attempt whose outcome the
# caller did not learn.
CANCEL_WAIT_TIMEOUT = 5.0

_MODES = {"exclusive": pb.LOCK_MODE_EXCLUSIVE, "shared": pb.LOCK_MODE_SHARED}


def new_wait_id() -> int:
    """A random non-zero wait id (api.NewWaitID)."""
    while True:
        w = secrets.randbits(64)
        if w:
            return w


def _definite(err: BaseException) -> bool:
    """Whether err is a refusal that certainly granted nothing."""
    return isinstance(
        err,
        (
            errors.InvalidArgument,
            errors.NotHolder,
            errors.StaleToken,
            errors.LeaseExpired,
            errors.LockDelay,
            errors.Locked,
            errors.ResourceExhausted,
            errors.PermissionDenied,
            errors.NotFound,
        ),
    )


class Client:
    """A leasehold client for the comma-separated ``endpoints`` ("host:port",
    "http://host:port" or "https://host:port"). Safe for use from many threads.

    Args:
        endpoints: a string or a list; default ``127.0.0.1:7420``.
        tls: a :class:`TLS` (CA, client certificate for mutual TLS). With it,
            endpoints without a scheme mean https:// and http:// is refused;
            without it, https:// endpoints use the system's roots.
        token: a bearer token (``leasehold auth token create``), sent as
            ``authorization: Bearer …`` on every call.
        retry_timeout: how long a call keeps failing over when no endpoint
            can serve it (default 10 s).

    It does not contact the servers: the first call does, and fails at once
    with Unavailable ("no server at ADDR") when every endpoint refuses.
    """

    def __init__(
        self,
        endpoints: str | list[str] = DEFAULT_ENDPOINT,
        *,
        tls: Optional[TLS] = None,
        token: Optional[str] = None,
        retry_timeout: float = 10.0,
    ):
        self._t = Transport(endpoints, tls, token, retry_timeout)
        self._keeper = Keeper(self._t)

    def close(self) -> None:
        """Stops the keepalive and closes the connections. Sessions still
        open are lost at once (their ``done`` fires): close them first.
        Idempotent."""
        self._keeper.close()
        self._t.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------ sessions

    def session(
        self,
        *,
        ttl: float = 10.0,
        owner: str = "",
        drift: float = 0.02,
        margin: float = 0.1,
        keepalive: Optional[float] = None,
        timeout: Optional[float] = None,
    ) -> "Session":
        """Creates a session (a lease) with the TTL asked for, in seconds
        (the server grants 1 s to 1 h), and starts renewing it every
        ``keepalive`` seconds (default TTL/3). ``drift`` and ``margin``
        set the local safe deadline (see the module doc)."""
        if not (0 <= drift < 1) or margin < 0:
            raise errors.InvalidArgument("drift must be in [0, 1) and margin ≥ 0")
        sent = time.monotonic()
        res = self._t.call(
            "create session", "CreateSession", pb.CreateSessionRequest(ttl_ms=int(ttl * 1000), owner=owner), HARMLESS, timeout
        )
        s = Session(self, res.lease_id, res.ttl_ms / 1000.0, res.owner, drift, margin, keepalive, sent)
        self._keeper.add(s, sent)
        return s

    @contextlib.contextmanager
    def lock(
        self,
        name: str,
        *,
        timeout: Optional[float] = None,
        ttl: float = 10.0,
        owner: str = "",
        mode: str = "exclusive",
        permits: int = 0,
        lock_delay: float = 0.0,
    ) -> Iterator["Lock"]:
        """Holds ``name`` for a ``with`` block, in a session of its own::

            with client.lock("reports", timeout=30) as lock:
                store.write(value, token=lock.token)

        Waits in the server's FIFO queue (at most ``timeout`` seconds:
        DeadlineExceeded), releases the lock and closes the session at the
        end of the block. A session per lock: two ``with client.lock(n)``
        blocks exclude each other even in one process.
        """
        s = self.session(ttl=ttl, owner=owner)
        try:
            with s.acquire(name, timeout=timeout, mode=mode, permits=permits, lock_delay=lock_delay) as lock:
                yield lock
        finally:
            s.close()

    # ------------------------------------------------------- plain calls

    def release(self, name: str, lease_id: str, token: int, *, timeout: Optional[float] = None) -> None:
        """Ends the holding (name, lease_id, token), as the CLI does. A handle
        that is not the current holding raises NotHolder and changes
        nothing. A release whose outcome is unknown is sent once more: if
        the holding is gone by then (NotHolder, LeaseExpired: tokens are
        never reused, so it cannot be held again) it is released either way."""
        req = pb.ReleaseRequest(name=name, lease_id=lease_id, token=token)
        try:
            self._t.call("release", "Release", req, WRITE, timeout)
            return
        except errors.OutcomeUnknown as first:
            unknown = first
        try:
            self._t.call("release", "Release", req, WRITE, timeout)
        except (errors.NotHolder, errors.LeaseExpired):
            return
        except errors.DeadlineExceeded:
            raise unknown from None

    def status(self, name: str, *, stale: bool = False, timeout: Optional[float] = None) -> pb.LockInfo:
        """Describes the lock name (holders, waiters, lock-delay)."""
        return self._t.call("status", "Status", pb.StatusRequest(name=name, stale=stale), READ, timeout).lock

    def list(self, prefix: str = "", *, stale: bool = False, limit: int = 0, timeout: Optional[float] = None) -> list[pb.LockInfo]:
        """Describes the held, queued or delayed locks whose name has prefix."""
        return list(self._t.call("list", "List", pb.ListRequest(prefix=prefix, stale=stale, limit=limit), READ, timeout).locks)

    def kv_put(self, key: str, value: bytes | str, token: int, *, strict: bool = False, timeout: Optional[float] = None) -> None:
        """Writes value under key in the built-in fenced KV iff token is not
        stale: token ≥ the key's last accepted token (> with strict). A
        stale token raises StaleToken (``e.last_token``); nothing changes."""
        if isinstance(value, str):
            value = value.encode()
        self._t.call("kv put", "KvPut", pb.KvPutRequest(key=key, value=value, token=token, strict=strict), WRITE, timeout)

    def kv_get(self, key: str, *, stale: bool = False, timeout: Optional[float] = None) -> tuple[bytes, int]:
        """Reads key from the fenced KV: (value, token that wrote it); NotFound when missing."""
        res = self._t.call("kv get", "KvGet", pb.KvGetRequest(key=key, stale=stale), READ, timeout)
        return res.value, res.token

    def kv_delete(self, key: str, token: int, *, strict: bool = False, timeout: Optional[float] = None) -> None:
        """Removes key's value iff token is not stale (the rule of kv_put); the fence stays."""
        self._t.call("kv delete", "KvDelete", pb.KvDeleteRequest(key=key, token=token, strict=strict), WRITE, timeout)

    def watch(
        self,
        prefix: str = "",
        *,
        from_index: int = 0,
        on_progress: Optional[Callable[[int], None]] = None,
        on_compacted: Optional[Callable[[pb.WatchCompacted], None]] = None,
    ) -> Watch:
        """Streams the lock events of names with prefix (see :class:`Watch`):
        resumed on the next endpoint with no gap and no duplicate when a
        stream breaks. Returns once a server registered the watch."""
        return Watch(self._t, prefix, from_index, on_progress, on_compacted)

    def _withdraw(self, lease_id: str, name: str, wait_id: int, err: BaseException) -> BaseException:
        """Cancels the wait wait_id (and releases its grant, if it was made)
        after an attempt that failed with err; returns the error the caller
        sees: err, unless the withdrawal failed too (OutcomeUnknown), or
        succeeded after an unknown outcome (then nothing is held:
        Unavailable)."""
        try:
            self._t.call(
                "withdraw " + name,
                "CancelWait",
                pb.CancelWaitRequest(name=name, lease_id=lease_id, wait_id=wait_id),
                HARMLESS,
                CANCEL_WAIT_TIMEOUT,
            )
        except errors.LeaseExpired:
            pass
        except errors.LeaseholdError as cerr:
            return errors.OutcomeUnknown(
                f"{err}; withdrawing failed too ({cerr.message}): the session may hold {name!r} until it ends"
            )
        if isinstance(err, errors.OutcomeUnknown):
            return errors.Unavailable(f"{err.message}; withdrawn: not holding {name}")
        return err


class Session:
    """One lease: a TTL kept alive by its Client's keepalive stream (one per
    Client, shared by all its sessions), under which locks are held.

    ``done`` (a ``threading.Event``) is set the moment the lease may be lost
    (the local safe deadline passed without a confirmed renewal, or the
    server said it expired) or the session was closed; ``err`` says which
    (LeaseLost or SessionClosed). Use it as a context manager to close it.

    A session is not a mutex between threads of one process: two threads
    acquiring one name under one session both get the holding. Use a
    session per party that must exclude the others.
    """

    def __init__(self, c: Client, lease_id: str, ttl: float, owner: str, drift: float, margin: float, keepalive: Optional[float], sent: float):
        self.client = c
        self.id = lease_id
        self.ttl = ttl
        self.owner = owner
        self.drift, self.margin = drift, margin
        self.keepalive = keepalive if keepalive and keepalive > 0 else ttl / 3
        self.done = threading.Event()
        self._mu = threading.Lock()  # protects following
        self._deadline = self._safe(sent)
        self._lost: Optional[BaseException] = None
        self._callbacks: list[Callable[[BaseException], None]] = []
        self._held: dict[str, _Held] = {}  # by name: the holdings this session learned
        self._naming: dict[str, list] = {}  # by name: [threading.Lock, refs] of the acquire running
        self._running: set[Canceler] = set()
        # The keeper's fields, protected by Keeper._cv.
        self._ka_next = 0.0
        self._ka_inflight = False

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Session(id={self.id!r}, ttl={self.ttl}, owner={self.owner!r})"

    @property
    def lease_id(self) -> str:
        return self.id

    @property
    def err(self) -> Optional[BaseException]:
        """None while ``done`` is unset; then LeaseLost or SessionClosed."""
        with self._mu:
            return self._lost

    @property
    def deadline(self) -> float:
        """The local safe deadline, in ``time.monotonic()`` time: until then
        the lease is certainly held, given bounded clock drift."""
        with self._mu:
            return self._deadline

    def on_done(self, cb: Callable[[BaseException], None]) -> None:
        """Calls cb(cause) when ``done`` is set (at once if it is), on the
        thread that sets it: keep it short."""
        with self._mu:
            if self._lost is None:
                self._callbacks.append(cb)
                return
            cause = self._lost
        cb(cause)

    def _safe(self, sent: float) -> float:
        return sent + self.ttl * (1 - self.drift) - self.margin

    def _renewed_at(self, sent: float) -> bool:
        """Records a renewal confirmed for a request sent at sent; the
        deadline only moves later. False when already lost: a lost session
        never comes back."""
        with self._mu:
            if self._lost is not None:
                return False
            self._deadline = max(self._deadline, self._safe(sent))
            return True

    def _lose(self, cause: BaseException) -> None:
        """Sets done with cause (the first cause wins), and with it done of
        every held lock, and ends every running acquire."""
        with self._mu:
            if self._lost is not None:
                return
            self._lost = cause
            cbs, self._callbacks = self._callbacks, []
            held = list(self._held.values())
            running = list(self._running)
            self.done.set()
        for h in held:
            h.end(cause)
        for c in running:
            c.cancel(cause)
        for cb in cbs:
            cb(cause)

    def close(self, *, timeout: Optional[float] = None) -> None:
        """Stops renewing and ends the session on the server, releasing its
        locks without lock-delay. ``done`` is set with SessionClosed first."""
        self.client._keeper.remove(self)
        self._lose(errors.SessionClosed("session closed"))
        try:
            self.client._t.call("close session", "CloseSession", pb.CloseSessionRequest(lease_id=self.id), HARMLESS, timeout)
        except errors.LeaseExpired:
            pass  # already gone: nothing is held

    def orphan(self) -> None:
        """Stops renewing without ending the session: the server expires it
        after its TTL. ``done`` is set at once with LeaseLost."""
        self.client._keeper.remove(self)
        self._lose(errors.LeaseLost("session orphaned"))

    # --------------------------------------------------------------- locks

    def acquire(
        self,
        name: str,
        *,
        timeout: Optional[float] = None,
        mode: str = "exclusive",
        permits: int = 0,
        lock_delay: float = 0.0,
        value: bytes = b"",
        _canceler: Optional[Canceler] = None,
    ) -> "Lock":
        """Takes the lock name, waiting in the server's FIFO queue until it
        is granted or ``timeout`` seconds pass (DeadlineExceeded; the queue
        entry is withdrawn). ``mode="shared"`` asks for a read lock;
        ``permits=n`` makes the name a semaphore of n holders (``Lock.slot``).
        ``lock_delay``: after this holding ends by expiry, the name stays
        free for so many seconds (≤ 60). Acquiring a name the session
        already holds returns another view of the same holding. When the
        lease is lost while waiting, the wait is withdrawn and LeaseLost
        raised."""
        req = pb.AcquireRequest(
            name=name, lease_id=self.id, lock_delay_ms=int(lock_delay * 1000), mode=_mode(mode), permits=permits, value=value
        )
        return self._acquire(name, "Acquire", req, timeout, _canceler)

    def try_acquire(
        self, name: str, *, mode: str = "exclusive", permits: int = 0, lock_delay: float = 0.0, value: bytes = b"", timeout: Optional[float] = None
    ) -> "Lock":
        """Takes the lock name if it is free now; otherwise raises Locked
        (naming the holder) or LockDelay at once."""
        req = pb.TryAcquireRequest(
            name=name, lease_id=self.id, lock_delay_ms=int(lock_delay * 1000), mode=_mode(mode), permits=permits, value=value
        )
        return self._acquire(name, "TryAcquire", req, timeout)

    def _acquire(self, name: str, method: str, req, timeout: Optional[float], canceler: Optional[Canceler] = None) -> "Lock":
        if self.err is not None:
            raise self.err
        with self._name_lock(name, timeout):
            known = self._known(name)  # a re-entrant acquire: never withdrawn
            canceler = canceler or Canceler()
            with self._mu:
                self._running.add(canceler)
                lost = self._lost
            if lost is not None:
                canceler.cancel(lost)
            req.wait_id = new_wait_id()
            sent = time.monotonic()
            try:
                # Only a wait needs cancelling when the lease is lost; a try
                # answers at once and goes out as a plain blocking call.
                waits = method == "Acquire"
                res = self.client._t.call(
                    ("acquire " if waits else "try acquire ") + name, method, req, HARMLESS, timeout, canceler if waits else None
                )
            except BaseException as err:
                out = err
                if not known and not _definite(err):
                    out = self.client._withdraw(self.id, name, req.wait_id, err)
                lost = self.err
                if canceler.reason is not None and lost is not None:
                    raise lost from None
                if out is err:
                    raise
                raise out from None
            finally:
                with self._mu:
                    self._running.discard(canceler)
            if not self._renewed_at(sent):
                raise self.err  # type: ignore[misc]
            return self._hold(res.holding)

    @contextlib.contextmanager
    def _name_lock(self, name: str, timeout: Optional[float]):
        """One acquire of a name at a time in this session: a withdrawal
        must not release a holding a concurrent attempt learned."""
        with self._mu:
            entry = self._naming.setdefault(name, [threading.Lock(), 0])
            entry[1] += 1
        try:
            if not entry[0].acquire(timeout=-1 if timeout is None else timeout):
                raise errors.DeadlineExceeded(f"acquire {name}: another acquire of the name in this session ran past the deadline")
            try:
                yield
            finally:
                entry[0].release()
        finally:
            with self._mu:
                entry[1] -= 1
                if entry[1] == 0:
                    del self._naming[name]

    def _known(self, name: str) -> bool:
        with self._mu:
            h = self._held.get(name)
            return h is not None and not h.done.is_set()

    def _hold(self, holding: pb.Holding) -> "Lock":
        """A Lock view of the grant: the holding the session already knows
        when the token matches, or a new one that replaces an older."""
        with self._mu:
            cur = self._held.get(holding.name)
            if cur is not None and cur.holding.token == holding.token and not cur.done.is_set():
                return Lock(self, cur)
            h = _Held(holding)
            self._held[holding.name] = h
            lost = self._lost
        if cur is not None:
            # The session was granted name again, so the older holding ended.
            cur.end(errors.NotHolder(f"the holding with token {cur.holding.token} ended"))
        if lost is not None:
            h.end(lost)
        return Lock(self, h)

    def _forget(self, h: _Held) -> None:
        with self._mu:
            if self._held.get(h.holding.name) is h:
                del self._held[h.holding.name]


def _mode(mode: str) -> int:
    try:
        return _MODES[mode]
    except KeyError:
        raise errors.InvalidArgument(f"mode {mode!r} is not 'exclusive' or 'shared'") from None


def default_owner() -> str:
    """hostname:pid, the CLI's default owner label."""
    return f"{os.uname().nodename}:{os.getpid()}"
