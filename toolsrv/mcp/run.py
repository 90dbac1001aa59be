"""`toolsrv mcp`'s process: find (or start) the 9P server, then serve MCP until the end.

Theory of operation.  The face dials ADDR (default unix!$NAMESPACE/toolsrv).  When
nothing answers there (no socket file, or nobody listening on it), it serves the default
registry itself: an App (app.py) with `serve`'s defaults, but no state kept (so any
number of standalone faces run side by side), started in this process on a Unix socket
in a private temporary directory, which the face then dials like any other: one code
path, the tree's files, whichever server it is.  Any other failure to connect (a uid
refused, a bad secret) is an error, not a reason to serve alone.

Order: the dial or the local server first (a failure is a message on stderr and exit
1, before any MCP is spoken; the local server's launcher has its own stdin and stdout,
/dev/null), then the SDK's stdio_server over our stdio.py's wire (fd 0 and 1 pointed away
from the pipes while it serves, the pipes read and written by the loop, not by threads; a steady connection's plain
tools/call answered beside the SDK by fast.py), then the watcher (revwait) beside the
SDK's serving loop.  When the client closes stdin, or on SIGTERM/SIGINT, the loop ends, each
connection's teardown removes its seat, and the local server, if any, stops.
"""
from __future__ import annotations

import logging
import os
import shutil
import signal
import sys
import tempfile
from typing import Any

import anyio

from ..serve import dial
from .face import Face
from .search.mode import mode_of
from .ninep import NineP, NinePError, nothing_answers


class Local:
    """A toolsrv served in this process for the face alone (standalone mode)."""

    def __init__(self) -> None:
        self.tmp = tempfile.mkdtemp(prefix="toolsrv-mcp.")
        self.addr = f"unix!{self.tmp}/toolsrv"
        self.app: Any = None

    async def start(self) -> "Local":
        from ..app import App, Options
        self.app = App(Options(addrs=[self.addr], persist=False))
        try:
            await self.app.start()
        except BaseException:
            shutil.rmtree(self.tmp, ignore_errors=True)
            raise
        return self

    async def stop(self) -> None:
        try:
            await self.app.stop()
        finally:
            shutil.rmtree(self.tmp, ignore_errors=True)


def mcp_main(args: Any) -> int:
    """Run `toolsrv mcp` with parsed arguments; the exit status."""
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING,
                        format="toolsrv: %(message)s", stream=sys.stderr)
    http = None
    if args.http:
        from .http import BadListen, Listen, bind, check_listen, parse_hostport
        try:
            host, port = parse_hostport(args.http)
            if not args.idle_timeout > 0 or not args.max_sessions > 0:
                raise BadListen("--idle-timeout and --max-sessions must be more than 0")
            if bool(args.oauth_issuer) != bool(args.oauth_jwks):
                raise BadListen("--oauth-issuer and --oauth-jwks go together")
            token, token_file, made = check_listen(host, args.listen_any, args.token_file,
                                                   args.no_token, bool(args.oauth_issuer))
        except (BadListen, OSError, ValueError) as e:
            print(f"toolsrv mcp: {e}", file=sys.stderr)
            return 2
        try:
            http = Listen(bind(host, port), token, token_file, made, args.idle_timeout,
                          args.max_sessions)
        except OSError as e:
            print(f"toolsrv mcp: cannot listen on {args.http}: {e}", file=sys.stderr)
            return 1
        if args.oauth_issuer:
            http.oauth = _oauth(args, http.sock)
            if http.oauth is None:
                http.sock.close()
                return 2
    elif args.listen_any or args.token_file or args.no_token:
        print("toolsrv mcp: --listen-any, --token-file and --no-token go with --http",
              file=sys.stderr)
        return 2
    elif args.oauth_issuer or args.oauth_jwks or args.oauth_audience:
        print("toolsrv mcp: --oauth-issuer, --oauth-jwks and --oauth-audience go with "
              "--http", file=sys.stderr)
        return 2
    options = {}
    if getattr(args, "uvloop", False) or os.environ.get("TOOLSRV_UVLOOP", "") not in ("", "0"):
        try:
            import uvloop  # noqa: F401
            options["use_uvloop"] = True
        except ImportError:
            from ..dirs.bundled import install_hint
            print(f"toolsrv mcp: uvloop is not installed ({install_hint('fast')}): "
                  "using asyncio's own loop", file=sys.stderr)
    try:
        return anyio.run(_main, args, http, backend_options=options)
    except KeyboardInterrupt:
        return 130


def _oauth(args: Any, sock: Any) -> Any:
    """oauth.py's OAuth of --oauth-issuer, --oauth-jwks (its keys read now) and
    --oauth-audience (default the face's own URL); None when it cannot be (said)."""
    import ipaddress
    from .http import face_url
    from .oauth import OAuth, BadOAuth
    try:
        if not args.oauth_audience and ipaddress.ip_address(
                sock.getsockname()[0]).is_unspecified:
            raise BadOAuth(f"--oauth-audience: give the URL clients reach this face at (it "
                           f"listens on {sock.getsockname()[0]}, which names no host)")
        oauth = OAuth(args.oauth_issuer, args.oauth_jwks,
                      args.oauth_audience or face_url(sock))
        oauth.keys.load()
    except BadOAuth as e:
        print(f"toolsrv mcp: {e}", file=sys.stderr)
        return None
    return oauth


async def _main(args: Any, http: Any) -> int:
    try:
        nine, addr, local = await _connect(args)
    except (OSError, NinePError, ValueError) as e:
        where = args.addr or str(dial.default_addr())
        print(f"toolsrv mcp: cannot connect to {where}: {e}", file=sys.stderr)
        return 1
    except Exception as e:                       # the local server did not start
        print(f"toolsrv mcp: cannot serve in process: {e}", file=sys.stderr)
        return 1
    if http is not None:
        return await _serve(args, (nine, addr, local), None, http)
    from mcp.server.stdio import stdio_server
    from .stdio import wire
    async with wire() as ours:           # the loop's own pipes, where it can watch them
        mine: dict[str, Any] = {"stdin": ours[0], "stdout": ours[1]} if ours else {}
        # a signal ends the transport's stdin reader too: its task group would otherwise
        # wait for a line, or end of file, that a client keeping stdin open never sends
        with anyio.CancelScope() as reading:
            async with stdio_server(**mine) as streams:
                return await _serve(args, (nine, addr, local), streams, None, ours,
                                    reading)
    return 0                             # stopped by a signal


def _tls(args: Any) -> Any:
    """The TLS of a tls! address: --tls-ca/--tls-cert/--tls-key, else $TOOLSRV_TLS_*."""
    from ..serve.tls import ClientTLS
    return ClientTLS.from_env(ca=getattr(args, "tls_ca", None),
                              cert=getattr(args, "tls_cert", None),
                              key=getattr(args, "tls_key", None))


async def _connect(args: Any) -> tuple[NineP, str, Local | None]:
    """The 9P connection: to ADDR, or to a server started here when nothing answers."""
    addr = args.addr or str(dial.default_addr())
    try:
        return await NineP.connect(addr, tls=_tls(args)), addr, None
    except OSError as e:
        if not nothing_answers(e) or args.no_standalone:
            raise
        why = e
    local = await Local().start()
    print(f"toolsrv mcp: standalone: nothing answers at {addr} ({why.strerror or why}): "
          "serving the default registry in this process, keeping no state (start "
          "\"toolsrv serve\", or give its address with -a)", file=sys.stderr, flush=True)
    try:
        return await NineP.connect(local.addr), local.addr, local
    except BaseException:
        await local.stop()
        raise


async def _unknown_tools(nine: NineP, names: list[str]) -> None:
    """Warn on stderr of each --tools name the registry has no tool of (yet)."""
    from .tools import closest
    try:
        index = (await nine.read("tools/index")).decode(errors="replace")
    except NinePError:
        return
    have = [line.split("\t", 1)[0] for line in index.splitlines() if line.strip()]
    for name in names:
        if name not in have:
            print(f"toolsrv mcp: --tools {name}: no such tool in the registry (not listed "
                  f"until one appears); {closest(name, have).split(' (search_tools')[0]}",
                  file=sys.stderr, flush=True)


async def _serve(args: Any, got: tuple[NineP, str, Local | None], streams: Any,
                 http: Any, lines: Any = None, reading: Any = None) -> int:
    from .consent.broker import Broker
    from .server import Wiring
    nine, addr, local = got
    broker = await Broker().start()     # the face asks its users for the tree (consent/)
    why = await broker.register(nine)
    if why is not None:
        print(f"toolsrv mcp: consent: {addr} did not take this face as the broker of its "
              f"calls ({why}): a call that needs a yes is asked of the server's approval "
              "broker instead", file=sys.stderr, flush=True)

    async def redial() -> NineP:
        again = await NineP.connect(addr, tls=_tls(args) if local is None else None)
        await broker.register(again)        # a new connection: named again
        return again
    face = Face(redial, only=_names(args.tools), search=mode_of(args), session=args.session,
                agent=args.agent, cwd=os.path.abspath(args.cwd) if args.cwd else None,
                where=addr)
    face.nine = nine
    if face.only:                       # a name --tools gives that no tool has: said once
        await _unknown_tools(nine, sorted(face.only))
    if local is not None:               # said in initialize's instructions too (server.py)
        face.standalone = args.addr or str(dial.default_addr())
    wiring = Wiring(face, pid=str(os.getppid()) if http is None else None)
    wiring.consent = broker
    fast = None
    if lines is not None:               # our stdio wire: the steady-state calls (fast.py)
        from .fast import Calls
        fast = wiring.fast = Calls(wiring, lines[1])
        lines[0].tap = fast.take
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(face.watch, wiring.changed)
            tg.start_soon(_stop_on_signal, reading or tg.cancel_scope, wiring)
            if http is not None:
                from .http import serve_http
                await serve_http(wiring, http)
            else:
                read, write = streams
                await wiring.server.run(read, write, wiring.init_options())
            tg.cancel_scope.cancel()
    finally:
        with anyio.move_on_after(10, shield=True):
            if fast is not None:
                lines[0].tap = None
                await fast.close()
            await face.close()
            await broker.close()
            if local is not None:
                await local.stop()
    return 0


async def _stop_on_signal(scope: anyio.CancelScope, wiring: Any) -> None:
    """SIGTERM or SIGINT ends the face.  Over HTTP the first asks uvicorn to stop
    (wiring.stop: open requests and streams get http.STOP_GRACE seconds), a second one
    cancels `scope`; over stdio the first cancels it: the scope around the face and its
    transport's stdin reader (_main's `reading`)."""
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for _ in signals:
            stop, wiring.stop = wiring.stop, None
            if stop is None:
                scope.cancel()
                return
            stop()


def _names(tools: str | None) -> list[str] | None:
    if not tools:
        return None
    return [t.strip() for t in tools.split(",") if t.strip()]
