"""A loopback TCP forwarder from the test's network namespace into the RocketMQ fixture's: the
console server runs beside the cluster (it dials 127.0.0.1:10911 as the brokers announce), and
tests and the browser reach its HTTP port through this."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable

CHUNK = 65536


class Forwarder:
    """Listens on a free loopback port here (`port`, chosen by the kernel while binding, so no
    other process can take it in between); each connection is joined to 127.0.0.1:`port` of the
    sockets `socket_factory` makes (created inside the fixture's namespace)."""

    def __init__(self, socket_factory: Callable[[], socket.socket]):
        self._socket_factory = socket_factory
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._closed = False
        self._thread = threading.Thread(target=self._accept, name=f"forward-{self.port}", daemon=True)

    def start(self) -> Forwarder:
        self._thread.start()
        return self

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            try:
                upstream = self._socket_factory()
                upstream.connect(("127.0.0.1", self.port))
            except OSError:
                client.close()
                continue
            for end in (client, upstream):  # each write goes on at once: no Nagle wait on a small answer
                end.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                if self._closed:
                    client.close()
                    upstream.close()
                    return
                self._open.update((client, upstream))
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(CHUNK):
                sink.sendall(data)
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            sockets, self._open = list(self._open), set()
        self._listener.close()
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.close()
        self._thread.join(5)
