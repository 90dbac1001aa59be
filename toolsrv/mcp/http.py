"""The MCP face over streamable HTTP: the SDK's app behind a gate (Origin, Host, bearer
token), on uvicorn.

Theory of operation.  `--http HOST:PORT` serves the SDK's streamable HTTP app at `/mcp`.
Every request passes the gate before the SDK sees it:

  Origin   a request that carries one passes only when it is the face's own origin,
           `http://<the address the request reached>:<our port>` (and, on loopback,
           `http://localhost:<port>`): a page elsewhere, or on another local port, gets
           403.  On loopback the Host header must name us too (421), so a page cannot
           come in through a name that resolves to 127.0.0.1 (DNS rebinding).
  token    `Authorization: Bearer <token>`, compared in constant time, else 401 with a
           JSON-RPC error body saying what is missing.  A token is required by default,
           loopback included (any local user can reach a loopback port): the text of
           --token-file, else of `mcp-token` in the state home (made on first start,
           mode 600, and printed then, as Jupyter does).  `--no-token` is the explicit
           choice of none, for loopback only.  With --oauth-issuer, an OAuth access
           token instead (oauth.py: 401 naming the resource metadata, served here
           without a token; 403 for a scope the request needs), and the principal is
           put in the ASGI scope as Starlette's authentication would, for the SDK (a
           session is its principal's) and the handlers (server.py).

Connections are bounded (httpconns.py): a connection with no request passed yet counts
against a small budget of its peer's (its uid on loopback), apart from those that passed,
and must bring a whole request head within a few seconds; a refused request (401, 403,
421) ends its connection, so a peer without the token can never hold what the owner
needs.  A request body is read whole before the SDK sees it, MAX_BODY bytes at most
(413).  uvicorn's limit_concurrency bounds the requests in flight (503).  Refusals are
said on stderr (Refusals): the first at once, with its peer and why, then at most a line
a minute counting the others, so an operator sees a wrong token or a foreign page at
work, and a flood of them costs a line a minute.  A refused request never reaches
toolsrv, so the server's audit trail does not hold it; this log does.

Sessions are bounded: the SDK ends one that has had no request in flight (no open GET
stream either) for --idle-timeout seconds, and refuses a new one (503) while
--max-sessions are open; each one's end removes its seat (server.py), so abandoned
clients never pile up in the tree.  The listening socket is bound here, before uvicorn
starts, so the port (0: any free one) is known and printed at once.

Stopping: uvicorn handles no signal itself (its handler raced run.py's and re-raised
SIGTERM after its shutdown, killing the face before its cleanup).  run.py's SIGTERM or
SIGINT calls `wiring.stop`: the gate tells every open request that its client went away
(http.disconnect), so listening streams end at once, and uvicorn shuts down gracefully
(STOP_GRACE seconds at most); the face then ends as over stdio, with exit status 0.
"""
from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import socket
import sys
import time
from collections import Counter
from typing import Any, Callable

from .httpconns import (ACCEPT_BATCH, BACKLOG, HELD_MAX, MAX_HEAD, Conns, TooFewFds,
                        guarded, is_loopback, passed_room, rpc_error)
from .oauth import Refused, Stale
from .server import PRINCIPAL, Wiring

MAX_BODY = 8 << 20       # bytes of one request's body (a call's args are 1 MiB by default)
SAY_EVERY = 60.0         # seconds between the face's lines about refused requests


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


TOKEN_NAME = "mcp-token"


def default_token_file() -> str:
    from ..dirs.statedir import state_home
    return os.path.join(state_home(), TOKEN_NAME)


def check_listen(host: str, listen_any: bool, token_file: str | None,
                 no_token: bool = False, oauth: bool = False
                 ) -> tuple[bytes | None, str | None, bool]:
    """(the bearer token to require or None, the file it is in, whether it was made
    now), or BadListen saying what is wrong.  With `oauth` (--oauth-issuer) no static
    token: oauth.py checks each request's."""
    if not is_loopback(host) and not listen_any:
        raise BadListen(f"{host} is not a loopback address: a non-loopback listener needs "
                        "--listen-any (and a token: --token-file FILE, or the default)")
    if no_token and (listen_any or token_file):
        raise BadListen("--no-token goes with a loopback --http alone (not with "
                        "--listen-any or --token-file)")
    if oauth and (no_token or token_file):
        raise BadListen("--oauth-issuer replaces the static token: give it without "
                        "--token-file or --no-token")
    try:
        passed_room()          # the open-file limit leaves room for the connections
    except TooFewFds as e:
        raise BadListen(str(e)) from None
    if no_token or oauth:
        return None, None, False
    from ..serve.auth import load_secret
    if token_file:
        return load_secret(token_file), token_file, False
    path = default_token_file()
    made = _make_token(path)
    return load_secret(path), path, made


def _make_token(path: str) -> bool:
    """Write a new random token to `path` (mode 600, never over a file or a link that is
    there); False when one is there already."""
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        return False
    try:
        os.write(fd, os.urandom(24).hex().encode() + b"\n")
    finally:
        os.close(fd)
    return True


def face_url(sock: socket.socket) -> str:
    """The face's own URL, http://HOST:PORT/mcp: --oauth-audience's default."""
    host, port = sock.getsockname()[:2]
    return f"http://{_hostport(host, port)}/mcp"


def _hostport(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class Refusals:
    """The face's log of refused requests, on stderr (module comment): `note` says the
    first at once and then at most one line every SAY_EVERY seconds, with the count of
    those it held back; `flush` says what is held (the face stopping)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.last: float | None = None          # when a line was said
        self.held: Counter[int] = Counter()     # status -> refusals not said since

    def note(self, status: int, why: str, peer: str) -> None:
        now = self.clock()
        if self.last is not None and now - self.last < SAY_EVERY:
            self.held[status] += 1
            return
        self.last = now
        shown = "".join(c if c.isprintable() else "?" for c in why)[:200]
        self._say(f"refused a request from {peer}: {status} {shown}", self._more())

    def flush(self) -> None:
        if self.held:
            self._say("", self._more())

    def _more(self) -> str:
        if not self.held:
            return ""
        n = sum(self.held.values())
        each = ", ".join(f"{k}: {v}" for k, v in sorted(self.held.items()))
        self.held.clear()
        return f"{n:,} more refused since the last line ({each})"

    @staticmethod
    def _say(line: str, more: str) -> None:
        said = "; ".join(x for x in (line, more) if x)
        print(f"toolsrv mcp: {said}", file=sys.stderr, flush=True)


class Gate:
    """ASGI middleware: Origin and Host as the module's comment says, then the token, then
    the connection's count (conns) and the body's size."""

    def __init__(self, app: Any, token: bytes | None, port: int, loopback: bool,
                 where: str = "its token file", conns: Conns | None = None,
                 oauth: Any = None, search: bool = False) -> None:
        self.app, self.port, self.loopback, self.where = app, port, loopback, where
        self.conns = conns or Conns()
        self.oauth, self.search = oauth, search      # oauth.py's OAuth, or None
        self.want = b"Bearer " + token if token else None
        # the static token's name in the audit trail: its hash's head, never the token
        self.token_id = ("bearer token sha256:" + hashlib.sha256(token).hexdigest()[:12]
                         if token else "")
        self.stopping = False
        self.waiting: set[Any] = set()     # the cancel scopes of receives waiting now
        self.refusals = Refusals()

    def stop(self) -> None:
        """The face is stopping: every open request hears that its client went away (an
        ASGI http.disconnect), so a listening stream or a response still streaming ends
        cleanly before uvicorn's grace runs out, instead of being cancelled with a
        traceback in the log."""
        self.stopping = True
        for scope in self.waiting:
            scope.cancel()
        self.refusals.flush()

    def _or_gone(self, receive: Any) -> Any:
        import anyio

        async def recv() -> dict[str, Any]:
            if not self.stopping:
                with anyio.CancelScope() as scope:
                    self.waiting.add(scope)
                    try:
                        return await receive()
                    finally:
                        self.waiting.discard(scope)
            return {"type": "http.disconnect"}
        return recv

    def ours(self, scope: dict[str, Any]) -> set[str]:
        """The host:port forms that name this face, as the request reached it."""
        here = (scope.get("server") or ("127.0.0.1", self.port))[0]
        names = {_hostport(here, self.port)}
        if self.loopback:
            names.add(f"localhost:{self.port}")
        return names

    def refusal(self, scope: dict[str, Any]) -> tuple[int, str] | None:
        """(status, why) when the request may not pass, else None."""
        headers = dict(scope.get("headers", []))
        ours = self.ours(scope)
        origin = headers.get(b"origin", b"").decode("latin-1")
        if origin and origin.lower() not in {f"http://{n}" for n in ours}:
            return 403, (f"forbidden: Origin {origin[:100]} is not this server's own "
                         f"(http://{min(ours)})")
        host = headers.get(b"host", b"").decode("latin-1").lower()
        if self.loopback and host not in ours:
            return 421, f"misdirected: Host {host[:100]!r} does not name this server " \
                        f"({min(ours)})"
        if self.want is not None:
            got = headers.get(b"authorization", b"")
            if not hmac.compare_digest(got, self.want):
                return 401, ("unauthorized: this toolsrv mcp wants the header "
                             "`Authorization: Bearer <token>`, the token being the text of "
                             f"{self.where}" if not got else "unauthorized: wrong bearer token")
        return None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def refuse(status: int, why: str, challenge: str = "") -> None:
            self.refusals.note(status, why, self.peer(scope))
            return await _refuse(send, status, why, challenge)
        no = self.refusal(scope)
        if no is not None:
            return await refuse(*no)
        who = None
        if self.oauth is not None:
            if scope.get("path") in self.oauth.paths:     # RFC 9728: no token needed
                return await _refuse(send, 200, "", body=self.oauth.metadata())
            try:
                who = await self._principal(scope)
            except Refused as e:
                return await refuse(e.status, e.why, e.challenge)
        busy = self.conns.passes(scope.get("client"))
        if busy:
            return await refuse(503, busy)
        scope = {**scope, PRINCIPAL: self.who(scope)}
        recv = self._or_gone(receive)
        said = dict(scope.get("headers", [])).get(b"content-length", b"0")
        body = await _read_body(recv) if said.isdigit() and int(said) <= MAX_BODY else None
        if body is None:
            return await refuse(413, f"request body too large: {MAX_BODY} bytes at "
                                 "most")
        if who is not None:
            no_scope = self.oauth.forbidden(who, b"".join(
                m.get("body", b"") for m in body if m["type"] == "http.request"), self.search)
            if no_scope is not None:
                return await refuse(403, no_scope.why, no_scope.challenge)
            scope = {**scope, **_authenticated(who)}
        await self.app(scope, _replay(body, recv), send)

    def who(self, scope: dict[str, Any]) -> str:
        """Who sent a request that passed, for the audit trail (the tree's record names it
        `on_behalf_of`): the token it showed (by its hash) and the peer the connection
        counts against (httpconns: `uid N` on loopback, else its address)."""
        peer = self.peer(scope)
        return f"{self.token_id} from {peer}" if self.token_id else peer

    def peer(self, scope: dict[str, Any]) -> str:
        """The peer a request's connection counts against (httpconns: `uid N` on
        loopback, else its address)."""
        client = scope.get("client")
        conn = self.conns.by_client.get((str(client[0]), int(client[1]))) if client else None
        return conn.peer if conn is not None else "unknown peer"

    async def _principal(self, scope: dict[str, Any]) -> Any:
        """The request's principal (oauth.py), its keys read again first when due (in a
        thread: a fetch never holds the loop)."""
        import anyio
        got = dict(scope.get("headers", [])).get(b"authorization", b"")
        try:
            return self.oauth.principal(got)
        except Stale:
            await anyio.to_thread.run_sync(self.oauth.keys.refresh)
        try:
            return self.oauth.principal(got)
        except Stale:
            raise Refused(401, "invalid token: the issuer's keys cannot be read now",
                          self.oauth.challenge("invalid_token", "the issuer's keys cannot "
                                               "be read now")) from None


def _authenticated(who: Any) -> dict[str, Any]:
    """What Starlette's AuthenticationMiddleware would put in the scope: the SDK binds an
    HTTP session to the principal that made it (another principal's request for it is
    404), and the handlers read it (server.py: principal)."""
    from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
    from mcp.server.auth.provider import AccessToken
    from starlette.authentication import AuthCredentials
    token = AccessToken(token="", client_id=who.client, scopes=sorted(who.scopes),
                        subject=who.sub, claims={"iss": who.issuer})
    user = AuthenticatedUser(token)
    user.principal = who  # type: ignore[attr-defined]  # ours: the handlers read it
    return {"user": user, "auth": AuthCredentials(sorted(who.scopes))}


async def _read_body(recv: Any) -> list[dict[str, Any]] | None:
    """The request's messages up to its last body part (or a disconnect), MAX_BODY bytes
    of body at most; None past that."""
    got, size = [], 0
    while True:
        m = await recv()
        got.append(m)
        if m["type"] != "http.request":
            return got
        size += len(m.get("body", b""))
        if size > MAX_BODY:
            return None
        if not m.get("more_body"):
            return got


def _replay(got: list[dict[str, Any]], recv: Any) -> Any:
    async def again() -> dict[str, Any]:
        return got.pop(0) if got else await recv()
    return again


async def _refuse(send: Any, status: int, why: str, challenge: str = "",
                  body: bytes | None = None) -> None:
    """Answer `why` with `status` and end the connection (a refused peer holds none);
    `challenge` is the WWW-Authenticate of a 401 or 403 (oauth.py), `body` one to send
    instead of the JSON-RPC error."""
    body = rpc_error(why) if body is None else body
    headers = [(b"content-type", b"application/json"),
               (b"content-length", str(len(body)).encode()), (b"connection", b"close")]
    if challenge or status == 401:
        headers.append((b"www-authenticate", (challenge or 'Bearer realm="toolsrv"'
                                              ).encode("latin-1")))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def bind(host: str, port: int) -> socket.socket:
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind((host, port))
        s.listen(BACKLOG)
    except OSError:
        s.close()
        raise
    return s


class Listen:
    """What serve_http needs: the bound socket, the token and the session bounds."""

    def __init__(self, sock: socket.socket, token: bytes | None, token_file: str | None,
                 made: bool = False, idle_timeout: float = 600, max_sessions: int = 32,
                 oauth: Any = None) -> None:
        self.sock, self.token, self.token_file, self.made = sock, token, token_file, made
        self.idle_timeout, self.max_sessions = idle_timeout, max_sessions
        self.oauth = oauth          # oauth.py's OAuth (--oauth-issuer), or None


async def serve_http(wiring: Wiring, listen: Listen) -> None:
    """Serve on the bound socket until uvicorn is told to stop (SIGINT, SIGTERM) or the
    task is cancelled."""
    import uvicorn
    from mcp.server.transport_security import TransportSecuritySettings
    sock, token = listen.sock, listen.token
    host, port = sock.getsockname()[:2]
    wiring.http = True
    app = wiring.server.streamable_http_app(
        streamable_http_path="/mcp", session_idle_timeout=listen.idle_timeout,
        max_sessions=listen.max_sessions,     # the gate checks Origin and Host instead
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False))
    if listen.made and token:
        print(f"toolsrv mcp: made the bearer token {token.decode()} in {listen.token_file} "
              "(mode 600): clients send `Authorization: Bearer <it>`",
              file=sys.stderr, flush=True)
    oauth = listen.oauth
    print(f"toolsrv mcp: streamable HTTP on http://{_hostport(host, port)}/mcp"
          + (f" (OAuth: access tokens of {oauth.issuer} for {oauth.audience}; metadata at "
             f"{oauth.metadata_url})" if oauth else
             f" (bearer token required: the text of {listen.token_file})" if token else
             " (--no-token: any local user can connect)"),
          file=sys.stderr, flush=True)
    conns = Conns(passed_room())
    gate = Gate(app, token, port, is_loopback(host), listen.token_file or "", conns,
                oauth, wiring.face.search)
    # (uvicorn hints timeout_graceful_shutdown as an int: a timeout, a float works)
    config = uvicorn.Config(gate, log_level="warning", lifespan="on", access_log=False,
                            timeout_graceful_shutdown=STOP_GRACE,  # type: ignore[arg-type]
                            http=guarded(conns), ws="none", h11_max_incomplete_event_size=MAX_HEAD,
                            backlog=ACCEPT_BATCH,
                            limit_concurrency=HELD_MAX + conns.passed_max + 1)
    server = _quiet_uvicorn(config)

    def stop() -> None:
        gate.stop()
        server.should_exit = True
    wiring.stop = stop
    try:
        await server.serve(sockets=[sock])
    finally:
        wiring.stop = None
        sock.close()


STOP_GRACE = 5.0     # seconds open requests and streams get once SIGTERM or SIGINT came


def _quiet_uvicorn(config: Any) -> Any:
    """A uvicorn server with no signal handling of its own.  Its own would race run.py's
    (cancelling it mid-shutdown printed the lifespan's CancelledError traceback) and
    re-raise the signal after its shutdown (SIGTERM then killed the process before the
    face's own cleanup).  run.py's handler sets should_exit instead (wiring.stop): the same
    graceful stop, then the face ends as it does over stdio, with exit status 0."""
    import uvicorn

    class Quiet(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Any:      # uvicorn >= 0.29 (the SDK needs 0.31.1)
            yield

        async def startup(self, sockets: Any = None) -> None:
            # asyncio listens with the backlog it accepts in one go (ACCEPT_BATCH, a
            # bound on fds in flight: httpconns.py); the kernel's queue stays BACKLOG
            await super().startup(sockets=sockets)
            for sock in sockets or ():
                sock.listen(BACKLOG)
    return Quiet(config)
