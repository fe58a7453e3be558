"""Keepalives of a Client (Go: client/keepalive.go).

One thread per Client (the keeper) renews every live Session over one
bidirectional KeepAliveStream, while the Client has sessions:

    sessions -> due ones batched into one KeepAliveStreamRequest{lease_ids}
             -> one response, results in order

Each batch is one attempt with a short deadline, min(TTL/6, 1 s) of its
sessions, counted from when it was sent or from the stream's last answer,
whichever is later. A batch not answered in time, a broken stream, or a
retryable refusal (not-leader, unavailable) moves the stream to the next
endpoint and sends the renewals again, until each session's local safe
deadline decides: at that moment the keeper loses the session (its ``done``
fires). A renewal confirmed for a batch sent at t moves the deadline to
t + TTL·(1−drift) − margin. lease-expired is final.

Renewals due within 50 ms go together, and take with them every renewal
due within a quarter of its interval, so sessions created at different
times fall into step and share messages.

Lock order: Keeper._cv before Session._mu; a session is lost (its callbacks
run) with neither held.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import TYPE_CHECKING, Optional

import grpc

from . import errors
from .v1 import leasehold_pb2 as pb

if TYPE_CHECKING:
    from ._transport import Transport
    from .client import Session

MAX_ATTEMPT = 1.0
MAX_BATCH = 1000  # lease ids per message (the server takes 10,000)
RETRY = 0.05  # a refused renewal is sent again after this
COALESCE = 0.05


class _Stream:
    """One KeepAliveStream to one endpoint: requests from a queue, answers
    read by a thread of its own and handed to the keeper."""

    def __init__(self, keeper: "Keeper", ep: int):
        self.ep = ep
        self._q: "queue.Queue[Optional[pb.KeepAliveStreamRequest]]" = queue.Queue()
        stub = keeper.transport.eps[ep].keepalive_stub()
        self._call = stub.KeepAliveStream(self._requests(), metadata=keeper.transport.metadata)
        self._reader = threading.Thread(target=self._read, args=(keeper,), name="leasehold-keepalive-reader", daemon=True)
        self._reader.start()

    def _requests(self):
        while True:
            m = self._q.get()
            if m is None:
                return
            yield m

    def _read(self, keeper: "Keeper") -> None:
        try:
            for resp in self._call:
                keeper._reply(self, resp, None)
            keeper._reply(self, None, errors.Unavailable("keepalive stream ended"))
        except grpc.RpcError as err:
            from ._transport import server_error

            keeper._reply(self, None, server_error(err) or errors.Unavailable(f"keepalive stream: {err.details()}"))

    def send(self, m: pb.KeepAliveStreamRequest) -> None:
        self._q.put(m)

    def cancel(self) -> None:
        """Ends the stream; its reader thread ends soon after (join)."""
        self._q.put(None)
        self._call.cancel()

    def join(self) -> None:
        self._reader.join()


class _Batch:
    __slots__ = ("sent", "attempt", "sessions")

    def __init__(self, sent: float, attempt: float, sessions: list):
        self.sent, self.attempt, self.sessions = sent, attempt, sessions

    def deadline(self, last_answer: float) -> float:
        return (last_answer if last_answer > self.sent else self.sent) + self.attempt


class Keeper:
    def __init__(self, transport: "Transport"):
        self.transport = transport
        self._cv = threading.Condition()  # protects following
        self._sessions: set = set()
        self._replies: list = []  # (stream, msg, err) not yet looked at
        self._thread: Optional[threading.Thread] = None
        self._closed = False

    def add(self, s: "Session", sent: float) -> None:
        with self._cv:
            s._ka_next = sent + s.keepalive
            s._ka_inflight = False
            if not self._closed:
                self._sessions.add(s)
                if self._thread is None:
                    self._thread = threading.Thread(target=self._loop, name="leasehold-keepalive", daemon=True)
                    self._thread.start()
                self._cv.notify_all()
                return
        s._lose(errors.LeaseLost("the client was closed"))

    def remove(self, s: "Session") -> None:
        with self._cv:
            self._sessions.discard(s)
            self._cv.notify_all()

    def close(self) -> None:
        with self._cv:
            if self._closed:
                return
            self._closed = True
            lost = list(self._sessions)
            self._sessions.clear()
            t = self._thread
            self._cv.notify_all()
        if t is not None and t is not threading.current_thread():
            t.join()
        for s in lost:
            s._lose(errors.LeaseLost("the client was closed"))

    def _reply(self, st: _Stream, msg, err) -> None:
        with self._cv:
            self._replies.append((st, msg, err))
            self._cv.notify_all()

    def _loop(self) -> None:
        st: Optional[_Stream] = None
        ep = self.transport.current()
        n = len(self.transport.eps)
        inflight: list[_Batch] = []
        last_answer = 0.0
        failures = 0
        pause = 0.0
        move_to = -1
        lost: list = []  # (session, error) to lose outside the lock
        dead: list[_Stream] = []  # cancelled streams whose reader is joined outside the lock

        def drop() -> None:
            nonlocal st, last_answer
            if st is not None:
                st.cancel()
                dead.append(st)
            st, last_answer = None, 0.0

        def fail(now: float) -> None:
            nonlocal st, ep, move_to, failures, pause, inflight, last_answer
            drop()
            st, last_answer = None, 0.0
            ep = (ep + 1) % n
            if move_to >= 0:
                ep, move_to = move_to, -1
            failures += 1
            retry = now
            if failures % n == 0:  # every endpoint failed: wait a little
                pause = now + min(failures // n * 0.02, 0.2)
                retry = pause
            for b in inflight:
                for s in b.sessions:
                    s._ka_inflight = False
                    s._ka_next = retry
            inflight = []
            self._replies.clear()

        try:
            while True:
                for d in dead:
                    d.join()  # its reader may be waiting for the lock
                dead.clear()
                with self._cv:
                    for s, e in lost:
                        self._sessions.discard(s)
                    todo, lost = lost, []
                if todo:
                    for s, e in todo:
                        s._lose(e)
                with self._cv:
                    if self._closed or not self._sessions:
                        self._thread = None
                        return
                    now = time.monotonic()
                    # Answers first: they may renew sessions about to be lost.
                    replies, self._replies = self._replies, []
                    for rst, msg, err in replies:
                        if rst is not st:
                            continue  # from a stream already dropped
                        if err is not None or not inflight:
                            if err is not None and not err.from_server:
                                self.transport.note_failure(ep)
                            fail(now)
                            break
                        last_answer = now
                        b = inflight.pop(0)
                        j = self.transport.leader_endpoint(msg.leader_api_addr)
                        if j >= 0 and j != ep:
                            move_to = j
                        if not self._settle(now, b, msg, lost):
                            fail(now)
                            break
                        failures = 0
                        if move_to >= 0 and not inflight and st is not None:
                            drop()
                            ep, move_to = move_to, -1
                    if inflight and now >= inflight[0].deadline(last_answer):
                        self.transport.note_failure(ep)  # not answered in time
                        fail(now)
                    for s in self._sessions:
                        if now >= s.deadline:
                            lost.append((s, errors.LeaseLost("no renewal confirmed before the local deadline")))
                    if lost:
                        continue
                    due = []
                    if now >= pause:
                        live = [s for s in self._sessions if not s._ka_inflight]
                        if any(s._ka_next <= now + COALESCE for s in live):
                            for s in live:
                                if s._ka_next <= now + max(COALESCE, s.keepalive / 4):
                                    s._ka_inflight = True
                                    due.append(s)
                    for i in range(0, len(due), MAX_BATCH):
                        part = due[i : i + MAX_BATCH]
                        b = _Batch(now, min([MAX_ATTEMPT] + [s.ttl / 6 for s in part]), part)
                        inflight.append(b)
                        if st is None:
                            st = _Stream(self, ep)
                        st.send(pb.KeepAliveStreamRequest(lease_ids=[s.id for s in part]))
                    wake = now + 3600
                    for s in self._sessions:
                        wake = min(wake, s.deadline)
                        if not s._ka_inflight:
                            wake = min(wake, max(s._ka_next, pause))
                    if inflight:
                        wake = min(wake, inflight[0].deadline(last_answer))
                    if not self._replies:
                        self._cv.wait(max(wake - time.monotonic(), 0.0005))
        finally:
            drop()
            for d in dead:
                d.join()

    def _settle(self, now: float, b: _Batch, msg: pb.KeepAliveStreamResponse, lost: list) -> bool:
        """Applies the answer to batch b; False when a renewal was refused
        with a code that says this node cannot renew (move on)."""
        results = list(msg.results)
        if len(results) != len(b.sessions):
            results = []  # a malformed answer: every renewal is retried
        ok = bool(results)
        for i, s in enumerate(b.sessions):
            s._ka_inflight = False
            if not results or results[i].lease_id != s.id:
                code = "unavailable"
            else:
                code = results[i].error_code
            if code == "":
                if s._renewed_at(b.sent):
                    s._ka_next = b.sent + s.keepalive
            elif code == "lease-expired":
                lost.append((s, errors.LeaseLost("keepalive: the server expired the session")))
            elif code in ("not-leader", "unavailable"):
                ok = False
                s._ka_next = now
            else:  # outcome-unknown, resource-exhausted, ...: try again soon
                s._ka_next = now + RETRY
        return ok
