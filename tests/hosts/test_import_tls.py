"""Imports over TLS (issue 30): a front with its own client certificate imports a remote
that serves mutual TLS; a wrong certificate either way leaves the import down, saying so
in tools/errors and hosts/ctl, and the front keeps serving."""
from __future__ import annotations

import pytest

from toolsrv.cli.client import Client

from apphelpers import AppThread, tools_dir
from serverhelpers import stop_clean
from hostshelpers import Server, wait_for
from tlshelpers import Certs, needs_openssl

pytestmark = needs_openssl
ECHO = ("#!/bin/sh\ncat\n", {"readOnly": True, "description": "echo over tls"})


@pytest.fixture(scope="module")
def certs():
    c = Certs()
    yield c
    c.cleanup()


@pytest.fixture(scope="module")
def remote(certs):
    s = Server({"echo": ECHO}, "--tls-cert", certs.pem("server"), "--tls-key",
               certs.key("server"), "--tls-client-ca", certs.pem("ca"), "-v",
               tls_port=True).start()     # -v: the peer lines
    assert s.tls and not s.tls.endswith("!0"), "".join(s.lines)
    yield s
    s.cleanup()


def front_of(spec: str) -> tuple[AppThread, Client]:
    a = AppThread([tools_dir()], imports=[spec]).start()
    return a, Client.connect(a.addr)


def test_an_import_over_mutual_tls_calls_the_remote(certs, remote):
    addr = remote.tls.replace("127.0.0.1", "localhost")
    a, c = front_of(f"gpu={addr},ca={certs.pem('ca')},cert={certs.pem('client')},"
                    f"key={certs.key('client')}")
    try:
        assert wait_for(lambda: b"gpu.echo" in c.read("tools/index")), c.read("tools/errors")
        c.mkdir("session/t")
        c.mkdir("session/t/agent/t")
        c.write("session/t/agent/t/ctl", b"tool_load gpu.echo\n")
        assert c.rdwr("session/t/agent/t/tools/gpu.echo/call", b'{"tls": 1}') == b'{"tls": 1}'
        assert any("tls peer 127.0.0.1 cert O=fleet,CN=front1" in ln for ln in remote.lines)
    finally:
        c.close()
        stop_clean(a)


@pytest.mark.parametrize("creds,words", [
    ("ca={other_ca},cert={client},key={client_key}", "not trusted"),
    ("ca={ca}", "client certificate"),
    ("ca={ca},cert={outsider},key={outsider_key}", "client certificate"),
])
def test_a_wrong_certificate_leaves_the_import_down_and_says_why(certs, remote, creds, words):
    files = {"ca": certs.pem("ca"), "other_ca": certs.pem("other_ca"),
             "client": certs.pem("client"), "client_key": certs.key("client"),
             "outsider": certs.pem("outsider"), "outsider_key": certs.key("outsider")}
    a, c = front_of(f"gpu={remote.tls},{creds.format(**files)}")
    try:
        line = f"gpu\tunreachable at {remote.tls}: "
        assert wait_for(lambda: line in c.read("tools/errors").decode())
        errors = c.read("tools/errors").decode()
        assert words in errors and remote.tls in errors, errors
        assert b"down: " in c.read("hosts/ctl")
        assert b"gpu." not in c.read("tools/index")
    finally:
        c.close()
        stop_clean(a)


def test_a_plain_import_of_a_tls_port_is_down_not_hung(remote):
    plain = remote.tls.replace("tls!", "tcp!")
    a, c = front_of(f"gpu={plain}")
    try:
        assert wait_for(lambda: f"gpu\tunreachable at {plain}: " in
                        c.read("tools/errors").decode()), c.read("tools/errors")
    finally:
        c.close()
        stop_clean(a)
