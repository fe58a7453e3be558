"""Guards for protected resources: the resource itself refuses a stale
fencing token, with the check and the write in one atomic step.

- :mod:`leasehold.fence.postgres` (psycopg 3): the Go guard's table
  (``leasehold_fence``) and SQL, so Go and Python writers of one database
  fence each other.
- :mod:`leasehold.fence.redis` (redis-py): the Go guard's Lua script, byte
  for byte (the same SHA in Redis's script cache), and its key prefix.

A write with token t on key k is accepted iff t ≥ last(k) (``strict``:
t > last(k)); a refusal raises :class:`StaleTokenError` (a
``leasehold.StaleToken`` with ``last_token``) and changes nothing.
"""

from __future__ import annotations

from .. import errors

__all__ = ["StaleTokenError", "InvalidKey", "InvalidToken", "MAX_KEY_LEN", "validate", "validate_key", "admits"]

#: The longest resource key, in bytes (fence.MaxKeyLen).
MAX_KEY_LEN = 256
_MAX_TOKEN = 2**64 - 1


class StaleTokenError(errors.StaleToken):
    """A write refused because ``token`` is older than ``last_token``, the
    last token the resource accepted for ``key``."""

    def __init__(self, key: str, token: int, last_token: int):
        self.key, self.token = key, token
        super().__init__(f"fence: key {key!r}: token {token} is stale (last accepted {last_token})", last_token=last_token)


class InvalidKey(errors.InvalidArgument):
    """The key is empty, longer than 256 bytes, or contains NUL."""


class InvalidToken(errors.InvalidArgument):
    """The token is 0 or outside uint64."""


def validate_key(key: str) -> None:
    if not isinstance(key, str) or key == "":
        raise InvalidKey("fence: invalid key: empty")
    n = len(key.encode("utf-8", "surrogatepass"))
    if n > MAX_KEY_LEN:
        raise InvalidKey(f"fence: invalid key: {n} bytes, longer than {MAX_KEY_LEN}")
    try:
        key.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidKey("fence: invalid key: not valid UTF-8") from None
    if "\x00" in key:
        raise InvalidKey("fence: invalid key: contains NUL")


def validate(key: str, token: int) -> None:
    validate_key(key)
    if not isinstance(token, int) or isinstance(token, bool) or token <= 0 or token > _MAX_TOKEN:
        raise InvalidToken(f"fence: invalid token: {token!r}")


def admits(token: int, last: int, strict: bool = False) -> bool:
    """The one comparison every guard implements (fence.Mode.Admits)."""
    return token > last if strict else token >= last


def parse_stored(s: str | bytes) -> int:
    if isinstance(s, bytes):
        s = s.decode()
    try:
        t = int(s, 10)
    except ValueError:
        raise errors.Internal(f"fence: corrupt stored token {s!r}") from None
    if not 0 <= t <= _MAX_TOKEN or str(t) != s:
        raise errors.Internal(f"fence: corrupt stored token {s!r}")
    return t
