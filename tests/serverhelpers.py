"""Helpers of the tests that misbehave against a whole server on a thread: a raw 9P
connection on a bare socket, waiting for an event (bounded), stopping a server clean; and
`toolsrv serve` as a process of its own (ServeProcess)."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time

from toolsrv.cli.client import Client, ClientError
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


class ServeProcess:
    """`toolsrv serve -a unix!HOME/ns/toolsrv ARGS` as a process of its own, with `home` as
    its HOME and cwd and its output appended to HOME/LOG; returns once it answers."""

    def __init__(self, home: str, args: list[str], log: str) -> None:
        self.addr = f"unix!{home}/ns/toolsrv"
        env = {k: v for k, v in os.environ.items() if k not in ("OLLIE_TOOLS_PATH",
                                                                 "TOOLSRV_ADDR")}
        env.update(HOME=home, XDG_STATE_HOME=os.path.join(home, "xdg"))
        self.log = open(os.path.join(home, log), "a+")
        self.p = subprocess.Popen([sys.executable, "-m", "toolsrv", "serve", "-a", self.addr,
                                   *args], cwd=home, env=env, stderr=self.log, stdout=self.log)
        assert wait_for(self._answers, 60), self.output()

    def _answers(self) -> bool:
        assert self.p.poll() is None, self.output()
        try:
            with Client.connect(self.addr, timeout=5) as c:
                c.read("revision")
            return True
        except (OSError, ClientError):
            return False

    def output(self) -> str:
        self.log.seek(0)
        return self.log.read()
