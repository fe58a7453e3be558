"""The Redis guard (redis-py): the Go guard's Lua script (fence/redisfence/redisfence.go),
byte for byte, so it has the same SHA in Redis's script cache, and its key
layout (a hash ``leasehold:fence:KEY`` with fields ``token`` and
``value``), so Go and Python writers of one Redis fence each other.

Tokens are stored as canonical decimal strings and compared in Lua by
length, then in two parts (exact for every uint64: Lua numbers are
doubles). Redis must persist and replicate the fence as it does your data:
a failover to a replica that missed the last write forgets it.
"""

from __future__ import annotations

from typing import Any, Optional

from . import StaleTokenError, parse_stored, validate, validate_key

__all__ = ["Redis", "DEFAULT_PREFIX", "WRITE_SCRIPT"]

DEFAULT_PREFIX = "leasehold:fence:"

_COMPARE = """
local function fence_cmp(a, b)
  if #a ~= #b then
    if #a < #b then return -1 end
    return 1
  end
  local s = 0
  if #a > 10 then s = #a - 10 end
  local ah, bh = tonumber(string.sub(a, 1, s)) or 0, tonumber(string.sub(b, 1, s)) or 0
  if ah ~= bh then
    if ah < bh then return -1 end
    return 1
  end
  local al, bl = tonumber(string.sub(a, s + 1)), tonumber(string.sub(b, s + 1))
  if al ~= bl then
    if al < bl then return -1 end
    return 1
  end
  return 0
end
local fence_last = redis.call('HGET', KEYS[1], 'token')
if fence_last then
  local c = fence_cmp(ARGV[1], fence_last)
  if c < 0 or (c == 0 and ARGV[2] == 'strict') then
    return {0, fence_last}
  end
end
"""

#: The write script: KEYS[1] fence hash; ARGV[1] token (canonical
#: decimal); ARGV[2] 'strict' or 'monotonic'; ARGV[3] value.
WRITE_SCRIPT = (
    """-- leasehold fence: write
-- KEYS[1] fence hash; ARGV[1] token (canonical decimal); ARGV[2] 'strict' or 'monotonic'; ARGV[3] value
"""
    + _COMPARE
    + """
redis.call('HSET', KEYS[1], 'token', ARGV[1], 'value', ARGV[3])
return {1, ARGV[1]}
"""
)


class Redis:
    """A guard on a redis-py client (``redis.Redis(...)``); safe for use
    from many threads as the client is."""

    def __init__(self, rdb: Any, *, prefix: str = DEFAULT_PREFIX, strict: bool = False):
        self.rdb = rdb
        self.prefix = prefix
        self.strict = strict
        self._write = rdb.register_script(WRITE_SCRIPT)

    def fence_key(self, key: str) -> str:
        """The Redis key of key's fence hash."""
        return self.prefix + key

    def write(self, key: str, token: int, value: bytes | str) -> None:
        """Stores value under key iff token is not stale, in one script run;
        raises StaleTokenError (nothing changed) otherwise."""
        validate(key, token)
        res = self._write(keys=[self.fence_key(key)], args=[str(token), "strict" if self.strict else "monotonic", value])
        if len(res) < 2:
            raise RuntimeError(f"fence: redis: unexpected script reply {res!r}")
        if int(res[0]) == 1:
            return
        raise StaleTokenError(key, token, parse_stored(res[1]))

    def last(self, key: str) -> tuple[int, Optional[bytes]]:
        """The last accepted token for key and its value; (0, None) when none."""
        validate_key(key)
        tok, val = self.rdb.hmget(self.fence_key(key), ["token", "value"])
        if not tok:
            return 0, None
        if isinstance(val, str):
            val = val.encode()
        return parse_stored(tok), val
