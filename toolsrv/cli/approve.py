# toolsrv/cli/approve.py — `toolsrv approve`: the reference approval broker.
#
# Theory of operation.  The broker is the other end of run/elevation.py's question: it
# serves a Unix stream socket, reads one JSON line per connection (the request the server
# sends before an elevated call leaves the sandbox) and answers one JSON line
# {"approve": bool, "reason": str}.  With --allow it approves exactly the listed tools and
# refuses the rest without asking; without it, it prints each request and asks y/N on the
# terminal, one at a time.  SIGTERM, SIGHUP and SIGINT stop it, and it removes its socket
# (if still its own) on the way out, a question left unanswered included.  It runs as a
# command of its own, never in the server: the server imports only run/elevation.py.
from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import threading
from collections.abc import Awaitable, Callable

from ..run.elevation import MAX_LINE

Ask = Callable[[dict], Awaitable[bool]]


def decide_allowed(request: dict, allow: frozenset[str]) -> tuple[bool, str]:
    """The --allow policy: exactly the listed tools, without asking."""
    tool = request.get("tool")
    if isinstance(tool, str) and tool in allow:
        return True, f"{tool} is in the broker's allow list"
    return False, f"{tool} is not in the broker's allow list"


def format_request(request: dict) -> str:
    """The human-readable form the broker prints before asking."""
    args = json.dumps(request.get("args"), indent=2, sort_keys=True, default=str)
    return (f"elevation request: tool {request.get('tool')} "
            f"(session {request.get('session')}, agent {request.get('agent')})\n"
            f"  cwd: {request.get('cwd')}\n  args: {args.replace(chr(10), chr(10) + '  ')}")


class Broker:
    """The reference approval broker; serve() listens on a Unix socket."""

    def __init__(self, allow: frozenset[str] | None = None, ask: Ask | None = None) -> None:
        self.allow = allow
        self.ask = ask or ask_terminal
        self._one_at_a_time = asyncio.Lock()

    async def decide(self, request: dict) -> tuple[bool, str]:
        if self.allow is not None:
            return decide_allowed(request, self.allow)
        async with self._one_at_a_time:
            yes = await self.ask(request)
        return (True, "approved by the operator") if yes else (False, "refused by the operator")

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            line = await reader.readline()
            try:
                request = json.loads(line)
                if not isinstance(request, dict):
                    raise ValueError("not an object")
                ok, reason = await self.decide(request)
            except ValueError as e:
                ok, reason = False, f"malformed request: {e}"
            writer.write(json.dumps({"approve": ok, "reason": reason}).encode() + b"\n")
            await writer.drain()
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def serve(self, path: str) -> asyncio.AbstractServer:
        """Listen on path (replacing a stale socket), mode 0600."""
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        old = os.umask(0o177)
        try:
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

    ours: list[int] = []                  # the inode of the socket we made

    async def main() -> None:
        server = await broker.serve(path)
        ours.append(os.stat(path).st_ino)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        print(f"approval broker listening; start the server with OLLIE_BYPASS_SOCKET={path}",
              file=sys.stderr, flush=True)
        await stop.wait()
        _remove_socket(path, ours)     # first: nothing below may keep it there
        server.close()                 # not wait_closed: a question may be pending

    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        return 0
    finally:
        _remove_socket(path, ours)
    return 0


def _remove_socket(path: str, ours: list[int]) -> None:
    """Unlink path if it is still the socket we made (not one a later broker put there)."""
    try:
        if ours and os.stat(path).st_ino == ours[0]:
            os.unlink(path)
    except OSError:
        pass
