"""Lock+unlock pairs per second of the Python client at C=1 and C=16, beside
the Go client's, against one `leasehold serve` in the same run.

    python3 clients/python/bench/bench.py [--duration 3] [--endpoints ADDR]

Without --endpoints it builds the server (go build) and starts it on a free
loopback port with a temporary data dir (durable: every grant fsync'd). C
holders, each with its own session and name, acquire and release in a
loop (threads in Python, goroutines in Go: gobench/main.go, via go run).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent / "tests"))

import leasehold  # noqa: E402


def python_pairs(addr: str, c: int, duration: float) -> float:
    client = leasehold.Client(addr)
    sessions = [client.session(owner="pybench") for _ in range(c)]
    count = [0] * c
    stop = time.monotonic() + duration

    def loop(i: int) -> None:
        s, name = sessions[i], f"bench/py/{c}/{i}"
        while time.monotonic() < stop:
            s.acquire(name).release()
            count[i] += 1

    start = time.monotonic()
    threads = [threading.Thread(target=loop, args=(i,)) for i in range(c)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    rate = sum(count) / (time.monotonic() - start)
    for s in sessions:
        s.close()
    client.close()
    return rate


def go_pairs(addr: str, c: int, duration: float, gobin: str) -> float:
    out = subprocess.run([gobin, "-addr", addr, "-c", str(c), "-d", f"{duration}s"], check=True, capture_output=True, text=True)
    return float(out.stdout.strip())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--duration", type=float, default=3.0)
    p.add_argument("--endpoints", default="")
    a = p.parse_args()
    repo = HERE.parents[2]
    gobin = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"leasehold-gobench-{os.getpid()}")
    subprocess.run(["go", "build", "-o", gobin, "./clients/python/bench/gobench"], cwd=repo, check=True)
    server = None
    addr = a.endpoints
    if not addr:
        from conftest import Server

        server = Server().start()
        addr = server.addr
    try:
        print(f"server {addr}, {a.duration:g} s per run, lock+unlock pairs/s")
        print(f"{'C':>3} {'python':>10} {'go':>10}")
        for c in (1, 16):
            py = python_pairs(addr, c, a.duration)
            go = go_pairs(addr, c, a.duration, gobin)
            print(f"{c:>3} {py:>10.0f} {go:>10.0f}")
    finally:
        os.remove(gobin)
        if server is not None:
            server.close()


if __name__ == "__main__":
    main()
