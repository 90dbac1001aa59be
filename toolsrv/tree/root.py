"""The toolsrv namespace from the root down (doc/toolsrv.4.md), generated from live state.

    /revision  /revwait  /status  /tools/{index,errors,search,<tool>/{meta,schema,prompt}}
    /session/...   (sessiondirs.py)

Every node is built on demand from the registry and the session store; session/ and
below are sessiondirs.py's (ToolsrvFS is its SessionsFS: it never imports this module),
and an agent directory's contents come from `agent_files`, a hook filled in by the
call-file layer (agent.py's AgentFiles: its NAMES, and `entry` to build one).  Qid keys
name what a node stands for, so a session's keys carry its serial and a re-created
session gets new paths.
"""
from __future__ import annotations

import json
import logging
from typing import Any, Callable

from .. import errors as E
from .calls import timebound
from ..errors import P9Error
from .sessiondirs import SessionRoot
from .state.sessions import Agent, SessionStore
from .node import Dir_, Node, Qids, TextFile, answer_read, answered, changes

log = logging.getLogger("toolsrv.fs")


class ToolsrvFS:
    """Builds the tree and answers Tattach with its root."""

    def __init__(self, registry: Any, store: SessionStore, *, revwait_timeout: float = 60.0,
                 agent_files: Any = None, status: Any = None, searcher: Any = None) -> None:
        self.registry = registry
        self.searcher = searcher   # searchfile.Searcher: tools/search; None: no such file
        self.store = store
        self.revwait_timeout = revwait_timeout
        self.agent_files = agent_files   # .NAMES, .entry(agent dir, name, qid path) -> Node
        self.session_hosts: Any = None   # session/<id>/hosts/ (toolsrv/hosts/sessioncwd.py)
        self.call_timeout: float | None = None   # serve --timeout: timebound.py states it
        self.audit: Any = None     # the audit trail (state/audit.py): sessions and agents
        self.policy: Any = None    # tree/policy/gate.PolicyGate: its errors, sessions' limit
        self.qids = Qids()
        self.attaches: list[tuple[str, str, str]] = []
        self._paths_at = -1          # the revision whose tools have qid paths (_tools_file)
        r = self.root = Dir_("/", self.qids.path(("root",)), None, self._root_entries)
        self._fixed = [
            TextFile("revision", self.q("revision"), r, self._revision_text,
                     version=lambda: self.registry.revision,
                     changes=lambda: self.registry.revision),
            RevwaitFile("revwait", self.q("revwait"), r, self),
            ToolsDir("tools", self.q("tools"), r, self),
            SessionRoot("session", self.q("session"), r, self),
        ]
        if status is not None:  # the runner's figures (toolsrv/run/runner.py, status_text)
            self._fixed.append(TextFile("status", self.q("status"), r,
                                        lambda: status().encode(),
                                        changes=lambda: status()))
        store.on_remove_agent.append(self._forget_agent)

    def q(self, *key: Any) -> int:
        return self.qids.path(key)

    def add_root(self, node: Node) -> None:
        """Serve node (made with this root as its parent) at the root: hosts/ (toolsrv/hosts)."""
        self._fixed.append(node)

    def attach(self, uname: str, aname: str, conn: Any) -> Node:
        log.debug("attach: conn %s uname %r aname %r", getattr(conn, "name", "?"), uname, aname)
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
            TextFile("index", self.q("tools", "index"), d, lambda: reg.index_text().encode(),
                     changes=lambda: reg.revision),
            TextFile("errors", self.q("tools", "errors"), d, lambda: self._errors().encode(),
                     changes=self._errors),
        ]
        if self.searcher is not None:
            from .searchfile import SearchFile
            nodes.append(SearchFile("search", self.q("tools", "search"), d, self.searcher))
        if not tools:
            return nodes
        names = reg.names() if hasattr(reg, "names") else sorted(reg.tools)
        nodes += [ToolDir(name, self.q("tool", name), d, self) for name in names]
        return nodes

    def _errors(self) -> str:
        """tools/errors: the registry's lines, then the policy file's (tree/policy/gate.py)."""
        more = self.policy.errors_text() if self.policy is not None else ""
        return self.registry.errors_text() + more

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

    def version(self) -> int:        # revision's: the revision, and its mtime
        return self.fs.registry.revision

    def mtime(self) -> int:
        return changes(self)(self.qpath, self.fs.registry.revision)[1]

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
                         self._tool(), "schema_text", lambda t: json_text(t.schema)),
                     changes=lambda: self.fs.registry.get(self.name)),
            TextFile("prompt", q("tool", self.name, "prompt"), self,
                     lambda: _text(self._tool(), "prompt_text", lambda t: t.prompt.encode()),
                     changes=lambda: self.fs.registry.get(self.name)),
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
