"""A TCP proxy for the tests that can black-hole its connections: after
blackhole() no byte passes in either direction and new connections are
accepted and left hanging, as with a holder cut off by a partition; and
cut_replies(): the answers in flight are lost and the connections reset,
as when a connection breaks after the server applied a request."""

from __future__ import annotations

import socket
import threading


class Proxy:
    def __init__(self, target: str):
        host, port = target.rsplit(":", 1)
        self.target = (host, int(port))
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.addr = "127.0.0.1:%d" % self.sock.getsockname()[1]
        self._holes = threading.Event()
        self._drop_replies = threading.Event()
        self._closed = threading.Event()
        self._mu = threading.Lock()  # protects following
        self._conns: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self._go(self._accept)

    def _go(self, fn, *args) -> None:
        t = threading.Thread(target=fn, args=args, daemon=True)
        with self._mu:
            self._threads.append(t)
        t.start()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            with self._mu:
                self._conns.append(c)
            if self._holes.is_set():
                continue  # left hanging
            try:
                u = socket.create_connection(self.target)
            except OSError:
                c.close()
                continue
            with self._mu:
                self._conns.append(u)
            self._go(self._pump, c, u)
            self._go(self._pump, u, c, True)

    def _pump(self, src: socket.socket, dst: socket.socket, replies: bool = False) -> None:
        while True:
            try:
                b = src.recv(65536)
            except OSError:
                return
            if not b:
                return
            if self._holes.is_set() or (replies and self._drop_replies.is_set()):
                continue  # swallowed
            try:
                dst.sendall(b)
            except OSError:
                return

    def blackhole(self) -> None:
        self._holes.set()

    def cut_replies(self, after: float) -> None:
        """From now on the server's bytes are dropped; after the given
        seconds every connection open now is reset and new ones pass again."""
        self._drop_replies.set()
        with self._mu:
            conns = list(self._conns)
            self._conns = []

        def cut() -> None:
            if self._closed.wait(after):
                return
            for c in conns:
                try:
                    c.shutdown(socket.SHUT_RDWR)  # wakes the pumps; the peers see the connection end
                except OSError:
                    pass
                c.close()
            self._drop_replies.clear()

        self._go(cut)

    def close(self) -> None:
        self._closed.set()
        self.sock.close()
        with self._mu:
            conns, threads = list(self._conns), list(self._threads)
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            c.close()
        for t in threads:
            t.join(5)
