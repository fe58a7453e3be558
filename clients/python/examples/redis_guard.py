"""Write to Redis only while holding a lock, through the guard (the Go
guard's Lua script: check and write are one script run).

    leasehold serve &
    python3 examples/redis_guard.py redis://127.0.0.1:6379/0
"""

import sys

import redis

import leasehold
from leasehold.fence.redis import Redis

url = sys.argv[1] if len(sys.argv) > 1 else "redis://127.0.0.1:6379/0"
endpoints = sys.argv[2] if len(sys.argv) > 2 else leasehold.DEFAULT_ENDPOINT

with leasehold.Client(endpoints) as client:
    guard = Redis(redis.Redis.from_url(url))  # hashes leasehold:fence:KEY, shared with Go writers
    with client.lock("cache:warm", timeout=30, owner="example") as lock:
        guard.write("cache:warm", lock.token, b"warmed")
        print("wrote with token", lock.token)
    try:
        guard.write("cache:warm", lock.token - 1, b"late")
    except leasehold.StaleToken as e:
        print("stale write refused; last accepted token", e.last_token)
