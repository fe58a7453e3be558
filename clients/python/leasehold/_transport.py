"""Endpoints, channels, and one call with failover: the Go client's call().

Every call fails over between the endpoints when a node is unreachable or
cannot serve (unavailable, not-leader: the request was not applied). A call
that may have applied (leadership moved, or the connection broke after the
request was sent) raises OutcomeUnknown instead of being retried, except
where a retry is harmless: CreateSession, Acquire, TryAcquire (each carries
its wait id, so a repeat is the same request), KeepAlive, CloseSession and
CancelWait. Reads whose reply was lost are unavailable (ask again).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any, Optional

import grpc

from . import errors
from ._internal import rpc_status_pb2
from .v1 import leasehold_pb2 as pb
from .v1 import leasehold_pb2_grpc as pb_grpc

# Kinds of request, for the retry rules.
READ = "read"  # changes nothing: a lost reply means "ask again"
HARMLESS = "harmless"  # applying it twice has the effect of once
WRITE = "write"  # may not be sent again after an unclear failure

_DETAIL_TYPE = "type.googleapis.com/leasehold.v1.ErrorDetail"

# LEADER_BACKOFF: an endpoint a call could not get an answer from is not
# taken as the leader on a follower's word for this long (Go: leaderBackoff).
LEADER_BACKOFF = 30.0

# Channel options: a connection that received nothing for 5 s gets an
# HTTP/2 ping and is closed when it is not answered within 5 s (the Go
# client's WithConnectionCheck defaults), and a refused endpoint is dialled
# again after at most a second, not grpc's default of up to two minutes.
# (grpc.min_reconnect_backoff_ms stays at its default: it is also the time
# a connection attempt, TLS handshake included, may take.)
_CHANNEL_OPTIONS = [
    ("grpc.keepalive_time_ms", 5000),
    ("grpc.keepalive_timeout_ms", 5000),
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
    ("grpc.enable_retries", 0),
]


@dataclass(frozen=True)
class TLS:
    """TLS settings of a Client: ``ca`` verifies the servers (PEM bytes or a
    file path; None: the system's roots), ``cert`` and ``key`` are the client
    certificate a server with mutual TLS (``serve --client-ca``) requires.
    ``server_name`` overrides the name checked against the server's
    certificate."""

    ca: Optional[bytes | str] = None
    cert: Optional[bytes | str] = None
    key: Optional[bytes | str] = None
    server_name: str = ""


def _pem(v: Optional[bytes | str]) -> Optional[bytes]:
    if v is None or isinstance(v, bytes):
        return v
    with open(v, "rb") as f:
        return f.read()


class Endpoint:
    """One server address with its channels: one for calls and one of its
    own for the keepalive stream, so that a renewal never waits behind the
    flow control of other calls."""

    def __init__(self, addr: str, target: str, creds: Optional[grpc.ChannelCredentials], options: list):
        self.addr = addr
        self.host_port = target
        self.secure = creds is not None
        self._target, self._creds, self._options = target, creds, options
        self.channel = self._open(options)
        self.stub = pb_grpc.LeaseholdServiceStub(self.channel)
        self._ka_channel: Optional[grpc.Channel] = None
        self._ka_lock = threading.Lock()

    def _open(self, options: list) -> grpc.Channel:
        if self._creds is not None:
            return grpc.secure_channel(self._target, self._creds, options=options)
        return grpc.insecure_channel(self._target, options=options)

    def keepalive_stub(self) -> pb_grpc.LeaseholdServiceStub:
        with self._ka_lock:
            if self._ka_channel is None:
                # A subchannel pool of its own: its own TCP connection.
                self._ka_channel = self._open(self._options + [("grpc.use_local_subchannel_pool", 1)])
            return pb_grpc.LeaseholdServiceStub(self._ka_channel)

    def close(self) -> None:
        self.channel.close()
        with self._ka_lock:
            if self._ka_channel is not None:
                self._ka_channel.close()
                self._ka_channel = None


def parse_endpoints(endpoints: str | list[str], tls: Optional[TLS]) -> list[tuple[str, str, bool]]:
    """Returns (addr, host:port, use TLS) per endpoint, by the Go client's
    rules: "host:port" is https with TLS configured and plain otherwise,
    "https://" always TLS, "http://" plain and refused with TLS configured."""
    if isinstance(endpoints, str):
        endpoints = endpoints.split(",")
    out = []
    for ep in endpoints:
        ep = ep.strip()
        if not ep:
            continue
        scheme, sep, rest = ep.partition("://")
        if not sep:
            scheme, rest = "", ep
        rest = rest.rstrip("/")
        if scheme == "http":
            if tls is not None:
                raise errors.InvalidArgument(f"endpoint {ep} is http:// but TLS is configured; use https://")
            out.append((ep, rest, False))
        elif scheme == "https":
            out.append((ep, rest, True))
        elif scheme == "":
            out.append((ep, rest, tls is not None))
        else:
            raise errors.InvalidArgument(f"endpoint {ep}: scheme {scheme}:// is not http:// or https://")
    if not out:
        raise errors.InvalidArgument("no endpoints given")
    return out


class Canceler:
    """Lets another thread end a call in flight: cancel() cancels the grpc
    future of the running attempt (and every later one) with a reason."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # protects following
        self._futures: set = set()
        self.reason: Optional[BaseException] = None

    def cancel(self, reason: BaseException) -> None:
        with self._lock:
            if self.reason is not None:
                return
            self.reason = reason
            futures = list(self._futures)
        for f in futures:
            f.cancel()

    def attach(self, f) -> None:
        with self._lock:
            self._futures.add(f)
            cancelled = self.reason is not None
        if cancelled:
            f.cancel()

    def detach(self, f) -> None:
        with self._lock:
            self._futures.discard(f)


def server_error(err: grpc.RpcError) -> Optional[errors.LeaseholdError]:
    """The leasehold error a server answered with: its ErrorDetail, else
    its leasehold-code trailer; None when no leasehold server answered."""
    code, last, leader = "", 0, ""
    try:
        trailers = err.trailing_metadata() or ()
    except Exception:  # an error raised before the call started has none
        trailers = ()
    for k, v in trailers:
        if k == "grpc-status-details-bin":
            st = rpc_status_pb2.RpcStatus.FromString(v)
            for d in st.details:
                if d.type_url == _DETAIL_TYPE:
                    det = pb.ErrorDetail.FromString(d.value)
                    if det.code:
                        code, last, leader = det.code, det.last_token, det.leader_api_addr
        elif k == "leasehold-code" and not code:
            code = v
    if not code:
        return None
    return errors.error_for(code, err.details() or "", last_token=last, leader_addr=leader, from_server=True)


def _not_sent(err: grpc.RpcError) -> bool:
    """A failure to connect: the request never left, so it was certainly not applied."""
    if err.code() != grpc.StatusCode.UNAVAILABLE:
        return False
    d = (err.details() or "").lower()
    return any(s in d for s in ("failed to connect", "connection refused", "dns resolution failed", "ssl handshake", "handshake failed"))


def refused(err: grpc.RpcError) -> bool:
    d = (err.details() or "").lower()
    return err.code() == grpc.StatusCode.UNAVAILABLE and "connection refused" in d


def classify(err: grpc.RpcError, kind: str, timed_out: bool) -> errors.LeaseholdError:
    """The error the caller sees for one failed attempt (Go: classify)."""
    e = server_error(err)
    if e is not None:
        return e
    code, msg = err.code(), err.details() or str(code)
    if _not_sent(err):
        return errors.Unavailable(msg)
    if code == grpc.StatusCode.DEADLINE_EXCEEDED and timed_out:
        if kind == WRITE:
            # The caller's deadline cut a write off after it was sent.
            return errors.OutcomeUnknown("deadline-exceeded before the answer; the write may have applied")
        return errors.DeadlineExceeded(msg)
    if code in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.OUT_OF_RANGE):
        return errors.InvalidArgument(msg)
    if code in (grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNAUTHENTICATED):
        return errors.PermissionDenied(msg)
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
        return errors.ResourceExhausted(msg)
    # The connection broke (or the reply was cut off) after the request
    # may have reached a server.
    if kind == READ:
        return errors.Unavailable("connection lost during the call: " + msg)
    return errors.OutcomeUnknown("connection lost during the call, which may have applied: " + msg)


def retryable(e: errors.LeaseholdError, kind: str) -> bool:
    """Whether a call that failed with e may be sent again without risk of applying twice."""
    if isinstance(e, (errors.Unavailable, errors.NotLeader)):
        return True
    return isinstance(e, errors.OutcomeUnknown) and kind == HARMLESS


class Transport:
    """The endpoints of a Client and the current one."""

    def __init__(self, endpoints, tls: Optional[TLS], token: Optional[str], retry_timeout: float, options: Optional[list] = None):
        parsed = parse_endpoints(endpoints, tls)
        self.retry_timeout = retry_timeout
        self.metadata = (("authorization", "Bearer " + token),) if token else None
        opts = list(_CHANNEL_OPTIONS) + list(options or [])
        if tls is not None and tls.server_name:
            opts.append(("grpc.ssl_target_name_override", tls.server_name))
        self.tls = tls
        self.eps: list[Endpoint] = []
        for addr, target, secure in parsed:
            creds = None
            if secure:
                t = tls or TLS()
                creds = grpc.ssl_channel_credentials(root_certificates=_pem(t.ca), private_key=_pem(t.key), certificate_chain=_pem(t.cert))
            self.eps.append(Endpoint(addr, target, creds, opts))
        self._lock = threading.Lock()  # protects following
        self.cur = 0
        self._failed = [float("-inf")] * len(self.eps)  # by endpoint: when a call to it last got no answer

    def current(self) -> int:
        with self._lock:
            return self.cur

    def move_from(self, i: int) -> None:
        with self._lock:
            if self.cur == i:
                self.cur = (i + 1) % len(self.eps)

    def leader_endpoint(self, leader: str) -> int:
        """The index of the endpoint at the leader's API address, or -1 when
        none is, or a call to it got no answer within LEADER_BACKOFF (a
        leader this client cannot reach is not tried after every answer)."""
        for j, ep in enumerate(self.eps):
            if leader and ep.host_port == leader:
                with self._lock:
                    return j if time.monotonic() - self._failed[j] >= LEADER_BACKOFF else -1
        return -1

    def prefer_leader(self, leader: str) -> None:
        """Sends the next calls to the endpoint a follower named as the leader (see leader_endpoint)."""
        j = self.leader_endpoint(leader)
        if j >= 0:
            with self._lock:
                self.cur = j

    def note_failure(self, i: int) -> None:
        """Records that a call or stream to endpoint i got no answer."""
        with self._lock:
            self._failed[i] = time.monotonic()

    def _hint(self, e: errors.LeaseholdError, err: grpc.RpcError, ep: "Endpoint") -> errors.LeaseholdError:
        """Adds the likely cause to a connection that closed without an
        answer: a plaintext client talking to a TLS port, or a TLS server
        refusing (or requiring) the client certificate, which TLS 1.3
        reports only as a closed connection (Go: dialHint)."""
        if e.from_server or not isinstance(e, (errors.Unavailable, errors.OutcomeUnknown)):
            return e
        d = (err.details() or "").lower()
        if not any(s in d for s in ("handshake", "socket closed", "connection reset", "end of tcp stream", "endpoint read failed")):
            return e
        if not ep.secure:
            hint = " (the server closed the connection: if it serves TLS, use https:// endpoints or leasehold.TLS)"
        elif self.tls is not None and self.tls.cert:
            hint = " (the server closed the connection during TLS setup: it may have refused the client certificate as not signed by its --client-ca)"
        else:
            hint = " (the server closed the connection during TLS setup: it may require a client certificate; give one with leasehold.TLS(cert=, key=))"
        return type(e)(e.message + hint)

    def addrs(self) -> str:
        return ", ".join(ep.addr for ep in self.eps)

    def close(self) -> None:
        for ep in self.eps:
            ep.close()

    def call(
        self,
        op: str,
        method: str,
        req: Any,
        kind: str,
        timeout: Optional[float] = None,
        canceler: Optional[Canceler] = None,
    ) -> Any:
        """Sends req as the unary RPC method, failing over between
        endpoints on retryable errors until one answers, the timeout ends,
        or the retry timeout passes. When every endpoint refuses the
        connection on the first round it fails at once: nothing listens."""
        now = time.monotonic()
        stop = now + self.retry_timeout
        deadline = None if timeout is None else now + timeout
        backoff = 0.01
        refused_n = 0
        refusal: Optional[errors.LeaseholdError] = None
        attempt = 0
        while True:
            attempt += 1
            if canceler is not None and canceler.reason is not None:
                raise canceler.reason
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:  # not sent: certainly not applied
                # After an unavailable refusal that is why nothing was
                # answered; an Acquire's deadline is its wait running out.
                e = refusal if refusal is not None and method != "Acquire" else errors.DeadlineExceeded("the deadline passed")
                raise _op(op, e)
            i = self.current()
            rpc = getattr(self.eps[i].stub, method)
            fut = None
            try:
                if canceler is None:
                    resp, call = rpc.with_call(req, timeout=left, metadata=self.metadata)
                else:
                    # A future, so that another thread can cancel the call.
                    fut = call = rpc.future(req, timeout=left, metadata=self.metadata)
                    canceler.attach(fut)
                    resp = fut.result()
                for k, v in call.initial_metadata() or ():
                    if k == "leasehold-leader":
                        self.prefer_leader(v)
                return resp
            except grpc.FutureCancelledError:
                if canceler is not None and canceler.reason is not None:
                    raise canceler.reason from None
                raise
            except grpc.RpcError as err:
                if err.code() == grpc.StatusCode.CANCELLED and canceler is not None and canceler.reason is not None:
                    raise canceler.reason from None
                timed_out = deadline is not None and time.monotonic() >= deadline - 0.001
                e = self._hint(classify(err, kind, timed_out), err, self.eps[i])
                if refused_n == attempt - 1 and refused(err):
                    refused_n += 1
                    if refused_n == len(self.eps):
                        raise _op(op, errors.Unavailable("no server at " + self.addrs())) from None
                if isinstance(e, (errors.Unavailable, errors.NotLeader)):
                    refusal = e
                if not retryable(e, kind) or time.monotonic() > stop or (deadline is not None and time.monotonic() >= deadline):
                    raise _op(op, e) from None
                if not e.from_server:
                    self.note_failure(i)  # not an answer: the endpoint may be unreachable
                self.move_from(i)
                if attempt % len(self.eps) == 0:  # every endpoint tried: wait a little
                    time.sleep(backoff)
                    backoff = min(2 * backoff, 0.1)
            finally:
                if fut is not None:
                    canceler.detach(fut)  # type: ignore[union-attr]


def _op(op: str, e: errors.LeaseholdError) -> errors.LeaseholdError:
    """e with the operation named in its message."""
    out = type(e)(f"{op}: {e.message}", last_token=e.last_token, leader_addr=e.leader_addr, from_server=e.from_server)
    return out

