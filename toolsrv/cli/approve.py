# toolsrv/cli/approve.py — `toolsrv approve`: the reference approval broker.
#
# Theory of operation.  The broker is the other end of run/elevation.py's question: it
# serves a Unix stream socket, reads one JSON line per connection (the request the server
# sends before an elevated call leaves the sandbox) and answers one JSON line
# {"approve": bool, "reason": str}.  With --allow it approves exactly the listed tools and
# refuses the rest without asking; without it, it prints each request and asks y/N on the
# terminal, one at a time.  SIGTERM, SIGHUP and SIGINT stop it, and it removes its socket
# and token (if still its own) on the way out, a question left unanswered included.  It
# runs as a command of its own, never in the server: the server imports only
# run/elevation.py.
#
# Only the server asks (issue 44.4).  At its start the broker writes a fresh random token
# to <socket>.token (0600, beside the 0600 socket, in a directory no one else may write);
# the server reads it there and sends it with every request.  A connection whose peer
# (SO_PEERCRED) is neither the broker's uid nor root, or whose request does not carry the
# token, is refused at once, without a question on the terminal and without waiting for
# one: a sandboxed tool that reaches the socket can neither put a request in front of the
# operator nor hold up real ones.  The prompt names the asking process (pid, uid).
from __future__ import annotations

import asyncio
import hmac
import json
import os
import pwd
import secrets
import signal
import sys
import threading
from collections.abc import Awaitable, Callable

from ..run.elevation import MAX_LINE, peer_creds, token_path, trusted_uid

Ask = Callable[[dict], Awaitable[bool]]


def decide_allowed(request: dict, allow: frozenset[str]) -> tuple[bool, str]:
    """The --allow policy: exactly the listed tools, without asking."""
    tool = request.get("tool")
    if isinstance(tool, str) and tool in allow:
        return True, f"{tool} is in the broker's allow list"
    return False, f"{tool} is not in the broker's allow list"


READ_LIMIT = 10.0     # seconds a connection has to send its request line


def _who(uid: int) -> str:
    try:
        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except KeyError:
        return f"uid {uid}"


def format_request(request: dict) -> str:
    """The human-readable form the broker prints before asking."""
    args = json.dumps(request.get("args"), indent=2, sort_keys=True, default=str)
    peer = request.get("peer")
    frm = f" from pid {peer[0]}, {_who(peer[1])}" if isinstance(peer, (list, tuple)) else ""
    where = request.get("confirm")
    what = ("elevation request" if not where else
            f"confirmation request (the tool's .meta confirm, for {request.get('principal')})"
            if where == "confirm" else         # tree/policy/consent.py's META_WHERE
            f"confirmation request ({where} of policy.yaml, for {request.get('principal')})")
    text = (f"{what}{frm}: tool {request.get('tool')} "
            f"(session {request.get('session')}, agent {request.get('agent')})\n"
            f"  cwd: {request.get('cwd')}\n  args: {args.replace(chr(10), chr(10) + '  ')}")
    if request.get("reach"):
        text += f"\n  if approved: {request['reach']}"
    return text


class Broker:
    """The reference approval broker; serve() listens on a Unix socket."""

    def __init__(self, allow: frozenset[str] | None = None, ask: Ask | None = None) -> None:
        self.allow = allow
        self.ask = ask or ask_terminal
        self._one_at_a_time = asyncio.Lock()
        self.token = secrets.token_hex(32)     # written beside the socket by serve()

    async def decide(self, request: dict) -> tuple[bool, str]:
        if self.allow is not None:
            return decide_allowed(request, self.allow)
        async with self._one_at_a_time:
            yes = await self.ask(request)
        return (True, "approved by the operator") if yes else (False, "refused by the operator")

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            peer = peer_creds(writer.get_extra_info("socket"))
            if not trusted_uid(peer[1]):     # not even read: no one else's words reach us
                ok, reason = False, (f"{_who(peer[1])} may not ask this broker (permission "
                                     "denied): only the toolsrv server asks")
            else:
                ok, reason = await self._request(reader, peer)
            writer.write(json.dumps({"approve": ok, "reason": reason}).encode() + b"\n")
            await writer.drain()
        except (OSError, asyncio.IncompleteReadError, TimeoutError):
            pass
        finally:
            writer.close()

    async def _request(self, reader: asyncio.StreamReader, peer: tuple[int, int]
                       ) -> tuple[bool, str]:
        """The answer to one request of a peer of a trusted uid: refused at once unless
        it carries the token, else decided."""
        line = await asyncio.wait_for(reader.readline(), READ_LIMIT)
        try:
            request = json.loads(line)
            if not isinstance(request, dict):
                raise ValueError("not an object")
        except ValueError as e:
            return False, f"malformed request: {e}"
        token = request.pop("token", None)
        if not isinstance(token, str) or not hmac.compare_digest(token.encode(),
                                                                  self.token.encode()):
            print(f"refused a request from pid {peer[0]}, {_who(peer[1])}: it does not carry "
                  "the server's token", file=sys.stderr, flush=True)
            return False, ("the request does not carry the broker's token (permission "
                           "denied): only the toolsrv server asks")
        request["peer"] = list(peer)
        return await self.decide(request)

    async def serve(self, path: str) -> asyncio.AbstractServer:
        """Write the token to <path>.token (0600), then listen on path (mode 0600), each
        replacing a stale one."""
        old = os.umask(0o177)
        try:
            for name in (token_path(path), path):
                try:
                    os.unlink(name)
                except FileNotFoundError:
                    pass
            fd = os.open(token_path(path), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                         | os.O_CLOEXEC, 0o600)
            try:
                os.write(fd, self.token.encode() + b"\n")
            finally:
                os.close(fd)
            return await asyncio.start_unix_server(self.handle, path, limit=MAX_LINE)
        finally:
            os.umask(old)


async def ask_terminal(request: dict) -> bool:
    """Print the request and read y/N from the terminal, in a daemon thread (input()
    blocks, and a broker stopped while it waits must not wait for it to return)."""
    print(format_request(request), flush=True)
    loop = asyncio.get_running_loop()
    answered: asyncio.Future[str] = loop.create_future()

    def give(answer: str) -> None:
        if not answered.done():
            answered.set_result(answer)

    def read() -> None:     # os.read, not input(): no lock of sys.stdin held at exit
        print("approve? [y/N] ", end="", flush=True)
        line = b""
        try:
            while not line.endswith(b"\n"):
                c = os.read(sys.stdin.fileno(), 1)
                if not c:
                    break
                line += c
        except (OSError, ValueError):
            pass
        answer = line.decode(errors="replace")
        try:
            loop.call_soon_threadsafe(give, answer)
        except RuntimeError:      # the broker stopped meanwhile
            pass
    threading.Thread(target=read, name="approve-prompt", daemon=True).start()
    answer = await answered
    return answer.strip().lower() in ("y", "yes")


def default_socket_path() -> str:
    """Where serve asks by default (run/elevation.py's broker_socket: $OLLIE_BYPASS_SOCKET,
    else $OLLIE_ELEVATE_SOCKET, else $NAMESPACE/approve.sock); ValueError when the two
    variables disagree."""
    from ..run.elevation import broker_socket
    from ..serve.dial import namespace
    return broker_socket(os.environ, namespace())


def approve_main(argv: list[str]) -> int:
    """`toolsrv approve [--allow TOOL …] [--socket PATH]`: run the reference broker."""
    import argparse    # here: the server imports this module, and argparse costs its launch
    p = argparse.ArgumentParser(prog="toolsrv approve",
                                description="approve or refuse elevated tool calls")
    p.add_argument("--allow", nargs="+", metavar="TOOL", action="extend",
                   help="approve these tools without asking; refuse all others")
    p.add_argument("--socket", default=None, help="socket path (default: $OLLIE_BYPASS_SOCKET, "
                   "else $OLLIE_ELEVATE_SOCKET, else $NAMESPACE/approve.sock, where serve "
                   "asks)")
    opts = p.parse_args(argv)
    try:
        path = opts.socket or default_socket_path()
    except ValueError as e:
        print(f"toolsrv approve: {e}", file=sys.stderr)
        return 1
    from ..dirs.trusted import Untrusted, open_dir
    try:    # whoever can change the socket's directory could answer in the broker's place
        open_dir(os.path.dirname(os.path.abspath(path)), 0o700,     # made 0700 if missing;
                 "give --socket in a directory of your own that no one else may write",
                 fix_mode=False).close()                              # a user's is left as is
    except Untrusted as e:
        print(f"toolsrv approve: {e}", file=sys.stderr)
        return 1
    broker = Broker(frozenset(opts.allow) if opts.allow else None)

    ours: dict[str, tuple[int, int]] = {}   # the socket we made: its inode and ctime

    async def main() -> None:
        server = await broker.serve(path)
        st = os.stat(path)
        ours[path] = (st.st_ino, st.st_ctime_ns)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        print(f"approval broker listening; start the server with OLLIE_BYPASS_SOCKET={path}",
              file=sys.stderr, flush=True)
        await stop.wait()
        _remove_ours(ours, broker.token)   # first: nothing below may keep them there
        server.close()                 # not wait_closed: a question may be pending

    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        return 0
    finally:
        _remove_ours(ours, broker.token)
    return 0


def _remove_ours(ours: dict[str, tuple[int, int]], token: str) -> None:
    """Unlink the socket and the token if still the ones we made (not a later broker's:
    the socket by inode and ctime, the token by what it holds)."""
    for path, (ino, ctime) in ours.items():
        try:
            st = os.stat(path)
            if (st.st_ino, st.st_ctime_ns) == (ino, ctime):
                os.unlink(path)
        except OSError:
            pass
        try:
            with open(token_path(path), "rb") as f:
                if f.read(4096).strip() == token.encode():
                    os.unlink(token_path(path))
        except OSError:
            pass
