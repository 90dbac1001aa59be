"""9P inside TLS (issue 30, section 1): tls!HOST!PORT listeners and every client that dials
one, with certificates the tests make (tlshelpers.py): a private CA, host names verified,
mutual TLS with the client certificate's subject as the peer, Tauth inside TLS, a wrong
certificate refused with the peer named, and a plain client on a TLS port hung up on."""
from __future__ import annotations

import asyncio
import logging
import os
import re
import shutil
import socket
import subprocess
import threading

import pytest

from toolsrv.app import App, Options
from toolsrv.cli.client import Client, ClientError
from toolsrv.proto import NOTAG, Tversion, encode
from toolsrv.serve import auth, dial, tls
from toolsrv.serve.tls import ClientTLS, TLSError

from apphelpers import AppThread, add_tool, tools_dir
from serverhelpers import stop_clean
from shellhelpers import TOOLSRV, serving
from tlshelpers import Certs, needs_openssl

pytestmark = needs_openssl


@pytest.fixture(scope="module")
def tools():
    d = tools_dir()
    add_tool(d, "echo", "#!/bin/sh\ncat\n", {"readOnly": True})
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def certs():
    c = Certs()
    yield c
    c.cleanup()


def tls_app(tools: str, certs: Certs, server: str = "server", **opts) -> AppThread:
    a = AppThread([tools], tls_cert=certs.pem(server), tls_key=certs.key(server), **opts)
    a.opts.addrs.append("tls!127.0.0.1!0")
    return a.start()


def tls_addr(a: AppThread, host: str = "127.0.0.1") -> str:
    got = [x for x in a.app.addrs if x.kind == "tls"][0]
    return f"tls!{host}!{got.port}"


def trusting(certs: Certs, client: str | None = None, ca: str = "ca") -> ClientTLS:
    return ClientTLS(ca=certs.pem(ca), cert=certs.pem(client) if client else None,
                     key=certs.key(client) if client else None)


def test_tls_dial_strings():
    a = dial.parse("tls!build.example!5640")
    assert (a.kind, a.host, a.port, a.is_tcp) == ("tls", "build.example", 5640, True)
    assert str(a) == "tls!build.example!5640"
    assert dial.parse("tls!127.0.0.1!1").is_loopback()
    assert not dial.parse("unix!/x").is_tcp
    for bad in ("tls!host", "tls!!1", "tls!h!port", "tls!h!70000"):
        with pytest.raises(ValueError):
            dial.parse(bad)


def test_a_tls_client_reads_the_tree_by_ip_and_by_name(tools, certs):
    a = tls_app(tools, certs)
    try:
        for host in ("127.0.0.1", "localhost"):
            with Client.connect(tls_addr(a, host), tls=trusting(certs), timeout=20) as c:
                assert b"echo" in c.read("tools/index")
                c.mkdir(f"session/{host}")       # writes and reads share the TLS stream
                assert host in [d.name for d in c.ls("session")]
                big = c.read("tools/index")
                assert big == c.read("tools/index")
    finally:
        stop_clean(a)


def test_threads_share_one_tls_connection(tools, certs):
    """The reader thread and several writers on one TLSSocket: every reply comes back."""
    a = tls_app(tools, certs)
    try:
        with Client.connect(tls_addr(a), tls=trusting(certs), timeout=20) as c:
            want = c.read("tools/index")
            got, errors = [], []

            def reader():
                try:
                    for _ in range(20):
                        got.append(c.read("tools/index") == want)
                except Exception as e:     # noqa: BLE001  (reported below)
                    errors.append(e)
            ts = [threading.Thread(target=reader) for _ in range(4)]
            for t in ts:
                t.start()
            for t in ts:
                t.join(120)
            assert errors == [] and got == [True] * 80
    finally:
        stop_clean(a)


def test_the_ca_comes_from_the_environment(tools, certs, monkeypatch):
    a = tls_app(tools, certs)
    try:
        monkeypatch.setenv("TOOLSRV_TLS_CA", certs.pem("ca"))
        with Client.connect(tls_addr(a), timeout=20) as c:
            assert b"echo" in c.read("tools/index")
    finally:
        stop_clean(a)


def test_a_certificate_of_another_ca_is_a_clear_error_naming_the_peer(tools, certs):
    a = tls_app(tools, certs, server="stranger")
    try:
        where = tls_addr(a)
        with pytest.raises(TLSError) as e:
            Client.connect(where, tls=trusting(certs), timeout=20)
        assert where in str(e.value) and "not trusted" in str(e.value)
        assert "--tls-ca" in str(e.value)
    finally:
        stop_clean(a)


def test_the_host_name_is_verified(tools, certs):
    a = tls_app(tools, certs, server="elsewhere")     # signed by our CA, for another name
    try:
        with pytest.raises(TLSError, match="not for this address.*(?i:hostname|mismatch)") \
                as e:       # trusted, for another name: the CA is not what to change
            Client.connect(tls_addr(a, "localhost"), tls=trusting(certs), timeout=20)
        assert "--tls-ca" not in str(e.value) and "subjectAltName" in str(e.value)
    finally:
        stop_clean(a)


def test_a_plain_client_on_a_tls_port_is_hung_up_on(tools, certs):
    a = tls_app(tools, certs)
    try:
        port = tls_addr(a).rsplit("!", 1)[1]
        done: list = []

        def dial_plain():
            try:
                Client.connect(f"tcp!127.0.0.1!{port}", timeout=20)
            except Exception as e:    # noqa: BLE001
                done.append(e)
        t = threading.Thread(target=dial_plain, daemon=True)
        t.start()
        t.join(60)
        assert not t.is_alive(), "a plain client on a TLS port hangs"
        assert isinstance(done[0], ConnectionError)
        assert "hung up" in str(done[0]) and f"tls!127.0.0.1!{port}" in str(done[0])
    finally:
        stop_clean(a)


def test_a_client_that_sends_nothing_is_hung_up_on_after_the_handshake_bound(
        tools, certs, monkeypatch):
    monkeypatch.setattr(tls, "HANDSHAKE_TIMEOUT", 1.0)
    a = tls_app(tools, certs)
    try:
        port = int(tls_addr(a).rsplit("!", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
            assert s.recv(100) == b""              # closed by the server, not our timeout
        with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
            s.sendall(encode(Tversion(NOTAG, 8192, "9P2000")))   # not a ClientHello
            data = s.recv(100)
            assert b"9P2000" not in data           # an alert at most, then the close
            while data:
                data = s.recv(100)
    finally:
        stop_clean(a)


def test_mutual_tls_names_the_peer_by_its_certificate(tools, certs, caplog):
    caplog.set_level(logging.DEBUG, logger="toolsrv.transport")   # serve -v logs who connects
    a = tls_app(tools, certs, tls_client_ca=certs.pem("ca"))
    try:
        with Client.connect(tls_addr(a), tls=trusting(certs, "client"), timeout=20) as c:
            assert b"echo" in c.read("tools/index")
        assert any("tls peer 127.0.0.1 cert O=fleet,CN=front1" in r.getMessage()
                   for r in caplog.records), [r.getMessage() for r in caplog.records]
        for who in (None, "outsider"):            # no certificate; one of another CA
            with pytest.raises(TLSError) as e:
                c = Client.connect(tls_addr(a), tls=trusting(certs, who), timeout=20)
                c.read("tools/index")
            assert tls_addr(a) in str(e.value)
    finally:
        stop_clean(a)


def test_a_far_tls_listener_needs_client_certificates_or_a_secret(tmp_path, certs):
    far = "tls!192.0.2.1!5640"
    with pytest.raises(ValueError, match="--tls-client-ca"):
        App(Options(addrs=[far], listen_any=True))._configs()
    App(Options(addrs=[far], listen_any=True, tls_client_ca=certs.pem("ca")))._configs()
    with pytest.raises(ValueError, match="--auth-secret"):   # plain TCP: still a secret
        App(Options(addrs=["tcp!192.0.2.1!5640"], listen_any=True,
                    tls_client_ca=certs.pem("ca")))._configs()


def test_tls_needs_a_certificate_and_says_which_file_is_wrong(tools, certs, tmp_path):
    a = AppThread([tools])
    a.opts.addrs.append("tls!127.0.0.1!0")
    with pytest.raises(ValueError, match="--tls-cert FILE and --tls-key FILE"):
        a.start()
    a.cleanup()
    a = AppThread([tools], tls_cert=str(tmp_path / "nope.pem"), tls_key=certs.key("server"))
    a.opts.addrs.append("tls!127.0.0.1!0")
    with pytest.raises(ValueError, match="nope.pem: file not found"):
        a.start()
    a.cleanup()
    with pytest.raises(TLSError, match="--tls-ca .*file not found"):
        ClientTLS(ca=str(tmp_path / "nope.pem")).context()


def test_tauth_still_works_inside_tls(tools, certs, tmp_path):
    secret = tmp_path / "secret"
    secret.write_bytes(b"s3cret-s3cret-s3cret")
    secret.chmod(0o600)
    a = tls_app(tools, certs, auth_secret=str(secret))
    try:
        with pytest.raises(ClientError, match="permission denied"):
            Client.connect(tls_addr(a), tls=trusting(certs), timeout=20)
        with Client.connect(tls_addr(a), tls=trusting(certs), timeout=20,
                            secret=auth.load_secret(str(secret))) as c:
            assert b"echo" in c.read("tools/index")
    finally:
        stop_clean(a)


def test_the_async_client_dials_tls(tools, certs):
    """The MCP face's connection (mcp/ninep.py), as `toolsrv mcp -a tls!...` makes it."""
    from toolsrv.mcp.ninep import NineP
    a = tls_app(tools, certs)
    try:
        async def go():
            n = await NineP.connect(tls_addr(a), tls=trusting(certs))
            try:
                return await n.read("tools/index")
            finally:
                n.close()
        assert b"echo" in asyncio.run(go())
        with pytest.raises(TLSError, match="not trusted"):
            asyncio.run(NineP.connect(tls_addr(a), tls=trusting(certs, ca="other_ca")))
    finally:
        stop_clean(a)


def test_the_cli_serves_and_reads_tls_from_outside_the_checkout(certs, tmp_path):
    args = ["-a", "tls!127.0.0.1!0", "--no-state", "--tls-cert", certs.pem("server"),
            "--tls-key", certs.key("server"), "--tls-client-ca", certs.pem("ca")]
    with serving(*args) as (env, banner, _p):
        m = re.search(r"tls!127\.0\.0\.1!(\d+)", banner)
        assert m, banner
        addr = m.group(0)
        mine = ["--tls-cert", certs.pem("client"), "--tls-key", certs.key("client")]

        def read(*extra, **more):
            return subprocess.run(TOOLSRV + ["read", "-a", addr, *extra, "tools/index"],
                                  env=dict(env, **more), cwd=str(tmp_path),
                                  capture_output=True, text=True, timeout=120)
        r = read("--tls-ca", certs.pem("ca"), *mine)
        assert r.returncode == 0 and "file_read" in r.stdout, r.stderr
        r = read(*mine, TOOLSRV_TLS_CA=certs.pem("ca"))
        assert r.returncode == 0 and "file_read" in r.stdout, r.stderr
        r = read("--tls-ca", certs.pem("other_ca"), *mine)
        assert r.returncode == 1 and addr in r.stderr and "not trusted" in r.stderr
        r = read("--tls-ca", certs.pem("ca"))            # no client certificate
        assert r.returncode == 1 and addr in r.stderr, r.stderr
        assert os.path.basename(os.getcwd()) != tmp_path.name
