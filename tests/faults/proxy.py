"""A TCP proxy in the test process, between workers and a server, that fails on demand.

It relays every connection made to its port to the target. On demand it
cuts every connection it relays (both ends reset at once), refuses new ones
(it stops listening, so a connect gets ECONNREFUSED) or blackholes
everything (it stops reading and accepting: a query waits, a connect hangs
after the handshake), as a network fault would, while the server itself
stays up. One thread runs every socket; the test's calls are handed to it.
"""

from __future__ import annotations

import contextlib
import queue
import selectors
import socket
import struct
import threading
from collections.abc import Callable, Iterator
from typing import Any

#: What the proxy does with traffic.
FORWARD, REFUSE, BLACKHOLE = "forward", "refuse", "blackhole"
#: Seconds a relayed write may wait for its reader before the pair is cut.
SEND_TIMEOUT = 5.0


class TcpProxy:
    """Relays 127.0.0.1:<port> to ``target``; ``cut()``, ``refusing()`` and ``blackholing()``."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.mode = FORWARD
        self.relayed = 0  # connections relayed so far
        self.cut_count = 0  # connections cut so far
        self._listener: socket.socket | None = self._listen(0)
        self.port = int(self._listener.getsockname()[1])
        self._peers: dict[socket.socket, socket.socket] = {}
        self._clients: set[socket.socket] = set()  # the accepted end of each pair
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._calls: queue.SimpleQueue[tuple[Callable[[], Any], queue.SimpleQueue[Any]]]
        self._calls = queue.SimpleQueue()
        self._stopped = False
        self._thread = threading.Thread(target=self._loop, name="faults-proxy", daemon=True)

    def start(self) -> TcpProxy:
        self._selector.register(self._wake_r, selectors.EVENT_READ)
        self._watch_all()
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop relaying, close every socket and join the thread."""
        if self._thread.is_alive():
            self._call(self._shutdown)
            self._thread.join(5.0)

    # -- faults --

    def cut(self) -> int:
        """Reset every relayed connection, both ends; how many were cut."""
        return int(self._call(self._cut_all))

    def set_mode(self, mode: str) -> None:
        """``FORWARD``, ``REFUSE`` (not listening) or ``BLACKHOLE`` (nothing moves)."""
        if mode not in (FORWARD, REFUSE, BLACKHOLE):
            raise ValueError(f"Unknown proxy mode {mode!r}")
        self._call(lambda: self._switch(mode))

    @contextlib.contextmanager
    def refusing(self) -> Iterator[None]:
        """Refuse new connections for the duration of the block (existing ones still relay)."""
        self.set_mode(REFUSE)
        try:
            yield
        finally:
            self.set_mode(FORWARD)

    @contextlib.contextmanager
    def blackholing(self) -> Iterator[None]:
        """Relay nothing and accept nothing for the duration of the block; then go on."""
        self.set_mode(BLACKHOLE)
        try:
            yield
        finally:
            self.set_mode(FORWARD)

    # -- the proxy's thread --

    def _call(self, function: Callable[[], Any]) -> Any:
        """Run ``function`` on the proxy's thread and return what it returned."""
        answer: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._calls.put((function, answer))
        self._wake_w.send(b"x")
        ok, value = answer.get(timeout=10.0)
        if not ok:
            raise value
        return value

    def _loop(self) -> None:
        while not self._stopped:
            for key, _events in self._selector.select(timeout=0.5):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                if sock is self._wake_r:
                    self._run_calls()
                elif sock is self._listener:
                    self._accept()
                else:
                    self._relay(sock)
        self._selector.close()

    def _run_calls(self) -> None:
        with contextlib.suppress(BlockingIOError):
            self._wake_r.recv(4096)
        while True:
            try:
                function, answer = self._calls.get_nowait()
            except queue.Empty:
                return
            try:
                answer.put((True, function()))
            except Exception as e:  # handed back to the caller
                answer.put((False, e))

    def _accept(self) -> None:
        assert self._listener is not None
        try:
            client, _addr = self._listener.accept()
        except OSError:
            return
        try:
            server = socket.create_connection(self.target, timeout=5.0)
        except OSError:
            _reset(client)
            return
        for sock in (client, server):
            sock.settimeout(SEND_TIMEOUT)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._peers[client] = server
        self._peers[server] = client
        self._clients.add(client)
        self.relayed += 1
        self._selector.register(client, selectors.EVENT_READ)
        self._selector.register(server, selectors.EVENT_READ)

    def _relay(self, sock: socket.socket) -> None:
        peer = self._peers.get(sock)
        if peer is None:
            return
        try:
            data = sock.recv(65536)
            if data:
                peer.sendall(data)
                return
        except OSError:
            pass
        self._drop(sock, reset=False)

    def _drop(self, sock: socket.socket, *, reset: bool) -> None:
        peer = self._peers.pop(sock, None)
        if peer is not None:
            self._peers.pop(peer, None)
        for s in (sock, peer):
            if s is None:
                continue
            self._clients.discard(s)
            with contextlib.suppress(KeyError, ValueError):
                self._selector.unregister(s)
            if reset:
                _reset(s)
            else:
                s.close()

    def _cut_all(self) -> int:
        clients = list(self._clients)
        for client in clients:
            self._drop(client, reset=True)
        self.cut_count += len(clients)
        return len(clients)

    def _switch(self, mode: str) -> None:
        self._unwatch_all()
        if mode == REFUSE and self._listener is not None:
            self._listener.close()
            self._listener = None
        elif mode != REFUSE and self._listener is None:
            self._listener = self._listen(self.port)
        self.mode = mode
        self._watch_all()

    def _watch_all(self) -> None:
        """Watch what the mode lets move: nothing but the test's calls in BLACKHOLE."""
        if self.mode == BLACKHOLE:
            return
        if self._listener is not None:
            self._selector.register(self._listener, selectors.EVENT_READ)
        for sock in self._peers:
            self._selector.register(sock, selectors.EVENT_READ)

    def _unwatch_all(self) -> None:
        for key in list(self._selector.get_map().values()):
            if key.fileobj is not self._wake_r:
                self._selector.unregister(key.fileobj)

    def _shutdown(self) -> None:
        self._unwatch_all()
        for sock in list(self._peers):
            self._drop(sock, reset=True)
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        self._selector.unregister(self._wake_r)
        self._wake_r.close()
        self._wake_w.close()
        self._stopped = True

    @staticmethod
    def _listen(port: int) -> socket.socket:
        listener = socket.create_server(("127.0.0.1", port), backlog=128, reuse_port=False)
        listener.setblocking(False)
        return listener


def _reset(sock: socket.socket) -> None:
    """Close with an RST instead of a FIN: the other end sees the connection reset."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()
