"""TLS, mutual TLS and bearer tokens against real servers, with
certificates from `leasehold certs`."""

from __future__ import annotations

import json
import ssl
import subprocess
import urllib.request

import pytest

import leasehold

from .conftest import Server, binary


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    d = tmp_path_factory.mktemp("certs")
    for args in (["create-ca"], ["create-node", "--host", "127.0.0.1"], ["create-client", "alice"]):
        subprocess.run([binary(), "certs", *args, "--certs-dir", str(d)], check=True, capture_output=True)
    return d


def _probe(certs, client_cert: bool) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(certs / "ca.crt"))
    if client_cert:
        ctx.load_cert_chain(str(certs / "client.alice.crt"), str(certs / "client.alice.key"))
    return ctx


def test_mutual_tls(certs, unique):
    srv = Server(
        "--cert", str(certs / "node.crt"), "--key", str(certs / "node.key"), "--client-ca", str(certs / "ca.crt"),
        probe_tls=_probe(certs, True),
    ).start()
    try:
        tls = leasehold.TLS(ca=str(certs / "ca.crt"), cert=str(certs / "client.alice.crt"), key=str(certs / "client.alice.key"))
        with leasehold.Client(srv.addr, tls=tls) as c:  # host:port means https:// with TLS
            with c.lock(unique, timeout=10) as lock:
                assert lock.token > 0
        # Without a client certificate the server refuses the connection.
        with leasehold.Client(srv.addr, tls=leasehold.TLS(ca=(certs / "ca.crt").read_bytes()), retry_timeout=1) as c:
            with pytest.raises(leasehold.Unavailable, match="may require a client certificate"):
                c.session()
        # Without TLS, a plaintext client gets no answer from a TLS port.
        with leasehold.Client(srv.addr, retry_timeout=1) as c:
            with pytest.raises(leasehold.Unavailable, match="if it serves TLS, use https://"):
                c.session()
    finally:
        srv.close()


def _as_node(addr: str, certs, secret: str, method: str, body: dict) -> dict:
    """Calls an AuthService method over Connect JSON with the node secret:
    while auth is off only the node role (or a --admin client certificate)
    may mint tokens and enable auth."""
    req = urllib.request.Request(
        f"https://{addr}/leasehold.v1.AuthService/{method}", data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Leasehold-Node-Secret": secret}, method="POST")
    with urllib.request.urlopen(req, context=_probe(certs, False), timeout=10) as res:
        return json.loads(res.read() or b"{}")


def test_bearer_token_over_tls(certs, unique, tmp_path):
    secret = "python-test-node-secret-0123456789abcdef"
    (tmp_path / "secret").write_text(secret)
    srv = Server("--cert", str(certs / "node.crt"), "--key", str(certs / "node.key"), "--admin", "alice",
                 "--node-secret-file", str(tmp_path / "secret"), probe_tls=_probe(certs, False)).start()
    try:
        token = _as_node(srv.addr, certs, secret, "CreateToken", {"principal": "alice"})["token"]
        _as_node(srv.addr, certs, secret, "SetEnabled", {"enabled": True})
        tls = leasehold.TLS(ca=str(certs / "ca.crt"))
        with leasehold.Client("https://" + srv.addr, tls=tls, token=token) as c:
            with c.lock(unique, timeout=10) as lock:
                assert lock.token > 0
        with leasehold.Client("https://" + srv.addr, tls=tls) as c:
            with pytest.raises(leasehold.PermissionDenied):
                c.session()
        with leasehold.Client("https://" + srv.addr, tls=tls, token=token + "x") as c:
            with pytest.raises(leasehold.PermissionDenied):
                c.session()
    finally:
        srv.close()
