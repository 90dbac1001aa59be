"""The session directories: session/<id>/{cwd,sandbox,agent/<name>/...}.

Theory of operation.  A session's and an agent's directory are kept nodes (node.FixedDir,
kept on the model's Session and Agent) made on first walk; mkdir makes a session or an
agent and is answered once the store has saved it (after_save), and so is the rm that
ends one.  cwd and sandbox are ValueFiles: a write replaces the value through the store.
Files inside a session answer Tremove with success and no effect, so that `rm -r
session/<id>` through 9pfuse (which unlinks every file before the directory) works;
removing the session or agent directory is what ends it.

Imports.  What these nodes use of the tree's root is `SessionsFS`, which root.py's
ToolsrvFS is: root.py imports this module, never the other way (tests/test_layout.py,
test_no_import_circle).
"""
from __future__ import annotations

import inspect
from typing import Any, Callable, Protocol

from toolsrv.proto import DMDIR, DMTMP

from .. import errors as E
from ..errors import P9Error, too_long
from .policy.who import name_of
from .state.audit import principal
from .state.sessions import Agent, Session, SessionStore
from .node import Committed, Dir_, FixedDir, Node, Qids, changes, snapshot_read

VALUE_MAX = 4096   # bytes of a cwd or sandbox value (PATH_MAX)


class SessionsFS(Protocol):
    """What session/ and below use of the tree's root (root.py's ToolsrvFS)."""

    store: SessionStore
    qids: Qids
    audit: Any              # state/audit.Audit, or None: no trail
    agent_files: Any        # agent.AgentFiles: .NAMES, .entry(agent dir, name, qid path)
    session_hosts: Any      # session/<id>/hosts/ (hosts/sessioncwd.py), or None

    def q(self, *key: Any) -> int: ...


class SessionRoot(Dir_):
    """session/: one directory per session; mkdir creates one."""

    perm = 0o777

    def __init__(self, name: str, qpath: int, parent: Node, fs: SessionsFS) -> None:
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
        audit, policy = self.fs.audit, getattr(self.fs, "policy", None)
        who = name_of(fid) if policy is not None else ""
        if policy is not None:
            policy.check_session(who)       # a block, or its limits.sessions (tree/policy)
        if audit is not None:
            audit.check()
        made = self.fs.store.create(name, temporary=bool(perm & DMTMP))
        if policy is not None and name in self.fs.store.sessions:
            policy.session_made(who, self.fs.store.sessions[name])
        if audit is None:
            return after_save(made, self._node)
        return after_save(made, lambda s: audit.change("session", "made", principal(fid),
                                                       s.name) or self._node(s))


class SessionDir(FixedDir):
    perm = 0o777
    BASE = ("cwd", "sandbox", "agent")

    @property
    def NAMES(self) -> tuple[str, ...]:   # type: ignore[override]
        """And `hosts` while the server imports another host's tools (toolsrv/hosts)."""
        h = self.fs.session_hosts
        return self.BASE + ("hosts",) if h is not None and h.active() else self.BASE

    def __init__(self, s: Session, qpath: int, parent: Node, fs: SessionsFS) -> None:
        super().__init__(s.name, qpath, parent)
        self.s, self.fs = s, fs

    def alive(self) -> bool:
        return self.s.alive

    def remove(self) -> Any:
        s, audit = self.s, self.fs.audit

        def removed(_: Any) -> None:
            self.fs.qids.forget(("session", s.name, s.serial))
            if audit is not None:
                audit.change("session", "removed", None, s.name)
        return after_save(self.fs.store.remove(s.name), removed)

    def paths(self) -> list[int]:
        s = self.s
        return [self.fs.q("session", s.name, s.serial, n) for n in self.NAMES]

    def make(self, name: str, qpath: int) -> Node:
        s, st = self.s, self.fs.store
        if name == "agent":
            return AgentRoot("agent", qpath, self, self.fs)
        if name == "cwd":
            return ValueFile("cwd", qpath, self, lambda: s.cwd, lambda v: st.set_cwd(s, v))
        if name == "hosts":
            return self.fs.session_hosts.node(self, qpath)
        return ValueFile("sandbox", qpath, self, lambda: s.sandbox,
                         lambda v: st.set_sandbox(s, v))


class AgentRoot(Dir_):
    """session/<id>/agent/: one directory per agent; mkdir creates one."""

    perm = 0o777

    def __init__(self, name: str, qpath: int, parent: SessionDir, fs: SessionsFS) -> None:
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
        audit = self.fs.audit
        if audit is None:
            return after_save(self.fs.store.create_agent(self.s, name), self._node)
        audit.check()
        return after_save(self.fs.store.create_agent(self.s, name),
                          lambda a: audit.change("agent", "made", principal(fid),
                                                 a.session.name, a.name) or self._node(a))


class AgentDir(FixedDir):
    perm = 0o777

    def __init__(self, a: Agent, qpath: int, parent: AgentRoot, fs: SessionsFS) -> None:
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
        a, audit = self.a, self.fs.audit
        return after_save(self.fs.store.remove_agent(a.session, a.name), None if audit is None
                          else lambda _: audit.change("agent", "removed", None,
                                                      a.session.name, a.name))

    def paths(self) -> list[int]:
        return [self.key(n) for n in self.NAMES]

    def make(self, name: str, qpath: int) -> Node:
        return self.fs.agent_files.entry(self, name, qpath)


def written_value(name: str, fid: Any, data: bytes) -> str:
    """The value a fid's writes of a one-line file hold so far, stripped ("" while none):
    at most VALUE_MAX bytes of UTF-8; a P9Error names the bound a write broke."""
    buf = fid.aux.setdefault("wbuf", bytearray())
    buf += data
    if len(buf) > VALUE_MAX:
        del fid.aux["wbuf"]
        raise P9Error(too_long(name, VALUE_MAX, "value"))
    try:
        return buf.decode().strip()
    except UnicodeDecodeError:
        raise P9Error(f"{name}: illegal UTF-8") from None


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
        value = written_value(self.name, fid, data)
        if value:
            return after_save(self.put(value), lambda _: len(data))
        return len(data)

    def truncate(self, fid: Any) -> None:
        fid.aux.pop("wbuf", None)

    def remove(self) -> None:
        return None
