"""Network faults on 127.0.0.1 for the cluster tests and the durability checker.

`CuttableProxy` is a TCP proxy in front of one local port (etcd's client port, or a
broker's Kafka listener) that can be cut, dropping every connection through it and
refusing new ones at once, and healed: a network partition between whoever connects
through the proxy and the thing behind it, without touching either process.
"""

from __future__ import annotations

import socket
import threading


class CuttableProxy:
    """Forwards 127.0.0.1:<self.port> to 127.0.0.1:<target_port> until cut."""

    def __init__(self, target_port: int):
        self.target_port = target_port
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(128)
        self.port = self.listener.getsockname()[1]
        self.cut_off = threading.Event()
        self.closed = threading.Event()
        self.conns: list[socket.socket] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True, name=f"proxy-{self.port}").start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while not self.closed.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if self.cut_off.is_set():
                client.close()
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=5)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            with self.lock:
                # Forget closed sockets so a long run does not accumulate them.
                self.conns = [c for c in self.conns if c.fileno() != -1]
                self.conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            try:
                s.close()
            except OSError:
                pass

    def cut(self) -> None:
        self.cut_off.set()
        with self.lock:
            for c in self.conns:
                try:
                    c.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            self.conns.clear()

    def heal(self) -> None:
        self.cut_off.clear()

    def close(self) -> None:
        self.closed.set()
        self.cut()
        self.listener.close()
