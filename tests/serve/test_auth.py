"""Tauth's exchange (toolsrv/serve/auth.py) as an attacker plays it (issues 43.7 and 44.1).

The server: an afid's answer is bounded and counted in --max-held, a connection holds few
afids, and an answer past the bound or a wrong one (reflected, replayed, made for another
TLS channel) fails and ends the connection.  The clients (the CLI's and the async one
imports use): a challenge naming another server than the one dialed, an older scheme, and
a server proof that is reflected, replayed or missing are each refused, saying so.  Fake
servers are threads on loopback speaking 9P with the project's codec.
"""
from __future__ import annotations

import asyncio
import getpass
import shutil
import socket
import ssl
import threading

import pytest

from toolsrv.cli.client import Client, ClientError
from toolsrv.hosts.ninep import NineP
from toolsrv.proto import (
    NOTAG, QTAUTH, Framer, Qid, Rattach, Rauth, Rclunk, Rerror, Rread, Rversion, Rwrite,
    Tattach, Tauth, Tclunk, Tread, Tversion, Twrite, encode,
)
from toolsrv.serve import auth
from toolsrv.serve.tls import ClientTLS

from apphelpers import AppThread, add_tool, tools_dir
from serverhelpers import MSIZE, Raw, stop_clean
from tlshelpers import Certs, needs_openssl

SECRET = b"s3cret-s3cret-s3cret"
ME = getpass.getuser()          # the uname the clients attach with


@pytest.fixture(scope="module")
def tools():
    d = tools_dir()
    add_tool(d, "echo", "#!/bin/sh\ncat\n", {"readOnly": True})
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def secret_path(tmp_path):
    p = tmp_path / "secret"
    p.write_bytes(SECRET + b"\n")
    p.chmod(0o600)
    return str(p)


def tcp_app(tools: str, secret: str, kind: str = "tcp", **opts) -> AppThread:
    a = AppThread([tools], auth_secret=secret, **opts)
    a.opts.addrs.append(f"{kind}!127.0.0.1!0")
    return a.start()


def port_of(a: AppThread, kind: str = "tcp") -> int:
    return [x for x in a.app.addrs if x.kind == kind][0].port


def raw_tcp(port: int, wrap=None) -> Raw:
    """A bare 9P connection over TCP (wrap: a function making it TLS), Tversion done."""
    sk = socket.create_connection(("127.0.0.1", port), timeout=20)
    raw = Raw.__new__(Raw)
    raw.sk, raw.fr, raw.pending = (wrap(sk) if wrap else sk), Framer(1 << 20), []
    assert type(raw.rpc(Tversion(NOTAG, 65536 + 24, "9P2000"))) is Rversion
    return raw


def hung_up(raw: Raw) -> bool:
    """The server closed the connection (a reset too: it hung up with our requests unread);
    False when it is still open after the socket's timeout."""
    try:
        while raw.sk.recv(65536):
            pass
        return True
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def challenge_of(raw: Raw, afid: int, uname: str = "bob") -> tuple[str, bytes]:
    """Tauth and the challenge's server id and nonce."""
    r = raw.ok(Tauth(1, afid, uname, ""))
    assert type(r) is Rauth and r.aqid.type == QTAUTH
    words = raw.ok(Tread(1, afid, 0, 256)).data.split()
    assert words[0] == auth.SCHEME.encode()
    return words[1].decode(), bytes.fromhex(words[2].decode())


def answer(role: str, server: str, snonce: bytes, cnonce: bytes, uname: str = "bob",
           chan: bytes = b"") -> bytes:
    m = auth.mac(SECRET, role, server, snonce, cnonce, uname, "", chan)
    return f"{cnonce.hex()} {m}\n".encode()


# ------------------------------------------------------------------ the server's side

def test_the_exchange_is_mutual_and_names_the_server(tools, secret_path):
    a = tcp_app(tools, secret_path)
    try:
        raw = raw_tcp(port_of(a))
        server, snonce = challenge_of(raw, 7)
        assert server == f"127.0.0.1!{port_of(a)}"           # the address the client dialed
        cnonce = b"\1" * 16
        raw.ok(Twrite(1, 7, 0, answer("client", server, snonce, cnonce)))
        proof = raw.ok(Tread(1, 7, 0, 256)).data
        assert proof == b"ok " + auth.mac(SECRET, "server", server, snonce, cnonce, "bob", "",
                                          b"").encode() + b"\n"
        assert raw.rpc(Tattach(1, 0, 7, "eve", "")) == Rerror(1, auth.EAUTHFAIL)
        assert type(raw.ok(Tattach(1, 0, 7, "bob", ""))) is Rattach
        raw.close()
    finally:
        stop_clean(a)


@pytest.mark.parametrize("attack", ["reflected", "replayed", "other names", "old scheme"])
def test_a_wrong_answer_fails_and_ends_the_connection(tools, secret_path, attack):
    """A reflection (the server's own proof, its key and direction, given back as the
    answer), a replay (an answer that proved an earlier afid), an answer for other names,
    an answer of the old scheme: each is refused, and the connection ends."""
    a = tcp_app(tools, secret_path)
    try:
        first = raw_tcp(port_of(a))
        server, snonce = challenge_of(first, 7)
        cnonce = b"\2" * 16
        good = answer("client", server, snonce, cnonce)
        first.ok(Twrite(1, 7, 0, good))
        proof = first.ok(Tread(1, 7, 0, 256)).data.split()[1]
        raw = raw_tcp(port_of(a))
        server2, snonce2 = challenge_of(raw, 8)
        bad = {"reflected": cnonce.hex().encode() + b" " + proof + b"\n",
               "replayed": good,
               "other names": answer("client", server2, snonce2, cnonce, uname="eve"),
               "old scheme": auth.mac(SECRET, "client", server2, snonce2, cnonce, "bob", "",
                                      b"").encode() + b"\n"}[attack]
        assert raw.rpc(Twrite(1, 8, 0, bad)) == Rerror(1, auth.EAUTHFAIL)
        assert hung_up(raw)
        with pytest.raises((ConnectionError, OSError)):
            raw.rpc(Tattach(1, 0, 8, "bob", ""))
        first.close()
    finally:
        stop_clean(a)


def test_an_afid_answer_is_bounded_and_a_long_one_hangs_up(tools, secret_path, loop_probe):
    """repro/round4/auth_afid_growth.sh: an unauthenticated client wrote 47 MiB of blanks
    after one byte to its afid, all kept and re-stripped per write, stalling the loop.
    Now the first write past MAX_ANSWER fails and the connection ends; the rest pipelined
    behind it is never handled."""
    a = tcp_app(tools, secret_path)
    try:
        with loop_probe(a.addr):
            raw = raw_tcp(port_of(a))
            raw.ok(Tauth(1, 7, "x", ""))
            raw.ok(Twrite(1, 7, 0, b"x"))
            chunk = b" " * 65000
            raw.send(*[Twrite(2 + i, 7, 0, chunk) for i in range(16)])
            r = raw.recv()[0]
            assert type(r) is Rerror and r.tag == 2 and "too long" in r.ename, r
            assert r.ename == auth.EAUTHLONG and str(auth.MAX_ANSWER) in r.ename
            assert hung_up(raw)
            # byte by byte, the bound is the same
            raw = raw_tcp(port_of(a))
            raw.ok(Tauth(1, 7, "x", ""))
            for _ in range(auth.MAX_ANSWER):
                raw.ok(Twrite(1, 7, 0, b" "))
            assert raw.rpc(Twrite(1, 7, 0, b" ")) == Rerror(1, auth.EAUTHLONG)
            assert hung_up(raw)
    finally:
        stop_clean(a)


def test_afids_are_few_and_counted_in_max_held(tools, secret_path):
    a = tcp_app(tools, secret_path, max_held=100)
    try:
        raw = raw_tcp(port_of(a))
        for afid in range(auth.MAX_AFIDS):
            raw.ok(Tauth(1, 10 + afid, "x", ""))
        r = raw.rpc(Tauth(1, 99, "x", ""))
        assert type(r) is Rerror and "too many auth fids" in r.ename, r
        assert type(raw.ok(Tclunk(1, 10))) is Rclunk
        raw.ok(Tauth(1, 99, "x", ""))                   # one clunked: room for another
        r = raw.rpc(Twrite(1, 99, 0, b" " * 150))       # an answer so far, over --max-held
        assert type(r) is Rerror and "hold over 100 bytes" in r.ename, r
        raw.close()
    finally:
        stop_clean(a)


@needs_openssl
def test_inside_tls_the_answer_is_bound_to_the_channel(tools, secret_path):
    """An answer made for another TLS connection (here: without this one's binding, as a
    relay between two TLS connections would have it) is refused and hangs up; with this
    connection's binding it proves the secret; the CLI's client does that."""
    certs = Certs()
    a = None
    try:
        a = tcp_app(tools, secret_path, kind="tls", tls_cert=certs.pem("server"),
                    tls_key=certs.key("server"))
        ctx = ssl.create_default_context(cafile=certs.pem("ca"))
        tls = lambda sk: ctx.wrap_socket(sk, server_hostname="localhost")   # noqa: E731
        raw = raw_tcp(port_of(a, "tls"), tls)
        server, snonce = challenge_of(raw, 7)
        assert raw.rpc(Twrite(1, 7, 0, answer("client", server, snonce, b"\3" * 16))) \
            == Rerror(1, auth.EAUTHFAIL)
        assert hung_up(raw)
        raw = raw_tcp(port_of(a, "tls"), tls)
        server, snonce = challenge_of(raw, 7)
        raw.ok(Twrite(1, 7, 0, answer("client", server, snonce, b"\3" * 16,
                                      chan=auth.binding(raw.sk))))
        raw.close()
        with Client.connect(f"tls!127.0.0.1!{port_of(a, 'tls')}", secret=SECRET,
                            tls=ClientTLS(ca=certs.pem("ca")), timeout=20) as c:
            assert b"echo" in c.read("tools/index")
    finally:
        if a is not None:
            stop_clean(a)
        certs.cleanup()


# ------------------------------------------------------------------ the client's side

class FakeServer:
    """One 9P server on loopback that holds the secret (or not) and plays its part of the
    exchange as `play` says: play(challenge sent, answer got) -> the proof it reads back.
    `challenge(port)` makes the challenge; `attached` is set when a Tattach came."""

    def __init__(self, play, challenge=None) -> None:
        self.play = play
        self.sk = socket.create_server(("127.0.0.1", 0))
        self.port = self.sk.getsockname()[1]
        self.challenge = (challenge or (lambda port: (
            f"{auth.SCHEME} 127.0.0.1!{port} {'ab' * 16}\n".encode())))(self.port)
        self.attached = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        c, _ = self.sk.accept()
        fr, got, reads = Framer(1 << 20), b"", 0
        with c:
            while True:
                try:
                    data = c.recv(65536)
                except ConnectionResetError:
                    return
                if not data:
                    return
                for m in fr.feed(data):
                    if type(m) is Tversion:
                        r = Rversion(m.tag, min(m.msize, MSIZE), "9P2000")
                    elif type(m) is Tauth:
                        r = Rauth(m.tag, Qid(QTAUTH, 0, 1))
                    elif type(m) is Tread:
                        reads += 1
                        r = Rread(m.tag, self.challenge if reads == 1 else
                                  self.play(self.challenge, got))
                    elif type(m) is Twrite:
                        got = m.data
                        r = Rwrite(m.tag, len(m.data))
                    elif type(m) is Tattach:
                        self.attached.set()
                        r = Rattach(m.tag, Qid(0x80, 0, 2))
                    elif type(m) is Tclunk:
                        r = Rclunk(m.tag)
                    else:
                        r = Rerror(m.tag, "permission denied: a fake")
                    c.sendall(encode(r))

    def close(self) -> None:
        self.sk.close()


def _proof(role: str, challenge: bytes, got: bytes, cnonce: bytes | None = None) -> bytes:
    _, server, snonce = challenge.split()
    cn = cnonce if cnonce is not None else bytes.fromhex(got.split()[0].decode())
    return b"ok " + auth.mac(SECRET, role, server.decode(), bytes.fromhex(snonce.decode()), cn,
                             ME, "", b"").encode() + b"\n"


PLAYS = {
    # the client's own answer given back as the server's proof: a reflection
    "reflected": lambda ch, got: b"ok " + got.split()[1] + b"\n",
    # a true proof of an earlier exchange (another client nonce): a replay
    "replayed": lambda ch, got: _proof("server", ch, got, cnonce=b"\5" * 16),
    # a server without the secret: no proof at all, or one made with another secret
    "no proof": lambda ch, got: ch,
}


def _dial(kind: str, port: int) -> None:
    """Connect as the CLI does (kind "sync") or as an import does ("async")."""
    addr = f"tcp!127.0.0.1!{port}"
    if kind == "sync":
        Client.connect(addr, secret=SECRET, timeout=20, uname=ME).close()
    else:
        async def go() -> None:
            n = await asyncio.wait_for(NineP.connect(addr, secret=SECRET, uname=ME),
                                       20)
            n.close()
        asyncio.run(go())


@pytest.mark.parametrize("kind", ["sync", "async"])
@pytest.mark.parametrize("play", sorted(PLAYS))
def test_a_server_that_does_not_prove_the_secret_is_refused(kind, play):
    fake = FakeServer(PLAYS[play])
    try:
        with pytest.raises(auth.AuthError, match="did not prove the shared secret"):
            _dial(kind, fake.port)
        assert not fake.attached.is_set()
    finally:
        fake.close()


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_server_that_proves_the_secret_is_accepted(kind):
    fake = FakeServer(lambda ch, got: _proof("server", ch, got))
    try:
        _dial(kind, fake.port)
        assert fake.attached.wait(10)
    finally:
        fake.close()


@pytest.mark.parametrize("kind", ["sync", "async"])
@pytest.mark.parametrize("challenge,words", [
    (lambda port: f"{auth.SCHEME} 127.0.0.1!{port + 1} {'ab' * 16}\n".encode(),
     "names itself '127.0.0.1!"),                             # relayed from another server
    (lambda port: f"{auth.OLD_SCHEME} {'ab' * 16}\n".encode(), "upgrade it"),
    (lambda port: b"something else\n", "unknown authentication challenge"),
])
def test_a_challenge_from_elsewhere_is_refused_naming_it(kind, challenge, words):
    fake = FakeServer(lambda ch, got: _proof("server", ch, got), challenge)
    try:
        with pytest.raises(auth.AuthError, match=words):
            _dial(kind, fake.port)
        assert not fake.attached.is_set()
    finally:
        fake.close()


def test_a_wrong_secret_is_refused_by_the_real_server(tools, secret_path):
    a = tcp_app(tools, secret_path)
    try:
        with pytest.raises(ClientError, match="authentication failed"):
            Client.connect(f"tcp!127.0.0.1!{port_of(a)}", secret=b"another-secret-entirely",
                           timeout=20)
    finally:
        stop_clean(a)
