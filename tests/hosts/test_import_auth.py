"""An import's shared secret cannot be relayed (issue 44.1, repro/round4/auth_relay.sh).

A hostile remote that the front imports with secret S dials a server that accepts S (here
the front's own TCP listener), hands that server's challenge to the front as its own and
the front's answer back.  Before, it was then a full client of the front.  Now the
challenge names the server it came from, which the front did not dial, and a relay that
rewrites that name gets an answer the real server refuses.  And a front does not prove its
own --auth-secret to a remote unless --import-own-secret says so.
"""
from __future__ import annotations

import os
import shutil
import socket
import threading

import pytest

from toolsrv.cli.client import Client
from toolsrv.proto import (
    QTAUTH, Framer, Qid, Rauth, Rerror, Rread, Rversion, Rwrite, Tattach, Tauth, Tread,
    Tversion, Twrite, encode,
)
from toolsrv.serve import auth

from apphelpers import AppThread, add_tool, tools_dir
from hostshelpers import wait_for
from serverhelpers import MSIZE, stop_clean


@pytest.fixture
def secret_path(tmp_path):
    p = tmp_path / "secret"
    p.write_bytes(b"s3cret-s3cret-s3cret\n")
    p.chmod(0o600)
    return str(p)


@pytest.fixture(scope="module")
def tools():
    d = tools_dir()
    add_tool(d, "echo", "#!/bin/sh\ncat\n", {"readOnly": True})
    yield d
    shutil.rmtree(d, ignore_errors=True)


class Target:
    """A 9P connection the relay keeps to the server it attacks."""

    def __init__(self, port: int) -> None:
        self.sk = socket.create_connection(("127.0.0.1", port), timeout=20)
        self.fr, self.pending = Framer(1 << 20), []
        self.rpc(Tversion(0xFFFF, MSIZE, "9P2000"))

    def rpc(self, m):
        self.sk.sendall(encode(m))
        while not self.pending:
            data = self.sk.recv(65536)
            if not data:
                raise ConnectionError("the target hung up")
            self.pending += self.fr.feed(data)
        return self.pending.pop(0)


class Relay:
    """The hostile remote of relay_remote.py: every Tauth of the front opens one on the
    target; the target's challenge goes to the front (with `rewrite`, naming the relay
    instead), the front's answer to the target, and then a Tattach there is tried.
    `log` says what happened."""

    def __init__(self, rewrite: bool) -> None:
        self.rewrite = rewrite
        self.sk = socket.create_server(("127.0.0.1", 0))
        self.port = self.sk.getsockname()[1]
        self.target = 0                    # the port to relay to, set once known:
        self.known = threading.Event()     # a Tauth waits for it
        self.log: list[str] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                c, _ = self.sk.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c: socket.socket) -> None:
        fr, conn = Framer(1 << 20), {"target": None, "reads": 0}
        with c:
            while True:
                try:
                    data = c.recv(65536)
                except OSError:
                    return
                if not data:
                    return
                for m in fr.feed(data):
                    try:
                        r = self._one(m, conn)
                    except (OSError, ConnectionError) as e:
                        self.log.append(f"target: {e}")
                        r = Rerror(m.tag, "i/o error: the target hung up")
                    c.sendall(encode(r))

    def _one(self, m, conn: dict):
        t = conn["target"]
        if type(m) is Tversion:
            return Rversion(m.tag, min(m.msize, MSIZE), "9P2000")
        if type(m) is Tauth:               # open ours on the target
            self.known.wait(30)
            t = conn["target"] = Target(self.target)
            t.uname = m.uname
            t.rpc(Tauth(1, 5, m.uname, m.aname))
            return Rauth(m.tag, Qid(QTAUTH, 0, 1))
        if type(m) is Tread and t is not None:
            conn["reads"] += 1
            try:
                data = t.rpc(Tread(1, 5, 0, 256)).data
            except OSError:                # the target hung up: a proof made up
                data = b"ok " + b"0" * 64 + b"\n"
            if conn["reads"] == 1 and self.rewrite:
                words = data.split()
                data = b" ".join([words[0], f"127.0.0.1!{self.port}".encode(), words[2]]) + b"\n"
            self.log.append(f"relayed: {data!r}")
            return Rread(m.tag, data)
        if type(m) is Twrite and t is not None:
            r = t.rpc(Twrite(1, 5, 0, m.data))
            self.log.append(f"the target said to the front's answer: {r}")
            try:
                r = t.rpc(Tattach(1, 0, 5, t.uname, ""))
                self.log.append("RELAYED ATTACH ACCEPTED" if type(r) is not Rerror else
                                f"attach refused: {r.ename}")
            except OSError as e:
                self.log.append(f"attach refused: the target hung up: {e}")
            return Rwrite(m.tag, len(m.data))
        return Rerror(m.tag, "permission denied: go away")

    def close(self) -> None:
        self.sk.close()


def tcp_port(a: AppThread) -> int:
    return [x for x in a.app.addrs if x.kind == "tcp"][0].port


@pytest.mark.parametrize("rewrite,words", [
    (False, "names itself"),                 # the target's challenge as it is
    (True, "did not prove the shared secret"),   # renamed to the relay: the answer fails
])
def test_a_remote_cannot_relay_the_fronts_answer(tools, secret_path, rewrite, words):
    relay = Relay(rewrite)
    a = AppThread([tools], auth_secret=secret_path, import_own_secret=True,
                  imports=[f"evil=tcp!127.0.0.1!{relay.port},secret={secret_path}"])
    a.opts.addrs.append("tcp!127.0.0.1!0")
    a.start()
    try:
        relay.target = tcp_port(a)
        relay.known.set()
        with Client.connect(a.addr) as c:
            done = lambda: relay.log and b" down: " in c.read("hosts/ctl") and \
                b"not connected yet" not in c.read("hosts/ctl")     # noqa: E731
            assert wait_for(done), (c.read("hosts/ctl"), relay.log)
            assert not any("ACCEPTED" in ln for ln in relay.log), relay.log
            assert wait_for(lambda: words in c.read("hosts/ctl").decode()), \
                (c.read("hosts/ctl"), relay.log)
            assert words in c.read("tools/errors").decode()
            assert b"evil" not in c.read("tools/index")
        if rewrite:   # the front answered; the front's own listener refused it
            assert any("attach refused" in ln for ln in relay.log), relay.log
            assert any(auth.EAUTHFAIL in ln for ln in relay.log), relay.log
        else:         # the front never answered
            assert not any("answer" in ln for ln in relay.log), relay.log
    finally:
        stop_clean(a)
        relay.close()


@pytest.mark.parametrize("how", ["--import secret=", "$TOOLSRV_SECRET_FILE"])
def test_an_import_does_not_prove_the_servers_own_secret_unless_told(tools, secret_path,
                                                                      tmp_path, how):
    copy = tmp_path / "copy"                      # the same secret in another file
    copy.write_bytes(open(secret_path, "rb").read())
    copy.chmod(0o600)
    spec = "far=tcp!127.0.0.1!1" + (f",secret={copy}" if how.startswith("--") else "")
    env = {"TOOLSRV_SECRET_FILE": str(copy)} if how.startswith("$") else {}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        a = AppThread([tools], auth_secret=secret_path, imports=[spec])
        a.opts.addrs.append("tcp!127.0.0.1!0")
        with pytest.raises(ValueError, match="own --auth-secret.*--import-own-secret"):
            a.start()
        a.cleanup()
        b = AppThread([tools], auth_secret=secret_path, imports=[spec],
                      import_own_secret=True)
        b.opts.addrs.append("tcp!127.0.0.1!0")
        b.start()                                   # told so: it starts
        stop_clean(b)
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
