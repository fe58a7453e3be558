"""The errors of leasehold, one class per error code of the server.

Every failed call raises a :class:`LeaseholdError` whose ``code`` is one of
the codes of the server's table (api/codes.go; docs/operating/limits-and-errors.md):
the same codes the Go client matches with ``errors.Is`` and the CLI exits
with. Each code has its own subclass (``except StaleToken as e:
e.last_token``). The code is read from the server's ``ErrorDetail`` (the
``grpc-status-details-bin`` trailer), else from its ``leasehold-code``
trailer; a failure no server answered is classified by the client (see
``leasehold.client``).

Three local conditions are not codes: :class:`LeaseLost` (the lease may be
gone: stop), :class:`SessionClosed` and :class:`Released`.
"""

from __future__ import annotations

__all__ = [
    "LeaseholdError",
    "Internal",
    "InvalidArgument",
    "NotHolder",
    "StaleToken",
    "LeaseExpired",
    "LockDelay",
    "Locked",
    "DeadlineExceeded",
    "ResourceExhausted",
    "PermissionDenied",
    "NotLeader",
    "Unavailable",
    "OutcomeUnknown",
    "NotFound",
    "Compacted",
    "Canceled",
    "LeaseLost",
    "SessionClosed",
    "Released",
    "error_for",
    "EXIT_CODES",
]


class LeaseholdError(Exception):
    """An error with a leasehold code.

    Attributes:
        code: the leasehold code (``"stale-token"``, ...).
        message: the text, naming the operation.
        last_token: the last accepted token (``stale-token`` only, else 0).
        leader_addr: the leader's API address (``not-leader``, when known).
        from_server: True when a leasehold server answered with the error.
    """

    code = "internal"

    def __init__(self, message: str = "", *, last_token: int = 0, leader_addr: str = "", from_server: bool = False):
        self.message = message
        self.last_token = last_token
        self.leader_addr = leader_addr
        self.from_server = from_server
        super().__init__(f"leasehold: {self.code}: {message}" if message else f"leasehold: {self.code}")


class Internal(LeaseholdError):
    """A bug or an unexpected failure."""

    code = "internal"


class InvalidArgument(LeaseholdError):
    """Input outside the documented limits; nothing changed."""

    code = "invalid-argument"


class NotHolder(LeaseholdError):
    """(name, lease_id, token) is not the current holding: the lock was lost; nothing changed."""

    code = "not-holder"


class StaleToken(LeaseholdError):
    """A fenced write's token is older than the last accepted (``last_token``): a newer holder exists."""

    code = "stale-token"


class LeaseExpired(LeaseholdError):
    """The session expired, was closed, or never existed: start over with a new session."""

    code = "lease-expired"


class LockDelay(LeaseholdError):
    """The name is in lock-delay after its holder expired."""

    code = "lock-delay"


class Locked(LeaseholdError):
    """try_acquire: another session holds (or waits for) the name."""

    code = "locked"


class DeadlineExceeded(LeaseholdError):
    """The wait or the request's deadline ran out; nothing is held."""

    code = "deadline-exceeded"


class ResourceExhausted(LeaseholdError):
    """A server limit (sessions, waiters, keys, rate) is reached."""

    code = "resource-exhausted"


class PermissionDenied(LeaseholdError):
    """The caller may not do this (auth enabled, or another principal's session)."""

    code = "permission-denied"


class NotLeader(LeaseholdError):
    """This node cannot serve the write and no leader is known; the client retries it."""

    code = "not-leader"


class Unavailable(LeaseholdError):
    """No quorum or no server reachable; not applied. The client retries it until its retry timeout."""

    code = "unavailable"


class OutcomeUnknown(LeaseholdError):
    """The write may or may not have applied (leadership lost, reply cut off): check, then retry."""

    code = "outcome-unknown"


class NotFound(LeaseholdError):
    """The KV key does not exist."""

    code = "not-found"


class Compacted(LeaseholdError):
    """A watch's events are no longer in the node's history: read the state and watch again."""

    code = "compacted"


class Canceled(LeaseholdError):
    """The caller cancelled the call."""

    code = "canceled"


class LeaseLost(Exception):
    """The lease may be lost: its local safe deadline passed without a
    confirmed renewal, the server said it expired, or the session was
    orphaned or its client closed. Stop the critical section."""


class SessionClosed(Exception):
    """The session was closed by ``close()``."""


class Released(Exception):
    """The lock was released by ``release()``."""


_BY_CODE: dict[str, type[LeaseholdError]] = {
    cls.code: cls
    for cls in (
        Internal,
        InvalidArgument,
        NotHolder,
        StaleToken,
        LeaseExpired,
        LockDelay,
        Locked,
        DeadlineExceeded,
        ResourceExhausted,
        PermissionDenied,
        NotLeader,
        Unavailable,
        OutcomeUnknown,
        NotFound,
        Compacted,
        Canceled,
    )
}

#: The CLI's exit status of each code (api/codes.go); 1 for anything else.
EXIT_CODES: dict[str, int] = {
    "internal": 1,
    "invalid-argument": 2,
    "not-holder": 3,
    "stale-token": 4,
    "lease-expired": 5,
    "lock-delay": 6,
    "locked": 7,
    "deadline-exceeded": 8,
    "resource-exhausted": 9,
    "permission-denied": 10,
    "not-leader": 11,
    "unavailable": 12,
    "outcome-unknown": 13,
    "not-found": 14,
    "compacted": 15,
    "canceled": 16,
}


def error_for(code: str, message: str = "", **kw) -> LeaseholdError:
    """Returns the error of code (an unknown code is :class:`Internal`)."""
    cls = _BY_CODE.get(code)
    if cls is None:
        return Internal(f"{message} (code {code!r})" if code else message, **kw)
    return cls(message, **kw)
