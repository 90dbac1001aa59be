"""The toolsrv namespace (DESIGN.md section 2), generated from live state.

    /revision  /revwait  /tools/{index,errors,search,<tool>/{meta,schema,prompt}}
    /session/<id>/{cwd,sandbox,agent/<name>/...}

Every node is built on demand from the registry and the session store; the
agent directory's contents come from `agent_files`, a hook filled in by the
call-file layer (toolfile.py's Calls: its NAMES, and `entry` to build one).  Qid
keys name what a node stands for, so
a session's keys carry its serial and a re-created session gets new paths.

Files inside a session answer Tremove with success and no effect, so that
`rm -r session/<id>` through 9pfuse (which unlinks every file before the
directory) works; removing the session or agent directory is what ends it.
"""
from __future__ import annotations

import inspect
import json
import logging
from typing import Any, Callable

from toolsrv.proto import DMDIR, DMTMP

from .. import errors as E
from . import timebound
from ..errors import P9Error
from .sessions import Agent, Session, SessionStore
from .node import (Committed, Dir_, FixedDir, Node, Qids, TextFile, answer_read, answered,
                   changes, snapshot_read)

log = logging.getLogger("toolsrv.fs")
VALUE_MAX = 4096   # bytes of a cwd or sandbox value (PATH_MAX)


class ToolsrvFS:
    """Builds the tree and answers Tattach with its root."""

    def __init__(self, registry: Any, store: SessionStore, *, revwait_timeout: float = 60.0,
                 agent_files: Any = None, status: Any = None, searcher: Any = None) -> None:
        self.registry = registry
        self.searcher = searcher   # searchfile.Searcher: tools/search; None: no such file
        self.store = store
        self.revwait_timeout = revwait_timeout
        self.agent_files = agent_files   # .NAMES, .entry(agent dir, name, qid path) -> Node
        self.call_timeout: float | None = None   # serve --timeout: timebound.py states it
        self.qids = Qids()
        self.attaches: list[tuple[str, str, str]] = []
        self._paths_at = -1          # the revision whose tools have qid paths (_tools_file)
        r = self.root = Dir_("/", self.qids.path(("root",)), None, self._root_entries)
        self._fixed = [
            TextFile("revision", self.q("revision"), r, self._revision_text,
                     version=lambda: self.registry.revision),
            RevwaitFile("revwait", self.q("revwait"), r, self),
            ToolsDir("tools", self.q("tools"), r, self),
            SessionRoot("session", self.q("session"), r, self),
        ]
        if status is not None:  # the runner's figures (toolsrv/run/runner.py, status_text)
            self._fixed.append(TextFile("status", self.q("status"), r,
                                        lambda: status().encode()))
        store.on_remove_agent.append(self._forget_agent)

    def q(self, *key: Any) -> int:
        return self.qids.path(key)

    def add_root(self, node: Node) -> None:
        """Serve node (made with this root as its parent) at the root: hosts/ (toolsrv/hosts)."""
        self._fixed.append(node)

    def attach(self, uname: str, aname: str, conn: Any) -> Node:
        log.info("attach: conn %s uname %r aname %r", getattr(conn, "name", "?"), uname, aname)
        self.attaches.append((getattr(conn, "name", "?"), uname, aname))
        del self.attaches[:-100]
        return self.root

    def _root_entries(self, d: Dir_) -> list[Node]:
        return self._fixed

    def _revision_text(self) -> bytes:
        return f"{self.registry.revision}\n".encode()

    # -- tools/ --
    def _tools_entries(self, d: Node, tools: bool = True) -> list[Node]:
        reg = self.registry
        nodes: list[Node] = [
            TextFile("index", self.q("tools", "index"), d, lambda: reg.index_text().encode()),
            TextFile("errors", self.q("tools", "errors"), d, lambda: reg.errors_text().encode()),
        ]
        if self.searcher is not None:
            from .searchfile import SearchFile
            nodes.append(SearchFile("search", self.q("tools", "search"), d, self.searcher))
        if not tools:
            return nodes
        names = reg.names() if hasattr(reg, "names") else sorted(reg.tools)
        nodes += [ToolDir(name, self.q("tool", name), d, self) for name in names]
        return nodes

    def _tools_file(self, d: Node, name: str) -> Node | None:
        """tools/<name> without listing every tool: a file of the registry's, else the
        tool's directory (a walk to tools/search must not build 10,000 nodes)."""
        for n in self._tools_entries(d, tools=False):
            if n.name == name:
                return n
        reg = self.registry
        if reg.get(name) is None:
            return None
        if self._paths_at != reg.revision:    # paths in listing order, as a listing makes
            self._paths_at = reg.revision     # them: once per revision, not per walk
            for n in (reg.names() if hasattr(reg, "names") else sorted(reg.tools)):
                self.q("tool", n)
        return ToolDir(name, self.q("tool", name), d, self)

    def _forget_agent(self, a: Agent) -> None:
        s = a.session
        self.qids.forget(("session", s.name, s.serial, "agent", a.name, a.serial))


class RevwaitFile(Node):
    """The revision, and a wait for its next change, without blocking a tree walker.

    A read returns the current revision at once, as `revision` does: `grep -r`,
    `find -exec cat` and backups read it and move on.  To wait, write the revision you
    have acted on: the fid's next read blocks until the registry's revision differs from
    it (at once if it already does) or --revwait-timeout passes, and returns the revision
    then.  One round trip for an agent (`rdwr revwait N`, pipelined by toolsrv.cli.client),
    race-free (the number is the client's, not the server's guess at what it saw), and
    repeatable on one fid: write again, read again.  Reads slice a per-fid snapshot of
    the answer by offset, as ctl's and call's do (node.answer_read): it starts at 0, or
    where the fid's writes ended, so a 9pfuse descriptor opened read-write (`exec
    3<>revwait`), whose offset grows with every write and read, works as `9p rdwr` does."""

    perm = 0o666

    def __init__(self, name: str, qpath: int, parent: Node, fs: ToolsrvFS) -> None:
        super().__init__(name, qpath, parent)
        self.fs = fs

    def _text(self) -> bytes:
        return f"{self.fs.registry.revision}\n".encode()

    def length(self) -> int:
        return len(self._text())

    def write(self, fid: Any, offset: int, data: bytes) -> int:
        text = data.decode("utf-8", "replace").strip()
        if not text:
            answered(fid, offset + len(data))
            return len(data)              # a truncate or a bare newline: nothing to wait for
        if not text.isascii() or not text.isdigit() or len(text) > 20:
            raise P9Error(E.EREVWAIT)
        fid.aux["wait"] = int(text)
        answered(fid, offset + len(data))  # the next read answers afresh, as ctl's does
        return len(data)

    async def _wait(self, fid: Any, seen: int, offset: int, count: int) -> bytes:
        rev = await self.fs.registry.wait_change(seen, self.fs.revwait_timeout)
        data = f"{rev}\n".encode()
        return answer_read(fid, lambda: data, offset, count)

    def read(self, fid: Any, offset: int, count: int) -> Any:
        seen = fid.aux.pop("wait", None)
        if seen is not None:
            return self._wait(fid, seen, offset, count)
        return answer_read(fid, self._text, offset, count)

    def truncate(self, fid: Any) -> None:
        return None


class ToolsDir(Dir_):
    """tools/: its files, then one directory per visible tool; a walk looks up the one
    name it is given (ToolsrvFS._tools_file), without listing the others."""

    def __init__(self, name: str, qpath: int, parent: Node, fs: ToolsrvFS) -> None:
        super().__init__(name, qpath, parent)
        self.fs = fs

    def children(self) -> list[Node]:
        return self.fs._tools_entries(self)

    def lookup(self, name: str) -> Node | None:
        return self.fs._tools_file(self, name)


class ToolDir(Dir_):
    """tools/<tool>/: the tool's resolved definition, schema and prompt."""

    def __init__(self, name: str, qpath: int, parent: Node, fs: ToolsrvFS) -> None:
        super().__init__(name, qpath, parent)
        self.fs = fs

    def alive(self) -> bool:
        return self.fs.registry.get(self.name) is not None

    def _tool(self) -> Any:
        t = self.fs.registry.get(self.name)
        if t is None:
            raise P9Error(E.ENOTFOUND)
        return t

    def children(self) -> list[Node]:
        q = self.fs.q
        return [
            TextFile("meta", q("tool", self.name, "meta"), self,
                     lambda: self._bounded(timebound.meta_text) or _text(
                         self._tool(), "meta_text", lambda t: json_text(t.meta_json())),
                     changes=lambda: self.fs.registry.get(self.name)),   # a new Tool: moved
            TextFile("schema", q("tool", self.name, "schema"), self,
                     lambda: self._bounded(timebound.schema_text) or _text(
                         self._tool(), "schema_text", lambda t: json_text(t.schema))),
            TextFile("prompt", q("tool", self.name, "prompt"), self,
                     lambda: _text(self._tool(), "prompt_text", lambda t: t.prompt.encode())),
        ]

    def _bounded(self, text: Callable[[Any, Any], bytes | None]) -> bytes | None:
        t = self._tool()        # a timeout argument bounded by the call's limit (timebound)
        return text(t, timebound.limit(t, None, self.fs.call_timeout))


def _text(tool: Any, attr: str, make: Callable[[Any], bytes]) -> bytes:
    """The registry's cached text of a tool file, or one made from the tool."""
    cached = getattr(tool, attr, None)
    return cached.encode() if isinstance(cached, str) else make(tool)


def json_text(obj: Any) -> bytes:
    return (json.dumps(obj, indent=2, ensure_ascii=False) + "\n").encode()


class SessionRoot(Dir_):
    """session/: one directory per session; mkdir creates one."""

    perm = 0o777

    def __init__(self, name: str, qpath: int, parent: Node, fs: ToolsrvFS) -> None:
        super().__init__(name, qpath, parent)
        self.fs = fs

    def children(self) -> list[Node]:
        return [self._node(s) for s in self.fs.store.sessions.values()]

    def lookup(self, name: str) -> Node | None:
        s = self.fs.store.sessions.get(name)
        return self._node(s) if s else None

    def _node(self, s: Session) -> "SessionDir":
        node = s.node        # kept by the session: see node.py
        if node is None:
            node = s.node = SessionDir(s, self.fs.q("session", s.name, s.serial), self, self.fs)
        return node

    def create(self, name: str, perm: int, mode: int, fid: Any) -> Any:
        if not perm & DMDIR:
            raise P9Error(E.ECREATE)
        return after_save(self.fs.store.create(name, temporary=bool(perm & DMTMP)),
                          self._node)


class SessionDir(FixedDir):
    perm = 0o777
    NAMES = ("cwd", "sandbox", "agent")

    def __init__(self, s: Session, qpath: int, parent: Node, fs: ToolsrvFS) -> None:
        super().__init__(s.name, qpath, parent)
        self.s, self.fs = s, fs

    def alive(self) -> bool:
        return self.s.alive

    def remove(self) -> Any:
        s = self.s
        return after_save(self.fs.store.remove(s.name),
                          lambda _: self.fs.qids.forget(("session", s.name, s.serial)))

    def paths(self) -> list[int]:
        s = self.s
        return [self.fs.q("session", s.name, s.serial, n) for n in self.NAMES]

    def make(self, name: str, qpath: int) -> Node:
        s, st = self.s, self.fs.store
        if name == "agent":
            return AgentRoot("agent", qpath, self, self.fs)
        if name == "cwd":
            return ValueFile("cwd", qpath, self, lambda: s.cwd, lambda v: st.set_cwd(s, v))
        return ValueFile("sandbox", qpath, self, lambda: s.sandbox,
                         lambda v: st.set_sandbox(s, v))


class AgentRoot(Dir_):
    """session/<id>/agent/: one directory per agent; mkdir creates one."""

    perm = 0o777

    def __init__(self, name: str, qpath: int, parent: SessionDir, fs: ToolsrvFS) -> None:
        super().__init__(name, qpath, parent)
        self.s, self.fs = parent.s, fs

    def remove(self) -> None:
        return None  # rm -r unlinks it before the session; the session's removal ends it

    def _node(self, a: Agent) -> "AgentDir":
        node = a.node        # kept by the agent: see node.py
        if node is None:
            s = self.s
            node = a.node = AgentDir(a, self.fs.q("session", s.name, s.serial, "agent",
                                                  a.name, a.serial), self, self.fs)
        return node

    def children(self) -> list[Node]:
        return [self._node(a) for a in self.s.agents.values()]

    def lookup(self, name: str) -> Node | None:
        a = self.s.agents.get(name)
        return self._node(a) if a else None

    def create(self, name: str, perm: int, mode: int, fid: Any) -> Any:
        if not perm & DMDIR:
            raise P9Error(E.ECREATE)
        return after_save(self.fs.store.create_agent(self.s, name), self._node)


class AgentDir(FixedDir):
    perm = 0o777

    def __init__(self, a: Agent, qpath: int, parent: AgentRoot, fs: ToolsrvFS) -> None:
        super().__init__(a.name, qpath, parent)
        self.a, self.fs = a, fs
        files = fs.agent_files
        self.NAMES = files.NAMES if files is not None else ()

    def key(self, *rest: Any) -> int:
        """The qid path of one of the agent's files (built once: the nodes are kept)."""
        a, s = self.a, self.a.session
        return self.fs.q("session", s.name, s.serial, "agent", a.name, a.serial, *rest)

    def alive(self) -> bool:
        return self.a.alive

    def remove(self) -> Any:
        return after_save(self.fs.store.remove_agent(self.a.session, self.a.name), None)

    def paths(self) -> list[int]:
        return [self.key(n) for n in self.NAMES]

    def make(self, name: str, qpath: int) -> Node:
        return self.fs.agent_files.entry(self, name, qpath)


def after_save(made: Any, fn: Callable[[Any], Any] | None) -> Any:
    """fn(made), or, when the store's change is made and still being saved (an
    awaitable), a Committed of it: the reply waits for the state to be on disk
    (sessions.py), and a flush does not cancel a change that took effect."""
    if not inspect.isawaitable(made):
        return made if fn is None else fn(made)

    async def wait() -> Any:
        got = await made
        return got if fn is None else fn(got)
    return Committed(wait())


class ValueFile(Node):
    """A one-line read-write setting (cwd, sandbox), applied on each Twrite.

    A fid's writes accumulate (so a value split over Twrites still arrives
    whole) and the stripped text is validated and applied at once, so the
    error reaches the writer.  Empty text is a truncate, never an action.
    """

    perm = 0o666

    def __init__(self, name: str, qpath: int, parent: Node,
                 get: Callable[[], str], put: Callable[[str], Any]) -> None:
        super().__init__(name, qpath, parent)
        self.get, self.put = get, put

    def _text(self) -> bytes:
        return f"{self.get()}\n".encode()

    def length(self) -> int:
        return len(self._text())

    def version(self) -> int:
        return changes(self)(self.qpath, self.get())[0]

    def mtime(self) -> int:
        return changes(self)(self.qpath, self.get())[1]

    def read(self, fid: Any, offset: int, count: int) -> bytes:
        return snapshot_read(fid, self._text, offset, count)

    def write(self, fid: Any, offset: int, data: bytes) -> int:
        buf = fid.aux.setdefault("wbuf", bytearray())
        buf += data
        if len(buf) > VALUE_MAX:
            del fid.aux["wbuf"]
            raise P9Error(f"{self.name}: value longer than {VALUE_MAX} bytes: too long")
        try:
            value = buf.decode().strip()
        except UnicodeDecodeError:
            raise P9Error(f"{self.name}: illegal UTF-8") from None
        if value:
            return after_save(self.put(value), lambda _: len(data))
        return len(data)

    def truncate(self, fid: Any) -> None:
        fid.aux.pop("wbuf", None)

    def remove(self) -> None:
        return None


class EmptyRegistry:
    """A registry with no tools (the tree's seam before one is configured)."""

    revision = 0
    tools: dict = {}

    def get(self, name: str) -> None:
        return None

    def index_text(self) -> str:
        return ""

    def errors_text(self) -> str:
        return ""

    async def wait_change(self, seen: int, timeout: float) -> int:
        import asyncio
        await asyncio.sleep(timeout)
        return self.revision


def node_path(node: Node) -> tuple[str, ...]:
    """The names from the root down to node."""
    parts = []
    while node.parent is not node:
        parts.append(node.name)
        node = node.parent
    return tuple(reversed(parts))


class AgentScope:
    """What the connection handed to one agent's tool (client9p profile) may do.

    It may read the registry and its own agent's files, write its own agent's
    ctl, search and call files, `revwait` (to wait for a change) and `tools/search`
    (to find a tool), and nothing else: no
    other session or agent is visible, and cwd, sandbox, mkdir and rm are refused, so
    a model cannot use the server to widen its own sandbox.
    """

    def __init__(self, session: str, agent: str) -> None:
        self.session, self.agent = session, agent

    def __call__(self, node: Node, op: str) -> None:
        p = node_path(node)
        mine = len(p) < 2 or p[0] != "session" or (
            p[1] == self.session and (len(p) < 4 or p[3] == self.agent))
        if op == "walk" and mine:
            return
        if op == "write" and p in (("revwait",), ("tools", "search")):  # a wait, a search
            return
        if op == "write" and mine and len(p) >= 5 and (
                p[4] in ("ctl", "search") and len(p) == 5 or
                len(p) == 7 and p[4] == "tools" and p[6] == "call"):
            return
        what = "/".join(p) or "/"
        raise P9Error(f"permission denied: {what} is outside this tool's scope"[:120])
