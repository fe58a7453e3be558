"""Write to PostgreSQL only while holding a lock, through the guard: the
database refuses a write whose token is older than the last it accepted,
so a holder that paused past its lease cannot overwrite its successor.

    leasehold serve &
    python3 examples/postgres_guard.py postgres://postgres@127.0.0.1:55432/postgres
"""

import sys

import psycopg

import leasehold
from leasehold.fence.postgres import Postgres

url = sys.argv[1] if len(sys.argv) > 1 else "postgres://postgres@127.0.0.1:5432/postgres"
endpoints = sys.argv[2] if len(sys.argv) > 2 else leasehold.DEFAULT_ENDPOINT

with leasehold.Client(endpoints) as client, psycopg.connect(url) as conn:
    guard = Postgres(conn)  # the table leasehold_fence, shared with Go writers
    guard.init()
    with client.lock("report:417:rebuild", timeout=30, owner="example") as lock:
        guard.write("report:417", lock.token, b"rebuilt")
        # Or your own statements in the same transaction as the check:
        guard.do("report:417", lock.token, lambda cur: cur.execute("SELECT 1"))
        print("wrote with token", lock.token)
    try:
        guard.write("report:417", lock.token - 1, b"late")  # an older holder's write
    except leasehold.StaleToken as e:
        print("stale write refused; last accepted token", e.last_token)
