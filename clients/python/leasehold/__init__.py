"""leasehold: the Python client of the leasehold lock service.

    import leasehold

    client = leasehold.Client("127.0.0.1:7420")
    with client.lock("reports", timeout=30) as lock:
        write_report(token=lock.token)      # the resource checks the token

See ``leasehold.client`` for the model (sessions, the local safe deadline,
retries), ``leasehold.aio`` for the asyncio API, ``leasehold.fence`` for
the PostgreSQL and Redis guards, and ``leasehold.errors`` for the errors.
"""

from .client import DEFAULT_ENDPOINT, TLS, Client, Lock, Session, slot_key
from .errors import (
    Canceled,
    Compacted,
    DeadlineExceeded,
    Internal,
    InvalidArgument,
    LeaseExpired,
    LeaseholdError,
    LeaseLost,
    Locked,
    LockDelay,
    NotFound,
    NotHolder,
    NotLeader,
    OutcomeUnknown,
    PermissionDenied,
    Released,
    ResourceExhausted,
    SessionClosed,
    StaleToken,
    Unavailable,
)
from .watch import Watch

__version__ = "0.1.0"

__all__ = [
    "Client",
    "Session",
    "Lock",
    "Watch",
    "TLS",
    "DEFAULT_ENDPOINT",
    "slot_key",
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
]
