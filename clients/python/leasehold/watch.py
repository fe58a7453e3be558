"""The resumable watch (Go: client/watch.go).

Nothing is lost silently. When the stream breaks (the node stops or is
unreachable, the connection is cut, the watcher fell behind and was ended
with resource-exhausted) the watch resumes on the next endpoint from the
last event delivered, with no gap and no duplicate; it gives up with
Unavailable when no endpoint takes it for the client's retry timeout.
When the events to resume from are no longer in the server's history, the
server sends the prefix's state instead: with ``on_compacted`` the watch
hands it over and continues after its index; without it, iteration raises
Compacted.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Callable, Iterator, Optional

import grpc

from . import errors
from ._transport import READ, classify, refused
from .v1 import leasehold_pb2 as pb

if TYPE_CHECKING:
    from ._transport import Transport

_RESUMABLE = (errors.Unavailable, errors.NotLeader, errors.ResourceExhausted)


class _Cursor:
    """How far a watch got: the point it resumes from, and the filter that
    drops what a resumed stream sends again (the events of one log entry
    come in the same order from every node)."""

    def __init__(self, from_index: int):
        self.live = from_index == 0  # no resume point yet: the first stream starts from now
        self.done = max(from_index, 1) - 1  # every event with index ≤ done was delivered
        self.last = 0  # index of the last event delivered; > done when more of it may follow
        self.n_last = 0  # events delivered with index last
        self.skip = 0  # events of index last the current stream sends again
        self.states: list[pb.WatchCompacted] = []

    def resume(self) -> int:
        if self.live:
            return 0
        if self.last > self.done:
            self.skip = self.n_last
            return self.last
        self.skip = 0
        return self.done + 1

    def resync(self, i: int) -> None:
        self.live = False
        self.done = self.last = i
        self.n_last = self.skip = 0

    def progress(self, i: int) -> None:
        self.live = False
        self.done = max(self.done, i)

    def admit(self, ev: pb.Event) -> bool:
        i = ev.index
        if i <= self.done:
            return False
        if i == self.last:
            if self.skip > 0:
                self.skip -= 1
                return False
            self.n_last += 1
            return True
        if i > self.last:
            self.done = i - 1  # the stream is in log order
            self.last, self.n_last, self.skip = i, 1, 0
            return True
        return False


class Watch:
    """An iterator of ``leasehold.v1.Event`` (each with its log ``index``),
    in log order. ``close()`` (or leaving a ``with`` block) ends it; then
    iteration stops without error. ``on_progress(index)``: every event of
    the prefix up to index was delivered (resuming at index + 1 misses
    nothing)."""

    def __init__(self, t: "Transport", prefix: str, from_index: int, on_progress, on_compacted):
        self._t = t
        self._req = pb.WatchRequest(prefix=prefix, progress_notify=True)
        self._cur = _Cursor(from_index)
        self._on_progress: Optional[Callable[[int], None]] = on_progress
        self._on_compacted: Optional[Callable[[pb.WatchCompacted], None]] = on_compacted
        self._mu = threading.Lock()  # protects following
        self._call = None
        self._closed = False
        self._open(next_ep=False)

    def close(self) -> None:
        with self._mu:
            self._closed = True
            call = self._call
        if call is not None:
            call.cancel()

    def __enter__(self) -> "Watch":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        with self._mu:
            return self._closed

    def _states(self) -> None:
        for st in self._cur.states:
            self._on_compacted(st)  # type: ignore[misc]
        self._cur.states = []

    def _progress(self) -> None:
        if self._on_progress is not None:
            self._on_progress(self._cur.done)

    def _open(self, next_ep: bool) -> None:
        """Starts the watch at the cursor's resume point on the current
        endpoint (the next one with next_ep), failing over like a call, and
        returns once the server registered it (its first progress
        response). A first open fails at once when every endpoint refuses
        the connection; a resume keeps trying."""
        t = self._t
        stop = time.monotonic() + t.retry_timeout
        backoff = 0.01
        first = not next_ep
        attempt = 0
        while True:
            attempt += 1
            if self.closed:
                return
            if next_ep:
                t.move_from(t.current())
                next_ep = False
            i = t.current()
            self._req.from_index = self._cur.resume()
            call = t.eps[i].stub.Watch(self._req, metadata=t.metadata)
            with self._mu:
                self._call = call
                if self._closed:
                    call.cancel()
                    return
            err: Optional[errors.LeaseholdError] = None
            state: Optional[pb.WatchCompacted] = None
            try:
                m = next(call)
                if not m.HasField("compacted"):
                    self._cur.progress(m.applied_index)
                    return
                state = m.compacted
                for _ in call:  # the server ends it with compacted
                    pass
            except StopIteration:
                err = errors.Unavailable("the watch ended before it was registered")
            except grpc.RpcError as rpc_err:
                if self.closed:
                    return
                err = classify(rpc_err, READ, False)
                refused_now = refused(rpc_err)
                if first and refused_now and attempt == len(t.eps):
                    raise errors.Unavailable("watch: no server at " + t.addrs()) from None
                first = first and refused_now
            if state is not None:
                if self._on_compacted is not None:
                    self._cur.resync(state.index)
                    self._cur.states.append(state)
                    attempt -= 1
                    continue
                raise err if isinstance(err, errors.Compacted) else errors.Compacted("watch: the events are no longer in the server's history")
            assert err is not None
            if not isinstance(err, _RESUMABLE) or time.monotonic() > stop:
                raise err
            t.move_from(i)
            if attempt % len(t.eps) == 0:
                time.sleep(backoff)
                backoff = min(2 * backoff, 0.1)

    def __iter__(self) -> Iterator[pb.Event]:
        self._states()
        self._progress()
        while True:
            resynced = False
            call = self._call
            err: Optional[errors.LeaseholdError] = None
            try:
                for m in call:
                    if m.HasField("event"):
                        if self._cur.admit(m.event):
                            yield m.event
                        continue
                    if m.HasField("compacted"):
                        if self._on_compacted is not None:
                            self._cur.resync(m.compacted.index)  # the stream ends with compacted next
                            self._on_compacted(m.compacted)
                            resynced = True
                        continue
                    self._cur.progress(m.applied_index)
                    self._progress()
            except grpc.RpcError as rpc_err:
                if self.closed:
                    return
                err = classify(rpc_err, READ, False)
            if self.closed:
                return
            if err is not None and not resynced and not isinstance(err, _RESUMABLE):
                raise err
            # A resync continues on the node that sent the state.
            self._open(next_ep=not resynced)
            if self.closed:
                return
            self._states()

