"""The MCP face as the approval broker of its own calls (issue 48.2).

Theory of operation.  A call the tree will not run without a person's yes (a `.meta`'s
`confirm`, policy.yaml's `confirm`, an elevated call: tree/policy/consent.py) makes the
tree ask an approval broker, by run/elevation.py's protocol.  The face is that broker
for the calls it writes: at start it makes a private directory (0700, in
$XDG_RUNTIME_DIR, else the temporary directory), a Unix socket in it (0600) and the
socket's token beside it (`<socket>.token`, 0600, 32 random bytes as hex), and writes
`broker <socket>` to the tree's /consent on its own 9P connection, again after each
redial.  The tree then asks it about every call written on that connection, and proves it
as it proves any broker: the directory ours, the token readable only by us, the peer of
our uid or root.

A question is answered only for a tools/call of this face that is waiting on it
(`waiting`): the same session and agent (its seat), tool, and arguments (`_meta` and
`elevated`, which the tree takes out of them, aside).  Its answer is what the waiter's
`ask` returns, which asks the MCP client's user (ask.py).  A question nobody here waits
for (a call run as a task: tasks/ holds no waiter) is a no, and so is one that two
waiting calls fit alike (the same agent, shared with --agent, calling the same tool with
the same args at once): which user should answer cannot be told, and no one's yes may
stand for another's.

Who may ask.  A connection whose peer (SO_PEERCRED) is neither our uid nor root, or
whose request does not carry the token (compared in constant time), is answered no at
once: a process that reaches the socket cannot put a question in front of the user.
A run of the face's own calls, elevated or not, never gets the token (it is outside
every profile's grants), and its nested calls are written on its own connection, which
the tree asks of the server's broker (`toolsrv approve`), never of this one.
"""
from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import os
import secrets
import shutil
import tempfile
from typing import Any, Awaitable, Callable, Iterator

from ...run.elevation import MAX_LINE, peer_creds, token_path, trusted_uid

log = logging.getLogger("toolsrv.mcp")

READ_LIMIT = 10.0       # seconds the tree has to send its question once connected
Ask = Callable[[dict], Awaitable[tuple[bool, str]]]


def plain(args: Any) -> Any:
    """The args as the tree judges them: without `_meta` and `elevated`, which it takes
    out (tree/calls/jsonargs.py)."""
    if not isinstance(args, dict):
        return args
    return {k: v for k, v in args.items() if k not in ("_meta", "elevated")}


class Waiter:
    """A tools/call of the face that may be asked about: its seat, tool and args, and
    how its user is asked."""

    def __init__(self, seat: Any, tool: str, args: Any, ask: Ask) -> None:
        self.seat, self.tool, self.args, self.ask = seat, tool, plain(args), ask
        self.asked: list[dict] = []     # the questions it was asked (ask.py reads them)

    def fits(self, req: dict) -> bool:
        return (req.get("session"), req.get("agent"), req.get("tool")) == \
            (self.seat.session, self.seat.agent, self.tool) and \
            plain(req.get("args")) == self.args


class Broker:
    """The face's broker (the module's comment): `start`, `register` on each 9P
    connection, `waiting` around each tools/call, `close`."""

    def __init__(self) -> None:
        self.dir = ""
        self.path = ""
        self.token = secrets.token_hex(32)
        self.server: asyncio.AbstractServer | None = None
        self.waiters: list[Waiter] = []

    async def start(self) -> "Broker":
        base = os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir()
        if not os.path.isdir(base):
            base = tempfile.gettempdir()
        self.dir = tempfile.mkdtemp(prefix="toolsrv-mcp-consent.", dir=base)   # 0700
        self.path = os.path.join(self.dir, "approve.sock")
        fd = os.open(token_path(self.path), os.O_WRONLY | os.O_CREAT | os.O_EXCL
                     | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, self.token.encode() + b"\n")
        finally:
            os.close(fd)
        old = os.umask(0o177)
        try:
            self.server = await asyncio.start_unix_server(self._serve, self.path,
                                                          limit=MAX_LINE)
        finally:
            os.umask(old)
        return self

    async def register(self, nine: Any) -> str | None:
        """Name this broker on the tree's /consent through `nine` (the face's own
        connection); None, or why not (an older server, a refusal: its calls are then
        asked of the server's broker)."""
        try:
            await nine.write("consent", f"broker {self.path}".encode())
        except Exception as e:          # NinePError, a hang-up: said by the caller
            return str(e)
        return None

    @contextlib.contextmanager
    def waiting(self, seat: Any, tool: str, args: Any, ask: Ask) -> Iterator[Waiter]:
        """A tools/call in flight that may be asked about (the module's comment)."""
        w = Waiter(seat, tool, args, ask)
        self.waiters.append(w)
        try:
            yield w
        finally:
            self.waiters.remove(w)

    async def decide(self, req: dict) -> tuple[bool, str]:
        """The answer to one question of the tree."""
        fit = [w for w in self.waiters if w.fits(req)]
        if len(fit) > 1:            # alike calls of one agent (a shared --agent): whose?
            return False, (f"{len(fit)} alike calls of {req.get('tool')} wait on this "
                           "face: it cannot tell whose user to ask; call it again")
        if not fit:
            return False, (f"no MCP request of this face waits for this call of "
                           f"{req.get('tool')}: nobody was asked")
        fit[0].asked.append(req)
        return await fit[0].ask(req)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
                     ) -> None:
        try:
            pid, uid = peer_creds(writer.get_extra_info("socket"))
            if not trusted_uid(uid):
                log.warning("consent: refused a question from pid %d, uid %d: not ours",
                            pid, uid)
                return
            line = await asyncio.wait_for(reader.readline(), READ_LIMIT)
            try:
                req = json.loads(line)
            except ValueError:
                return
            if not isinstance(req, dict) or not isinstance(req.get("token"), str) or \
                    not hmac.compare_digest(req.pop("token").encode(), self.token.encode()):
                log.warning("consent: refused a question from pid %d: it does not carry "
                            "the token", pid)
                ok, why = False, "the question does not carry this broker's token"
            else:
                ok, why = await self.decide(req)
            writer.write(json.dumps({"approve": ok is True, "reason": why}).encode() + b"\n")
            await writer.drain()
        except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError) as e:
            log.debug("consent: %s", e)
        finally:
            writer.close()

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
            self.server = None
        if self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)
