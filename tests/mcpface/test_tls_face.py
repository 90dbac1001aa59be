"""`toolsrv mcp -a tls!HOST!PORT` (issue 30): the MCP face dials a TLS listener with its
--tls-ca/--tls-cert/--tls-key, mutual TLS included, and says who refused it and why."""
from __future__ import annotations

import subprocess
import tempfile

import anyio
import pytest

from apphelpers import AppThread
from mcphelpers import FACE, env, face_tools, stdio_face, text
from serverhelpers import stop_clean
from tlshelpers import Certs, needs_openssl

pytestmark = needs_openssl


@pytest.fixture(scope="module")
def served():
    certs = Certs()
    a = AppThread([face_tools()], tls_cert=certs.pem("server"), tls_key=certs.key("server"),
                  tls_client_ca=certs.pem("ca"))
    a.opts.addrs.append("tls!127.0.0.1!0")
    a.start()
    port = [x for x in a.app.addrs if x.kind == "tls"][0].port
    yield certs, f"tls!localhost!{port}"
    stop_clean(a)
    certs.cleanup()


def test_the_face_calls_a_tool_over_mutual_tls(served):
    certs, addr = served

    async def go():
        async with stdio_face("-a", addr, "--tls-ca", certs.pem("ca"), "--tls-cert",
                              certs.pem("client"), "--tls-key", certs.key("client"),
                              "--session", "tlsface") as s:
            names = [t.name for t in (await s.list_tools()).tools]
            assert "echo" in names
            r = await s.call_tool("echo", {"x": "over tls"})
            assert "over tls" in text(r)
    anyio.run(go)


@pytest.mark.parametrize("extra,words", [
    (["--tls-ca", "other_ca"], "not trusted"),
    (["--tls-ca", "ca"], "client certificate"),
])
def test_the_face_says_why_tls_failed(served, extra, words):
    certs, addr = served
    extra = [certs.pem(x) if not x.startswith("-") else x for x in extra]
    r = subprocess.run([*FACE, "-a", addr, "--no-standalone", *extra], env=env(),
                       cwd=tempfile.gettempdir(), capture_output=True, text=True, timeout=120,
                       stdin=subprocess.DEVNULL)
    assert r.returncode == 1 and addr in r.stderr and words in r.stderr, r.stderr
