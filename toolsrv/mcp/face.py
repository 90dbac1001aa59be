"""The MCP face's side of the tree: what `tools/list` and `tools/call` mean in files.

Theory of operation.  A `Face` is a 9P client of one toolsrv (ninep.py) and knows
nothing of MCP's wire: server.py turns its answers into the SDK's types.  Everything it
does is what an agent does with `rdwr`:

  listing    read `revision`; when it moved since the last listing, read `tools/index`
             and every listed tool's `tools/<name>/meta` (concurrently, one connection),
             keep them until the revision moves again.  `--tools` narrows the listing.
  a seat     one MCP connection's session and agent (`Seat`), made on its first call:
             `mkdir session/<client>-<pid>` (a suffix -2, -3, ... when that exists),
             temporary (DMTMP: never saved in the server's state), its cwd set to the
             directory `toolsrv mcp` runs in (or --cwd), then `mkdir .../agent/<client>`;
             with --session that session, made when missing and reused when present,
             and an agent of the connection's own in it (`<client>`, `<client>-2`, ...:
             one that exists is never taken); with --agent that agent, shared.  What the
             face made and named itself it removes when the connection ends; what it
             was told to use, it leaves.
  a call     `tool_load NAME` on the agent's ctl (once per seat and tool), then an rdwr
             of `.../tools/NAME/call` with the JSON args: the result is the read.  A
             failure (Rerror on the write: invalid args; on the read: exit, timeout,
             sandbox refusal, cancel) is an error result carrying the error string and
             the agent's `log` line for that call, toolsrv's full reason.  A seat whose
             files vanished (the session removed, a server restarted without state) is
             made again once and the call retried.
  cancel     the task awaiting the read is cancelled: ninep.py flushes the Tread, and
             toolsrv kills the run, every process of its PID namespace (toolsrv(4),
             Calls; doc/sandbox.md).
  watch      an rdwr of `revwait` with the revision last seen, forever: each answer that
             differs invalidates the listing and calls `changed()`.
  search     `--search` lists two tools instead of the registry (search/mode.py: always,
             or past a budget with `--search auto`; pinned tools beside them):
             search_tools writes the need (first line `limit N`) to `tools/search` and
             reads back `name<TAB>score<TAB>description` lines, best first; call_tool
             calls by name.  Both are served whenever a search mode is on.

Invariant: every error a client can cause (an unknown tool, args that are not an
object, a tool that fails) is an `Unknown` or an error result, never an exception that
ends the connection; a server that stops answering is an error result naming it.
"""
from __future__ import annotations

import asyncio
import json
import os
import re
from typing import Any, Awaitable, Callable

from .ninep import NineP, NinePError
from .search.mode import Mode
from .tools import (CALL_TOOL, SEARCH_LIMIT, SEARCH_TOOL, Tool, call_result, closest,
                    error_result, tool_of)


class Unknown(Exception):
    """A call of a tool this face does not serve: an MCP protocol error, not a result."""


class Unavailable(Exception):
    """The 9P server does not answer (hung up, and dialling again failed)."""


SCRIPT_TOOL = "script"          # code mode: a call of it loads every tool served first
_NAME_BAD = re.compile(r"[^A-Za-z0-9._-]+")


def clean_name(s: str, fallback: str = "mcp") -> str:
    """A client's name made a toolsrv name: runs of other characters become `-`, at
    most 64 characters, never `.`, `..` or empty."""
    s = _NAME_BAD.sub("-", s).strip(".-")[:64].strip(".-")
    return s or fallback


class Seat:
    """One MCP connection's place in the tree: a session and an agent."""

    def __init__(self, client: str, pid: str, principal: str | None = None) -> None:
        self.client, self.pid = client, pid
        self.principal = principal   # an OAuth token's subject: the agent's name
        self.session = ""
        self.agent = ""
        self.own_session = False     # made and named here: removed at the end
        self.own_agent = False
        self.loaded: set[str] = set()
        self.ready = False
        self.cwd: str | None = None  # the client's root, when it gave one ("" for none)
        self.lock = asyncio.Lock()

    @property
    def base(self) -> str:
        return f"session/{self.session}/agent/{self.agent}"


class Face:
    """toolsrv's tree seen as MCP tools (see the module's comment)."""

    def __init__(self, dial: Callable[[], Awaitable[NineP]], *, only: list[str] | None = None,
                 search: bool | Mode | None = False, session: str | None = None,
                 agent: str | None = None, cwd: str | None = None,
                 where: str = "toolsrv") -> None:
        self._dial = dial
        self.where = where                      # the address, for error messages
        self.only = set(only) if only else None
        # the search mode (search/mode.py; True: always), None without --search
        self.mode = search if isinstance(search, Mode) else Mode() if search else None
        self.search = self.mode is not None     # search_tools and call_tool are served
        self.session, self.agent = session, agent
        self.cwd = cwd
        self.nine: NineP | None = None
        self._dialling = asyncio.Lock()
        self._listing: tuple[int, dict[str, Tool]] | None = None
        self._watching: int | None = None   # the revision the watcher's revwait waits on
        self.seats: set[Seat] = set()
        self._releasing: set[asyncio.Future] = set()    # removals sent, not yet answered
        self._serial = 0
        self._networks: dict[str, bool | None] = {}
        self.standalone: str | None = None     # the address tried, when none answered

    # -- the connection --
    async def conn(self) -> NineP:
        """The 9P connection, dialled again when the last one hung up."""
        if self.nine is not None and self.nine.alive:
            return self.nine
        async with self._dialling:
            if self.nine is None or not self.nine.alive:
                try:
                    self.nine = await self._dial()
                except (OSError, NinePError) as e:
                    raise Unavailable(f"toolsrv at {self.where} does not answer: {e}") from None
        return self.nine

    async def close(self) -> None:
        """Remove the seats this face made, then hang up."""
        for seat in list(self.seats):
            await self.release(seat)
        if self._releasing:             # a connection's end may still be removing its seat
            await asyncio.wait(list(self._releasing))
        if self.nine is not None:
            self.nine.close()

    # -- listing --
    async def revision(self) -> int:
        return int((await (await self.conn()).read("revision")).strip() or 0)

    async def registry(self, fresh: bool = False) -> dict[str, Tool]:
        """Every visible tool (narrowed by --tools), read again when the revision moved.
        While the watcher waits on revwait for the revision the listing was read at, the
        listing is current without asking (the watcher drops it when the revision moves);
        otherwise, or when `fresh`, `revision` is read first."""
        if not fresh and self._listing is not None and self._listing[0] == self._watching:
            return self._listing[1]
        rev = await self.revision()
        if self._listing is not None and self._listing[0] == rev:
            return self._listing[1]
        nine = await self.conn()
        index = (await nine.read("tools/index")).decode(errors="replace")
        self._networks.clear()              # profiles read again with the registry
        profile = await self._profile(nine)
        rows = [line.split("\t") for line in index.splitlines() if line.strip()]
        rows = [r for r in rows if self.only is None or r[0] in self.only]

        async def one(row: list[str]) -> Tool | None:
            try:
                meta = json.loads(await nine.read(f"tools/{row[0]}/meta"))
            except (NinePError, ValueError):
                return None                  # gone since the index was read
            return tool_of(row[0], meta, row[1] if len(row) > 1 else "", self.open_world,
                           profile)
        tools = {t.name: t for t in await asyncio.gather(*map(one, rows)) if t is not None}
        self._listing = (rev, tools)
        return tools

    async def _profile(self, nine: NineP) -> str:
        """The profile the face's sessions run under: --session's, else `default`."""
        if self.session:
            try:
                return (await nine.read(f"session/{self.session}/sandbox")).decode().strip()
            except NinePError:
                pass
        return "default"

    def open_world(self, profile: str) -> bool | None:
        """Whether `profile` gives its runs a network (openWorldHint), as its file says;
        None when it cannot be read here (the hint is then left out)."""
        if profile not in self._networks:
            try:
                from ..run.sandbox import load_profile
                p = load_profile(profile)
                self._networks[profile] = bool(p.network_enabled or p.unrestricted_network)
            except Exception:
                self._networks[profile] = None
        return self._networks[profile]

    async def listing(self, may: Callable[[str], bool] | None = None) -> list[Tool]:
        """What tools/list answers: the registry, or what the search mode lists (it
        decides on the tools of a client that may call what `may` allows)."""
        if self.mode is not None:
            return await self.mode.listed(await self.registry(), may)
        return list((await self.registry()).values())

    # -- seats --
    def seat(self, client: str, pid: str | None = None, who: Any = None) -> Seat:
        """A new seat for a connection of `client` (made in the tree on its first call),
        of the OAuth principal `who` (oauth.py) when there is one."""
        if pid is None:
            self._serial += 1
            pid = f"{os.getpid()}-{self._serial}"
        s = Seat(clean_name(client), pid, getattr(who, "sub", None))
        self.seats.add(s)
        return s

    async def _make(self, seat: Seat) -> None:
        nine = await self.conn()
        if self.session:
            seat.session = self.session
            made = await nine.mkdir(f"session/{seat.session}")
            cwd = (seat.cwd or self.cwd or _here()) if made else None  # as `toolsrv call`
            if cwd:
                await nine.write(f"session/{seat.session}/cwd", cwd.encode())
        else:
            for n in range(1, 100):
                seat.session = f"{seat.client}-{seat.pid}" + (f"-{n}" if n > 1 else "")
                if await nine.mkdir(f"session/{seat.session}", temporary=True):
                    seat.own_session = True
                    break
            else:
                raise NinePError(f"session/{seat.client}-{seat.pid}: all names in use")
            cwd = seat.cwd or self.cwd or _here()
            if cwd:
                try:
                    await nine.write(f"session/{seat.session}/cwd", cwd.encode())
                except NinePError:
                    pass        # not a directory the server sees: its private cwd stays
        if self.agent:                  # told which: shared by every connection, kept
            seat.agent = self.agent
            await nine.mkdir(f"session/{seat.session}/agent/{seat.agent}")
        else:                           # its own, never one another connection holds
            named = clean_name(seat.principal) if seat.principal else seat.client
            for n in range(1, 1000):
                seat.agent = named + (f"-{n}" if n > 1 else "")
                if await nine.mkdir(f"session/{seat.session}/agent/{seat.agent}"):
                    break
            else:
                raise NinePError(f"session/{seat.session}/agent/{seat.client}: all names "
                                 "in use")
            seat.own_agent = True
        seat.loaded.clear()
        seat.ready = True

    async def move(self, seat: Seat, cwd: str) -> None:
        """The client's root moved: the cwd of the session made for it follows (a
        --session keeps its own); before the session is made, it is made there."""
        seat.cwd = cwd
        if seat.ready and seat.own_session:
            try:
                await (await self.conn()).write(f"session/{seat.session}/cwd", cwd.encode())
            except (NinePError, ConnectionError, Unavailable):
                pass            # not a directory the server sees: the cwd stays

    async def log_text(self, seat: Seat) -> str:
        """The seat's agent's log ("" before its first call made the agent)."""
        if not seat.ready:
            return ""
        try:
            return (await (await self.conn()).read(f"{seat.base}/log")).decode(
                errors="replace")
        except (NinePError, ConnectionError, Unavailable):
            return ""

    async def tools_py(self, seat: Seat, may: Callable[[str], bool] | None = None) -> str:
        """The seat's agent's tools.py, every tool the face serves (those `may` allows)
        loaded for it first: what a `script` of this connection imports ("" when toolsrv
        cannot be read)."""
        try:
            async with seat.lock:
                if not seat.ready:
                    await self._make(seat)
            await self._load_all(seat, may)
            return (await (await self.conn()).read(f"{seat.base}/tools.py")).decode(
                errors="replace")
        except (NinePError, ConnectionError, Unavailable):
            return ""

    async def _load_all(self, seat: Seat, may: Callable[[str], bool] | None) -> None:
        """Load for the seat's agent every tool the face serves that `may` allows (one
        that will not load, one at a time, is left out)."""
        todo = [n for n in await self.registry() if n not in seat.loaded
                and (may is None or may(n))]
        if not todo:
            return
        nine = await self.conn()
        try:
            await nine.rdwr(f"{seat.base}/ctl", ("tool_load " + " ".join(todo)).encode())
            seat.loaded.update(todo)
            return
        except NinePError:
            pass
        for n in todo:
            try:
                await nine.rdwr(f"{seat.base}/ctl", f"tool_load {n}".encode())
                seat.loaded.add(n)
            except NinePError:
                pass

    async def status(self, seat: Seat, name: str, args: Any = None) -> str | None:
        """The status line of the seat's latest call of `name` (call_tool's in --search
        mode: the tool it names), or None before the seat is made or on an error."""
        if self.search and name == CALL_TOOL and isinstance(args, dict):
            name = n if isinstance(n := args.get("name"), str) else ""
        if not seat.ready or not name or "/" in name:
            return None
        try:
            return (await (await self.conn()).read(f"{seat.base}/tools/{name}/status")
                    ).decode(errors="replace")
        except (NinePError, ConnectionError, Unavailable):
            return None

    async def release(self, seat: Seat) -> None:
        """The connection of `seat` ended: remove what was made for it."""
        self.seats.discard(seat)
        if not seat.ready or self.nine is None or not self.nine.alive:
            return
        seat.ready = False
        path = (f"session/{seat.session}" if seat.own_session else
                seat.base if seat.own_agent else None)
        if path:                        # its own task: close() waits for it, a stop cannot cut it
            removal = asyncio.ensure_future(self._remove(self.nine, path))
            self._releasing.add(removal)
            removal.add_done_callback(self._releasing.discard)
            await asyncio.shield(removal)

    @staticmethod
    async def _remove(nine: NineP, path: str) -> None:
        try:
            await nine.remove(path)
        except (NinePError, ConnectionError):
            pass

    # -- calls --
    async def call(self, seat: Seat, name: str, args: Any,
                   meta: dict[str, str] | None = None,
                   may: Callable[[str], bool] | None = None) -> dict[str, Any]:
        """tools/call: a result dict (content, isError); Unknown for a tool not served.
        `meta`: the call's context for the tree (its traceparent, the principal), sent as
        the args' `_meta` in place of any the client put there (toolsrv(4)); `may`: which
        tools search_tools may name (an OAuth principal's, oauth.py), else all."""
        if self.search and name == SEARCH_TOOL:
            return await self._search(args, may)
        if self.search and name == CALL_TOOL:
            if not isinstance(args, dict) or not isinstance(args.get("name"), str):
                return error_result("call_tool: give the tool's name (a string) and its "
                                    "arguments (an object)")
            extra = _unknown(args, ("name", "arguments"))
            if extra:
                return error_result(f"call_tool: unknown argument {extra} (give name, and "
                                    "the tool's own arguments inside arguments); nothing "
                                    "was called")
            name, args, by_name = args["name"], args.get("arguments", {}), True
        else:
            by_name = False
        if not isinstance(args, dict):
            return error_result(f"invalid args: {name} takes an object, not "
                                f"{type(args).__name__}")
        args = {k: v for k, v in args.items() if k != "_meta"}
        if meta:
            args["_meta"] = meta
        try:
            return await self._call(seat, name, args, by_name, may)
        except Unavailable as e:
            return error_result(str(e))
        except ConnectionError as e:     # hung up mid-way: dialled again on the next call
            return error_result(f"toolsrv at {self.where} hung up: {e}")

    async def _call(self, seat: Seat, name: str, args: dict[str, Any],
                    by_name: bool = False, may: Callable[[str], bool] | None = None
                    ) -> dict[str, Any]:
        if name not in await self.registry() and name not in await self.registry(fresh=True):
            if by_name:                 # call_tool's argument: an error of that call
                return error_result(f"call_tool: unknown tool: {name}; "
                                    + closest(name, list(await self.registry())))
            raise Unknown(f"unknown tool: {name}" + (
                " (search_tools finds the tools)" if self.search else
                " (tools/list lists the tools)"))
        data = json.dumps(args, ensure_ascii=False).encode()
        for attempt in (1, 2):
            async with seat.lock:
                if not seat.ready:
                    try:
                        await self._make(seat)
                    except NinePError as e:
                        return error_result(f"toolsrv at {self.where} cannot make this "
                                            f"connection's session: {e}")
            nine = await self.conn()
            try:
                if name not in seat.loaded:
                    await nine.rdwr(f"{seat.base}/ctl", f"tool_load {name}".encode())
                    seat.loaded.add(name)
                if name == SCRIPT_TOOL:         # its `import tools` is every tool served
                    await self._load_all(seat, may)
                out = await nine.rdwr(f"{seat.base}/tools/{name}/call", data)
            except NinePError as e:
                if "no such tool" in str(e):
                    raise Unknown(f"unknown tool: {name} (gone from the registry)") from None
                if "not found" in str(e) and attempt == 1:
                    seat.ready = False          # the seat's files vanished: make it again
                    continue
                return error_result(str(e), await self._log_line(seat, name))
            except ConnectionError as e:
                return error_result(f"toolsrv at {self.where} hung up during the call: {e}")
            return call_result(out, (await self.registry()).get(name))
        raise AssertionError("unreachable")

    async def _log_line(self, seat: Seat, name: str) -> str:
        """The agent's last log line about a call of `name` that ended (not `started`)."""
        try:
            log = (await (await self.conn()).read(f"{seat.base}/log")).decode(errors="replace")
        except (NinePError, ConnectionError, Unavailable):
            return ""
        for line in reversed(log.splitlines()):
            if f" call {name} " in line and not line.endswith("-> started"):
                return line
        return ""

    async def _search(self, args: Any, may: Callable[[str], bool] | None = None
                      ) -> dict[str, Any]:
        extra = _unknown(args, ("need", "limit")) if isinstance(args, dict) else ""
        if extra:
            return error_result(f"search_tools: unknown argument {extra} (give need: what "
                                "you want to do, in words; and limit)")
        if not isinstance(args, dict) or not isinstance(args.get("need"), str):
            return error_result("search_tools: give the need in words (a string)")
        limit = args.get("limit", SEARCH_LIMIT)
        if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= 100:
            return error_result("search_tools: limit is a whole number from 1 to 100")
        need = " ".join(args["need"].split())         # one line: the protocol's need
        if not need:
            return error_result("search_tools: give the need in words (a string)")
        try:
            nine = await self.conn()
            out = await nine.rdwr("tools/search", f"limit {limit}\n{need}".encode())
            tools = await self.registry()
        except NinePError as e:
            if "not found" in str(e):
                return error_result(f"search_tools: toolsrv at {self.where} has no "
                                    "tools/search (a server without tool search): run "
                                    "`toolsrv mcp` without --search")
            return error_result(f"search_tools: {e}")
        except Unavailable as e:
            return error_result(str(e))
        found = []
        for line in out.decode(errors="replace").splitlines():
            parts = line.split("\t", 2)
            if len(parts) < 2 or parts[0] not in tools or may and not may(parts[0]):
                continue                     # narrowed away (--tools, scopes), or gone
            t = tools[parts[0]]
            hit: dict[str, Any] = {"name": t.name, "score": _number(parts[1]),
                                   "description": t.description, "inputSchema": t.schema}
            if not isinstance(hit["score"], float):
                del hit["score"]                 # not a number: left out, never a string
            found.append(hit)
        return {"content": [{"type": "text", "text": json.dumps(found, indent=1)}],
                "structuredContent": {"tools": found}, "isError": False}

    # -- watching --
    async def watch(self, changed: Callable[[], Awaitable[None]]) -> None:
        """Forever: wait on revwait, and call changed() each time the registry moves."""
        rev: int | None = None
        while True:
            try:
                if rev is None:
                    rev = await self.revision()
                nine = await self.conn()
                self._watching = rev
                try:
                    new = int((await nine.rdwr("revwait", str(rev).encode())).strip() or 0)
                finally:
                    self._watching = None
            except (Unavailable, ConnectionError, NinePError, ValueError):
                rev = None
                await asyncio.sleep(1)       # dialled again on the next turn
                continue
            if new != rev:
                rev = new
                self._listing = None
                await changed()


def _here() -> str | None:
    try:
        return os.getcwd()
    except OSError:
        return None


def _number(s: str) -> float | str:
    """A score as a number, or the text as it was when it is not one."""
    try:
        return float(s)
    except ValueError:
        return s


def _unknown(args: dict[str, Any], known: tuple[str, ...]) -> str:
    """The first key of args not among `known`, quoted; "" when there is none."""
    return next((repr(k) for k in args if k not in known), "")
