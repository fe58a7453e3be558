"""A cron job that runs only when its previous run is over, and stops when
its lease may be lost. The same with no code:

    */5 * * * *  python3 -m leasehold run nightly-export --if-free -- ./export.sh

(``export.sh`` gets LEASEHOLD_TOKEN in its environment.)
"""

import sys

import leasehold

endpoints = sys.argv[-1] if len(sys.argv) > 1 else leasehold.DEFAULT_ENDPOINT

with leasehold.Client(endpoints) as client, client.session(ttl=15, owner="nightly-export") as session:
    try:
        lock = session.try_acquire("nightly-export")
    except leasehold.Locked:
        print("the previous run still holds the lock: skipping")
        sys.exit(0)
    with lock:
        for batch in range(3):
            lock.check()  # raises LeaseLost once the lease may be gone: stop
            client.kv_put(f"nightly-export/{batch}", b"done", lock.token)  # fenced write
        print("exported with token", lock.token)
