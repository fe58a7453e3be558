"""A real leasehold server for the tests: the binary from $LEASEHOLD_BIN or
built once from this repository, started on a free loopback port with a
temporary data dir, stopped by PID. PostgreSQL and Redis come from
$LEASEHOLD_TEST_POSTGRES and $LEASEHOLD_TEST_REDIS (scripts/ci-services.sh
prints them); a test that needs one fails without it."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
_built: list[str] = []


def binary() -> str:
    if os.environ.get("LEASEHOLD_BIN"):
        return os.environ["LEASEHOLD_BIN"]
    if not _built:
        d = tempfile.mkdtemp(prefix="leasehold-bin-")
        out = os.path.join(d, "leasehold")
        subprocess.run(["go", "build", "-o", out, "./cmd/leasehold"], cwd=REPO, check=True)
        _built.append(out)
    return _built[0]


def until(what: str, cond, timeout: float = 10.0, every: float = 0.01):
    """Polls cond until it returns a true value, bounded by timeout."""
    end = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(every)


class Server:
    """One running ``leasehold serve``."""

    def __init__(self, *flags: str, probe_tls: "ssl.SSLContext | None" = None):
        """flags are extra serve flags; probe_tls is the TLS context the
        readiness probe uses for a server started with --cert."""
        self.data = tempfile.mkdtemp(prefix="leasehold-data-")
        self.flags = list(flags)
        self.probe_tls = probe_tls
        self.proc: subprocess.Popen | None = None
        self.addr = ""
        self.log = Path(self.data) / "serve.log"

    def start(self, listen: str = "127.0.0.1:0") -> "Server":
        """Starts the server (again, on the same data dir, after stop) and waits until it is ready."""
        self.launch(listen)
        return self.wait_ready()

    def launch(self, listen: str) -> None:
        """Starts the process without waiting (the nodes of a cluster are ready together)."""
        self._logf = open(self.log, "wb")
        self.proc = subprocess.Popen(
            [binary(), "serve", "--data", os.path.join(self.data, "d"), "--listen", listen, *self.flags],
            stdout=self._logf,
            stderr=subprocess.STDOUT,
        )

    def wait_ready(self) -> "Server":
        def serving():
            m = re.search(r'msg="leasehold serving" api=(\S+)', self.log.read_text(errors="replace"))
            if self.proc.poll() is not None:
                raise AssertionError("leasehold serve exited:\n" + self.log.read_text(errors="replace"))
            return m and m.group(1)

        self.addr = until("leasehold serving", serving, 30)

        def ready():
            try:
                scheme = "https" if self.probe_tls else "http"
                with urllib.request.urlopen(f"{scheme}://{self.addr}/readyz", timeout=1, context=self.probe_tls) as r:
                    return r.status == 200
            except OSError:
                return False

        until("/readyz", ready, 30)
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc is not None:
            self._logf.close()

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.data, ignore_errors=True)


def free_ports(n: int) -> list[int]:
    """n distinct loopback ports nothing listens on now (all held open until the last is chosen)."""
    socks = [socket.create_server(("127.0.0.1", 0)) for _ in range(n)]
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def start_cluster(n: int) -> list[Server]:
    """A new cluster of n voters on loopback, each ready."""
    ports = free_ports(2 * n)
    ids = [f"n{i + 1}" for i in range(n)]
    bootstrap = ",".join(f"{ids[i]}=127.0.0.1:{ports[2 * i + 1]}" for i in range(n))
    nodes = [Server("--node-id", ids[i], "--raft-addr", f"127.0.0.1:{ports[2 * i + 1]}", "--bootstrap", bootstrap) for i in range(n)]
    try:
        for i, node in enumerate(nodes):
            node.launch(f"127.0.0.1:{ports[2 * i]}")
        for node in nodes:
            node.wait_ready()
    except BaseException:
        for node in nodes:
            node.close()
        raise
    return nodes


def metric(addr: str, name: str) -> float:
    """The value of the sample name (labels included) on addr's /metrics; 0 when absent."""
    with urllib.request.urlopen(f"http://{addr}/metrics", timeout=5) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line[len(name) + 1 :])
    return 0.0


@pytest.fixture(scope="session")
def server():
    s = Server().start()
    yield s
    s.close()


@pytest.fixture
def client(server):
    import leasehold

    c = leasehold.Client(server.addr)
    yield c
    c.close()


@pytest.fixture(scope="session")
def postgres_url() -> str:
    url = os.environ.get("LEASEHOLD_TEST_POSTGRES")
    assert url, "LEASEHOLD_TEST_POSTGRES is not set: run eval \"$(bash scripts/ci-services.sh)\" first"
    return url


@pytest.fixture(scope="session")
def redis_url() -> str:
    url = os.environ.get("LEASEHOLD_TEST_REDIS")
    assert url, "LEASEHOLD_TEST_REDIS is not set: run eval \"$(bash scripts/ci-services.sh)\" first"
    return url


@pytest.fixture
def unique(request) -> str:
    """A name no other test uses."""
    return re.sub(r"[^A-Za-z0-9]+", "-", request.node.name) + f"-{os.getpid()}-{time.monotonic_ns()}"
