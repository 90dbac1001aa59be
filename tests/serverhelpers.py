"""Helpers of the tests that misbehave against a whole server on a thread: a raw 9P
connection on a bare socket, waiting for an event (bounded), stopping a server clean."""
from __future__ import annotations

import shutil
import socket
import time

from toolsrv.proto import IOHDRSZ, NOFID, NOTAG, Framer, Rerror, Rversion, Tattach, Tversion, encode

from apphelpers import AppThread

MSIZE = 8192 + IOHDRSZ


class Raw:
    """A 9P connection on a bare socket: send anything, read replies when asked."""

    def __init__(self, addr: str, version: bool = True, attach: bool = True) -> None:
        self.sk = socket.socket(socket.AF_UNIX)
        self.sk.settimeout(20)
        self.sk.connect(addr[len("unix!"):])
        self.fr = Framer(1 << 20)
        self.pending: list = []
        if version:
            assert type(self.rpc(Tversion(NOTAG, MSIZE, "9P2000"))) is Rversion
        if attach:
            self.ok(Tattach(0, 0, NOFID, "raw", ""))

    def send(self, *msgs) -> None:
        self.sk.sendall(b"".join(encode(m) for m in msgs))

    def recv(self, n: int = 1) -> list:
        while len(self.pending) < n:
            data = self.sk.recv(1 << 20)
            if not data:
                raise ConnectionError("server hung up")
            self.pending += self.fr.feed(data)
        out, self.pending = self.pending[:n], self.pending[n:]
        return out

    def rpc(self, m):
        self.send(m)
        return self.recv()[0]

    def ok(self, m):
        r = self.rpc(m)
        assert type(r) is not Rerror, f"{m}: {r}"
        return r

    def hung_up(self) -> bool:
        """True when the server closed the connection (waits for it, bounded)."""
        try:
            while True:
                data = self.sk.recv(65536)
                if not data:
                    return True
        except (ConnectionResetError, socket.timeout):
            return False

    def close(self) -> None:
        self.sk.close()


def private_cwds(store) -> list[str]:
    return [s.cwd for s in store.sessions.values() if s.private_cwd]


def stop_clean(app: AppThread) -> None:
    """Stop the server and remove what it made outside its temp dir: the sessions'
    private working directories (they outlive the server by design, with its state)."""
    cwds = app.call(lambda: private_cwds(app.app.store)) if app.thread.is_alive() else []
    app.cleanup()
    for d in cwds:
        shutil.rmtree(d, ignore_errors=True)


def wait_for(pred, timeout: float = 20.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.01)
    return pred()
