"""The MCP face over streamable HTTP: the SDK's app behind a bearer-token gate, on uvicorn.

Theory of operation.  `--http HOST:PORT` serves the SDK's streamable HTTP app at
`/mcp`.  Who may connect follows `serve`'s rules for TCP: a loopback address by default
(the SDK's DNS-rebinding guard on, so a web page cannot reach it through a name that
resolves to 127.0.0.1); any other address only with `--listen-any` and `--token-file
FILE`, a file of ours, mode 600, of at least 16 bytes (auth.load_secret, as
`--auth-secret`).  With a token, every HTTP request must carry `Authorization: Bearer
<the file's text>`, compared in constant time; one without it is answered 401 with a
JSON-RPC error body naming what is missing, before the SDK sees it, and the server goes
on serving.  The listening socket is bound here, before uvicorn starts, so the port (0:
any free one) is known and printed at once.
"""
from __future__ import annotations

import hmac
import ipaddress
import json
import socket
import sys
from typing import Any

from .server import Wiring


class BadListen(ValueError):
    """An --http address or its options are not acceptable; str(e) says why."""


def parse_hostport(s: str) -> tuple[str, int]:
    """HOST:PORT, [V6]:PORT or :PORT (loopback) -> (host, port)."""
    host, sep, port = s.rpartition(":")
    if not sep:
        raise BadListen(f"--http {s}: want HOST:PORT (e.g. 127.0.0.1:8765)")
    host = host.strip("[]") or "127.0.0.1"
    try:
        p = int(port)
    except ValueError:
        raise BadListen(f"--http {s}: bad port {port!r}") from None
    if not 0 <= p <= 65535:
        raise BadListen(f"--http {s}: bad port {p}")
    return host, p


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_listen(host: str, listen_any: bool, token_file: str | None) -> bytes | None:
    """The bearer token to require (None: none), or BadListen saying what is missing."""
    if not is_loopback(host) and not listen_any:
        raise BadListen(f"{host} is not a loopback address: a non-loopback listener needs "
                        "--listen-any and --token-file FILE")
    if listen_any and not token_file:
        raise BadListen("--listen-any needs --token-file FILE (a bearer token, mode 600, "
                        "at least 16 bytes)")
    if not token_file:
        return None
    from ..serve.auth import load_secret
    return load_secret(token_file)


class BearerGate:
    """ASGI middleware: an HTTP request without `Authorization: Bearer TOKEN` is 401."""

    def __init__(self, app: Any, token: bytes | None) -> None:
        self.app = app
        self.want = b"Bearer " + token if token else None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and self.want is not None:
            got = next((v for k, v in scope.get("headers", []) if k == b"authorization"), b"")
            if not hmac.compare_digest(got, self.want):
                await _refuse(send, "unauthorized: this toolsrv mcp wants the header "
                              "`Authorization: Bearer <token>`, the token being the text of "
                              "its --token-file" if not got else
                              "unauthorized: wrong bearer token")
                return
        await self.app(scope, receive, send)


async def _refuse(send: Any, why: str) -> None:
    body = json.dumps({"jsonrpc": "2.0", "id": None,
                       "error": {"code": -32001, "message": why}}).encode()
    await send({"type": "http.response.start", "status": 401,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode()),
                            (b"www-authenticate", b'Bearer realm="toolsrv"')]})
    await send({"type": "http.response.body", "body": body})


def bind(host: str, port: int) -> socket.socket:
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind((host, port))
        s.listen(128)
    except OSError:
        s.close()
        raise
    return s


async def serve_http(wiring: Wiring, sock: socket.socket, token: bytes | None) -> None:
    """Serve on the bound `sock` until uvicorn is told to stop (SIGINT, SIGTERM) or the
    task is cancelled."""
    import uvicorn
    host = sock.getsockname()[0]
    app = wiring.server.streamable_http_app(streamable_http_path="/mcp", host=host)
    shown = f"[{host}]" if ":" in host else host
    print(f"toolsrv mcp: streamable HTTP on http://{shown}:{sock.getsockname()[1]}/mcp"
          + (" (bearer token required)" if token else
             " (loopback, no token: any local user can connect)"),
          file=sys.stderr, flush=True)
    config = uvicorn.Config(BearerGate(app, token), log_level="warning", lifespan="on",
                            access_log=False)
    try:
        await uvicorn.Server(config).serve(sockets=[sock])
    finally:
        sock.close()
