"""The `toolsrv` command: `serve`, and client verbs that mirror plan9port's 9p(1).

    toolsrv serve [-a ADDR]... [--tools PATH[:PATH]] [--state DIR] [-D]
    toolsrv ls [-l] | read | write | rdwr [DATA] | stat | mkdir | rm  [-a ADDR] PATH
        (a tls!HOST!PORT address: [--tls-ca FILE] [--tls-cert FILE --tls-key FILE])
    toolsrv call [--cwd DIR] SESSION AGENT TOOL JSON
    toolsrv search [-n LIMIT] WORDS...   (the tools that fit a need: tools/search)
    toolsrv block [TOOL|PRINCIPAL...]    toolsrv unblock TOOL|PRINCIPAL...   (the kill switch)
    toolsrv sandbox check [PROFILE]      toolsrv approve [--allow TOOL...]
    toolsrv mount [MOUNTPOINT]           toolsrv umount [MOUNTPOINT]
    toolsrv import-mcp [--prefix P] [--dir DIR] [--force] -- COMMAND [ARGS...]
    toolsrv mcp [-a ADDR] [--session ID] [--agent NAME] [--tools a,b]
                [--search [always|auto] [--search-budget BYTES]] [--pin a,b]
                [--http HOST:PORT [--listen-any] [--token-file FILE | --no-token]
                 [--idle-timeout S] [--max-sessions N]]   (doc/mcp.md)
    toolsrv mcp --config [claude|cursor|vscode]   (a client's configuration JSON)

Client verbs exit 1 with the server's error on stderr; `call`, and `rdwr` of a call
file, exit 2 before connecting when the args are not one complete JSON object.
"""
from __future__ import annotations

import gc
import logging
import os
import stat as statmod
import sys
from typing import TYPE_CHECKING, Any, NoReturn

from ..serve import dial
from .serveargs import (SERVE_OPTIONS, _serve_parser, parse_serve, serve_options,  # noqa: F401
                        size)

if TYPE_CHECKING:
    import argparse


def _addr_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("-a", "--addr", default=os.environ.get("TOOLSRV_ADDR"),
                   help="dial string (default unix!$NAMESPACE/toolsrv or $TOOLSRV_ADDR)")
    _tls_args(p)


def _tls_args(p: argparse.ArgumentParser) -> None:
    """A client's TLS options, for a tls!HOST!PORT address (serve/tls.py)."""
    p.add_argument("--tls-ca", metavar="FILE", help="trust the CA in this PEM file for a "
                   "tls! address (default $TOOLSRV_TLS_CA, else the system's store)")
    p.add_argument("--tls-cert", metavar="FILE", help="show this client certificate "
                   "(mutual TLS; default $TOOLSRV_TLS_CERT)")
    p.add_argument("--tls-key", metavar="FILE", help="the key of --tls-cert "
                   "(default $TOOLSRV_TLS_KEY)")


def client_tls(args: Any) -> Any:
    """The TLS a client verb dials a tls! address with: its flags, else the environment."""
    from ..serve.tls import ClientTLS
    return ClientTLS.from_env(ca=getattr(args, "tls_ca", None),
                              cert=getattr(args, "tls_cert", None),
                              key=getattr(args, "tls_key", None))


VERBS = ("serve", "ls", "read", "write", "rdwr", "stat", "mkdir", "rm", "call", "search",
         "block", "unblock",
         "sandbox", "approve", "mount", "umount", "import-mcp", "mcp")


def _docs_line() -> str:
    """The full parser's epilog: where the manual pages and the documentation are."""
    from ..dirs.bundled import docs
    d = docs()
    where = f"{d}/README.md, {d}/doc/" if d else "README.md and doc/ in the source"
    return f"manual: man toolsrv (the command), man 4 toolsrv (the files)\ndocumentation: {where}"


def build_parser(only: str | None = None,
                 cls: type[argparse.ArgumentParser] | None = None) -> argparse.ArgumentParser:
    """The command's parser; with `only`, the subcommand of that verb alone (see parse)."""
    import argparse
    ap = (cls or argparse.ArgumentParser)(prog="toolsrv",
                                          description="a 9P2000 server of tools for agents",
                                          epilog=_docs_line() if only is None else None,
                                          formatter_class=argparse.RawDescriptionHelpFormatter)
    from .. import __version__
    ap.add_argument("--version", action="version", version=f"toolsrv {__version__}")
    sub = ap.add_subparsers(dest="verb", required=True)
    if only in (None, "serve"):
        _serve_parser(sub.add_parser("serve", help="run the server"))
    for verb, helptext in [("ls", "list a directory"), ("read", "print a file"),
                           ("write", "copy stdin to a file"),
                           ("rdwr", "write DATA (or stdin), print what the same fid reads back"),
                           ("stat", "print a file's stat"), ("mkdir", "make a session or agent"),
                           ("rm", "remove a session or agent")]:
        if only not in (None, verb):
            continue
        c = sub.add_parser(verb, help=helptext)
        _addr_arg(c)
        if verb == "ls":
            c.add_argument("-l", dest="long", action="store_true")
        c.add_argument("path")
        if verb == "rdwr":
            c.add_argument("data", nargs="?")
    if only in (None, "call"):
        c = sub.add_parser("call", help="call a tool: creates the session and agent, "
                           "loads the tool; a session it creates works in the current "
                           "directory")
        _addr_arg(c)
        c.add_argument("--cwd", metavar="DIR", help="the session's working directory "
                       "(default, for a session this creates: the current directory)")
        for name in ("session", "agent", "tool", "json"):
            c.add_argument(name)
    if only in (None, "search"):
        c = sub.add_parser("search", help="the tools that fit a need, best first "
                           "(name, score, description)")
        _addr_arg(c)
        c.add_argument("-n", "--limit", type=int, metavar="N",
                       help="how many tools (default 10, at most 100)")
        c.add_argument("words", nargs="+", help="the need, in words")
    for verb, helptext in [("block", "block tools (names or globs) or principals (uid:N, "
                            "tls:SUBJECT, ...): their calls under way are killed, new ones "
                            "refused; with none, list the blocks"),
                           ("unblock", "lift blocks")]:
        if only in (None, verb):
            c = sub.add_parser(verb, help=helptext)
            _addr_arg(c)
            c.add_argument("words", nargs="*" if verb == "block" else "+",
                           metavar="TOOL|PRINCIPAL")
    if only in (None, "sandbox"):
        sb = sub.add_parser("sandbox", help="sandbox profiles",
                            description="check: print the Landlock ABI of this kernel, the "
                            "profile as resolved here (each path and its rights) and whether "
                            "it can be enforced; exit 0 enforceable, 1 refused, 2 no such "
                            "profile")
        sb.add_argument("action", choices=["check"], help="check: the one action")
        sb.add_argument("profile", nargs="?", default="default",
                        help="the profile's name (default: default)")
    if only in (None, "approve"):
        ap_ = sub.add_parser("approve", help="run the reference elevation broker")
        ap_.add_argument("rest", nargs="...")
    if only in (None, "mount"):
        m = sub.add_parser("mount", help="mount the running server with 9pfuse")
        _addr_arg(m)
        m.add_argument("mountpoint", nargs="?")
    if only in (None, "umount"):
        u = sub.add_parser("umount", help="unmount a 9pfuse mount")
        u.add_argument("mountpoint", nargs="?")
    if only is None:       # main() hands audit its own parser (audit.parser)
        sub.add_parser("audit", help="print the audit trail: every call, who made it and "
                       "what came of it (toolsrv audit -h)", add_help=False).add_argument(
                           "rest", nargs="...")
    if only is None:       # main() hands import-mcp its own parser (importmcp.parse)
        sub.add_parser("import-mcp", help="write one resident .meta per tool of an MCP "
                       "server, and the sandbox profile it needs (toolsrv import-mcp -h)",
                       add_help=False).add_argument("rest", nargs="...")
    if only in (None, "mcp"):
        _mcp_parser(sub.add_parser("mcp", help="serve the tools to MCP clients (stdio, or "
                                   "streamable HTTP); needs the mcp extra"))
    return ap


def _mcp_parser(m: argparse.ArgumentParser) -> None:
    m.add_argument("-a", "--addr", default=os.environ.get("TOOLSRV_ADDR"),
                   help="the toolsrv to use (default unix!$NAMESPACE/toolsrv or "
                   "$TOOLSRV_ADDR); when nothing answers there, one is served in process")
    _tls_args(m)
    m.add_argument("--session", metavar="ID", help="use this session, made when missing and "
                   "kept (default: one per MCP connection, named after the client and its "
                   "pid, removed when it ends)")
    m.add_argument("--agent", metavar="NAME", help="the agent (default: the client's name)")
    m.add_argument("--tools", metavar="A,B,...", help="list and call only these tools")
    m.add_argument("--search", nargs="?", const="always", choices=("always", "auto"),
                   help="list search_tools (over tools/search) and call_tool instead of "
                   "every tool, for large registries: always (the default), or auto: every "
                   "tool while their definitions fit --search-budget, the two past it")
    m.add_argument("--search-budget", metavar="BYTES", type=_budget, help="the bytes of "
                   "tool definitions (tools/list's JSON) --search auto lists in full "
                   "(default 70000: about 20,000 tokens, 10%% of a 200k-token context window)")
    m.add_argument("--pin", metavar="A,B,...", action="append", default=[],
                   help="list these tools beside search_tools and call_tool (repeatable)")
    m.add_argument("--cwd", metavar="DIR", help="the working directory of a session made "
                   "here (default: the current directory)")
    m.add_argument("--http", metavar="HOST:PORT", help="serve streamable HTTP at "
                   "http://HOST:PORT/mcp instead of stdio (loopback only unless "
                   "--listen-any)")
    m.add_argument("--listen-any", action="store_true", help="allow a non-loopback --http "
                   "address")
    m.add_argument("--token-file", metavar="FILE", help="HTTP clients must send "
                   "`Authorization: Bearer <its text>`; a mode-600 file of at least 16 bytes "
                   "(default: mcp-token in the state home, made on first start)")
    m.add_argument("--no-token", action="store_true", help="a loopback --http without a "
                   "token: any local user can connect")
    m.add_argument("--oauth-issuer", metavar="ISSUER", help="HTTP clients send OAuth "
                   "access tokens (JWTs) of this issuer instead of the static token")
    m.add_argument("--oauth-jwks", metavar="FILE|URL", help="the issuer's public keys (a "
                   "JWKS file, or an https URL; http to loopback only)")
    m.add_argument("--oauth-audience", metavar="URL", help="the audience tokens must name "
                   "(default: the face's own URL, http://HOST:PORT/mcp)")
    m.add_argument("--idle-timeout", metavar="SECONDS", type=float, default=600,
                   help="end an HTTP session with no request for this long (default 600)")
    m.add_argument("--max-sessions", metavar="N", type=int, default=32,
                   help="HTTP sessions open at once at most (default 32)")
    m.add_argument("--no-standalone", action="store_true", help="fail when nothing answers "
                   "at ADDR instead of serving in process")
    m.add_argument("--uvloop", action="store_true", help="run on uvloop (the fast "
                   "extra; also TOOLSRV_UVLOOP=1)")
    m.add_argument("--config", nargs="?", const="claude", choices=("claude", "cursor",
                   "vscode"), help="print the JSON for an MCP client's configuration that "
                   "starts this toolsrv mcp (absolute path, -a ADDR, the options given): "
                   "mcpServers for Claude Desktop and Cursor (the default), servers for "
                   "vscode; serves nothing")
    m.add_argument("-v", dest="verbose", action="store_true", help="log more")


def _budget(s: str) -> int:
    """--search-budget's BYTES: a whole number, 0 or more."""
    import argparse
    try:
        n = int(s)
    except ValueError:
        n = -1
    if n < 0:
        raise argparse.ArgumentTypeError(f"{s!r}: give the bytes, a whole number")
    return n


class _Retry(Exception):
    """The one-verb parser met an error: the full parser words it (see parse)."""


def _trial() -> type[argparse.ArgumentParser]:
    import argparse

    class _Trial(argparse.ArgumentParser):
        def error(self, message: str) -> NoReturn:
            raise _Retry
    return _Trial


def parse(argv: list[str]) -> Any:
    """argv parsed by a parser of its verb's subcommand alone, when that succeeds: building
    all thirteen costs about 10 ms (argparse looks up gettext translations for each piece),
    a tenth of the server's start-up.  On any error the full parser parses again, so every
    message (and the usage listing every verb) reads as it always has; --help prints the
    subcommand's own help, the same in both.  A `serve` whose words are all plainly its
    options is parsed without argparse (parse_serve)."""
    if argv[:1] == ["serve"]:
        args = parse_serve(argv[1:])
        if args is not None:
            return args
    if argv and argv[0] in VERBS:
        try:
            return build_parser(argv[0], _trial()).parse_args(argv)
        except _Retry:
            pass
    return build_parser().parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["approve"]:          # its own options: --allow TOOL..., -h
        from .approve import approve_main
        return approve_main(argv[1:])
    if argv[:1] == ["audit"]:            # reads a file: no server, no client
        from .audit import audit_main
        return audit_main(argv[1:])
    if argv[:1] == ["import-mcp"]:       # its own options, then -- COMMAND [ARGS...]
        from .importmcp import main as import_main
        return import_main(argv[1:])
    args = parse(argv)
    try:
        if args.verb == "serve":
            return serve(args)
        if args.verb == "sandbox":
            from .sandbox_check import sandbox_check_main
            return sandbox_check_main([args.profile])
        if args.verb == "approve":
            from .approve import approve_main
            return approve_main(args.rest)
        if args.verb in ("mount", "umount"):
            from .mount import mount_main
            return mount_main(args)
        if args.verb == "mcp":
            return mcp_verb(args)
        return client_verb(args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 1


def mcp_missing() -> str:
    from ..dirs.bundled import install_hint
    return ("toolsrv mcp: the MCP SDK is not installed (it is needed by this command only): "
            + install_hint("mcp"))


def mcp_verb(args: Any) -> int:
    """`toolsrv mcp`: the MCP face (toolsrv/mcp/); the SDK is imported there alone."""
    if args.search_budget is not None and args.search != "auto":
        print("toolsrv mcp: --search-budget is the budget of --search auto: give both",
              file=sys.stderr)
        return 2
    if getattr(args, "config", None):     # a client's configuration: needs no SDK
        from .mcpconfig import print_config
        return print_config(args)
    try:
        from ..mcp import server  # noqa: F401  (the SDK: missing, or a 1.x without mcp_types)
        from ..mcp.run import mcp_main
    except ImportError as e:
        print(f"{mcp_missing()} ({e})", file=sys.stderr)
        return 1
    return mcp_main(args)


def serve(args: Any) -> int:
    # No cyclic garbage collection while starting: what start-up allocates (modules,
    # classes, the registry) lives on, and the collector's passes over it took 3-5 ms
    # before the first request could be answered.  It resumes once started (below).
    gc.disable()
    if args.tls_cert or any(a.startswith("tls!") for a in args.addr) or \
            any("=tls!" in i for i in args.imports):
        import ssl  # noqa: F401  (serving TLS: asyncio imports it as usual)
    import_asyncio_without_ssl()
    import asyncio

    from ..app import App
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="toolsrv: %(message)s")
    opts = serve_options(args)

    async def run() -> int:
        app = App(opts)
        try:
            await app.start()
        except Exception as e:
            print(f"toolsrv: {e}", file=sys.stderr)
            return 1
        finally:
            # What start-up made lives as long as the server: moved out of the collector's
            # sight, a full collection walks what requests made, not the modules and the
            # registry as well (28,000 objects: 20 ms against 0.7 ms in bench_core's loop).
            gc.freeze()
            gc.enable()
        from .banner import banner
        print(banner(app), file=sys.stderr, flush=True)
        mounted = None
        if args.mount:
            from .mount import mount
            try:   # in a thread: 9pfuse needs this loop to answer while it mounts
                mounted = await asyncio.to_thread(mount, str(app.addrs[0]), args.mount)
            except RuntimeError as e:
                print(e, file=sys.stderr)
                await app.stop()
                return 1
        try:
            await app.run()
        finally:
            if mounted:
                from .mount import umount
                try:
                    umount(mounted)
                except RuntimeError as e:
                    print(e, file=sys.stderr)
        return 1 if app.stop_error else 0

    use_uvloop(args.uvloop or os.environ.get("TOOLSRV_UVLOOP", "") not in ("", "0"))
    try:
        return asyncio.run(run())
    finally:
        gc.enable()             # had start-up failed before run() could


def import_asyncio_without_ssl() -> None:
    """Import asyncio with its module-level `ssl` left None: the server serves no TLS, and
    `ssl` (OpenSSL's libraries loaded and linked) was 8-14 ms of the launch.  asyncio's
    modules import it as `try: import ssl / except ImportError: ssl = None`, and only a TLS
    transport (start_tls, an ssl= argument) reads the name, which then says "ssl module not
    available".  The None in sys.modules that makes that import fail is there only while
    asyncio imports: any later `import ssl` (uvloop, a library) works as usual.  Nothing is
    done when asyncio or ssl is imported already (doc/performance.md, Start-up)."""
    if "asyncio" in sys.modules or "ssl" in sys.modules:
        return
    sys.modules["ssl"] = None  # type: ignore[assignment]
    try:
        import asyncio  # noqa: F401
    finally:
        if "ssl" in sys.modules and sys.modules["ssl"] is None:
            del sys.modules["ssl"]


def use_uvloop(wanted: bool) -> None:
    """Install uvloop's event loop policy when wanted and installed (doc/performance.md)."""
    if not wanted:
        return
    import asyncio
    try:
        import uvloop
    except ImportError:
        from ..dirs.bundled import install_hint
        print(f"toolsrv: uvloop is not installed ({install_hint('fast')}): "
              "using asyncio's own loop", file=sys.stderr)
        return
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


def _fmt_mode(mode: int) -> str:
    kind = "d" if mode & 0x80000000 else "-"
    return kind + statmod.filemode(mode & 0o777)[1:]


def _check_args(args: Any) -> int | None:
    """Args that are not one JSON object stop here, before connecting: exit 2 (usage)."""
    from .shortcut import args_problem, is_call_path
    if args.verb == "search" and args.limit is not None and not 1 <= args.limit <= 100:
        print(f"toolsrv: search: -n {args.limit}: give 1 to 100 tools", file=sys.stderr)
        return 2
    if args.verb == "call":
        from ..registry.names import valid_name
        for what, name in (("session", args.session), ("agent", args.agent),
                           ("tool", args.tool)):
            if not valid_name(name):   # before anything is made: no session left behind
                print(f"toolsrv: call: {what} {name!r}: illegal name (letters, digits, '.', "
                      "'_' and '-'); nothing was called", file=sys.stderr)
                return 2
        text, what = args.json, args.tool
    elif args.verb == "rdwr" and is_call_path(args.path):
        if args.data is None:
            args.data = sys.stdin.buffer.read().decode("utf-8", "surrogateescape")
        text, what = args.data, args.path
    else:
        return None
    why = args_problem(text)
    if why is None:
        return None
    print(f"toolsrv: {what}: {why}; nothing was called", file=sys.stderr)
    return 2


def client_verb(args: Any) -> int:
    from .client import Client, ClientError
    bad = _check_args(args)
    if bad is not None:
        return bad
    try:
        c = Client.connect(args.addr, tls=client_tls(args))
    except (FileNotFoundError, ConnectionRefusedError) as e:    # nothing listens there
        where = args.addr or str(dial.default_addr())
        print(f"toolsrv: no toolsrv answers at {where} ({e.strerror or e}): start one with "
              f'"toolsrv serve" (or "make run" in the checkout)', file=sys.stderr)
        return 1
    except (OSError, ValueError, ClientError) as e:   # refused: uid, limit, secret
        where = args.addr or str(dial.default_addr())
        print(f"toolsrv: cannot connect to {where}: {e}", file=sys.stderr)
        return 1
    try:
        return _run_verb(c, args)
    except ClientError as e:
        what = args.path if hasattr(args, "path") else \
            "tools/search" if args.verb == "search" else \
            args.verb if args.verb in ("block", "unblock") else args.tool
        print(f"toolsrv: {what}: {e}", file=sys.stderr)
        return 1
    finally:
        c.close()


def _here() -> str | None:
    """The caller's current directory (None when it is gone)."""
    try:
        return os.getcwd()
    except OSError:
        return None


def _run_verb(c: Any, args: Any) -> int:
    out = sys.stdout.buffer
    v = args.verb
    if v == "read":
        out.write(c.read(args.path))
    elif v == "write":
        c.write(args.path, sys.stdin.buffer.read())
    elif v == "rdwr":
        data = args.data.encode("utf-8", "surrogateescape") if args.data is not None \
            else sys.stdin.buffer.read()
        from .shortcut import call_file, is_call_path
        out.write(call_file(c, args.path, data) if is_call_path(args.path) else
                  c.rdwr(args.path, data))
    elif v == "ls":
        for d in sorted(c.ls(args.path), key=lambda d: d.name):
            if args.long:
                out.write(f"{_fmt_mode(d.mode)} {d.uid} {d.length:8d} {d.name}\n".encode())
            else:
                out.write((d.name + ("/" if d.mode & 0x80000000 else "") + "\n").encode())
    elif v == "stat":
        d = c.stat(args.path)
        out.write((f"{d.name} {_fmt_mode(d.mode)} length {d.length} qid "
                   f"({d.qid.path:016x} {d.qid.vers} {d.qid.type:02x}) "
                   f"uid {d.uid} mtime {d.mtime}\n").encode())
    elif v == "mkdir":
        c.mkdir(args.path)
    elif v == "rm":
        c.rm(args.path)
    elif v == "search":
        head = f"limit {args.limit}\n" if args.limit is not None else ""
        out.write(c.rdwr("tools/search", (head + " ".join(args.words) + "\n").encode()))
    elif v in ("block", "unblock"):      # the root's block file (tree/policy/files.py)
        if args.words:
            c.rdwr("block", f"{v} {' '.join(args.words)}\n".encode())
        out.write(c.read("block"))
    elif v == "call":
        from .shortcut import call
        out.write(call(c, args.session, args.agent, args.tool, args.json,
                       cwd=os.path.abspath(args.cwd) if args.cwd is not None else None,
                       here=_here()))
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
