"""The search files: `tools/search` (answers on the writing fid) and an agent's `search`
(keeps that agent's last answer for any reader).

Theory of operation.  A Twrite is one need (offsets ignored, as with `call`): it is parsed
and searched on that Twrite, so every error (an empty need, one over 4 KiB, a malformed
`limit` line) is an Rerror on the write, where 9pfuse users see it.  The answer is kept:
  tools/search                  on the fid (`node.answer_read`): read it on the same fid;
                                write again on that fid for a new search.  A fid that wrote
                                nothing reads end of file at once.
  session/S/agent/A/search      on the agent: any fid reads the agent's last answer, so a
                                shell's `echo need > search; cat search` (9pfuse opens
                                separate fids for the two) works.
The first search of a server loads the semantic model and indexes every tool (about a
second): that runs in a worker thread (`Searcher.prepare`), and the write waits for it
without blocking the connection; searches after it run on the event loop (a few ms).
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any, Awaitable

from ..errors import P9Error
from ..registry.search import SearchIndex, answer_text, parse_need
from .node import Node, answer_read, answered, snapshot_read

log = logging.getLogger("toolsrv.search")


class Searcher:
    """The server's one search: a SearchIndex and its first-search preparation."""

    def __init__(self, index: SearchIndex) -> None:
        self.index = index
        self._preparing: asyncio.Future[None] | None = None
        self._prepared = False

    def prepare(self) -> None:
        """Load the model and build the index (blocking; run in a worker thread)."""
        self.index.load_semantic()
        self.index.sync()

    def answer(self, data: bytes) -> tuple[str, bytes | Awaitable[bytes]]:
        """(the need, the answer to one write or an awaitable of it: the first search);
        raises P9Error for a need that cannot be searched."""
        need, limit = parse_need(data)
        if self._prepared:
            return need, self._run(need, limit)
        return need, self._first(need, limit)

    async def _first(self, need: str, limit: int) -> bytes:
        if self._preparing is None:
            self._preparing = asyncio.ensure_future(asyncio.to_thread(self.prepare))
        try:
            await asyncio.shield(self._preparing)
        except Exception:     # the index still ranks lexically what it has
            log.exception("search: preparing the index failed")
        self._prepared = True
        return self._run(need, limit)

    def _run(self, need: str, limit: int) -> bytes:
        hits = self.index.search(need, limit)
        return answer_text(hits, self.index.notice())


class SearchFile(Node):
    """tools/search: write a need, read the answer on the same fid."""

    perm = 0o666

    def __init__(self, name: str, qpath: int, parent: Node, searcher: Searcher) -> None:
        super().__init__(name, qpath, parent)
        self.searcher = searcher

    def write(self, fid: Any, offset: int, data: bytes) -> Any:
        got = self.searcher.answer(data)[1]
        end = offset + len(data)
        if isinstance(got, bytes):
            self._keep(fid, got, end)
            return len(data)

        done = fid.aux["searching"] = asyncio.Event()   # a pipelined read waits for it

        async def later() -> int:
            try:
                self._keep(fid, await got, end)
            finally:
                done.set()
            return len(data)
        return later()

    def _keep(self, fid: Any, answer: bytes, end: int) -> None:
        fid.aux["search"] = answer
        answered(fid, end)

    def read(self, fid: Any, offset: int, count: int) -> Any:
        done = fid.aux.get("searching")
        if done is not None and not done.is_set():
            async def later() -> bytes:
                await done.wait()
                return self.read(fid, offset, count)
            return later()
        if "search" not in fid.aux:
            return b""
        return answer_read(fid, lambda: fid.aux["search"], offset, count)

    def truncate(self, fid: Any) -> None:
        return None


class AgentSearchFile(Node):
    """session/S/agent/A/search: write a need; any read returns this agent's last answer.
    Each search, and each refused need, gets a line in the agent's log."""

    perm = 0o666

    def __init__(self, name: str, qpath: int, parent: Node, searcher: Searcher,
                 agent: Any) -> None:
        super().__init__(name, qpath, parent)
        self.searcher, self.a = searcher, agent

    def _answer(self) -> bytes:
        return bytes(self.a.extra.get("search", b""))

    def length(self) -> int:
        return len(self._answer())

    def write(self, fid: Any, offset: int, data: bytes) -> Any:
        try:
            need, got = self.searcher.answer(data)
        except P9Error as e:
            self.a.note(f"search -> error: {e.full}")
            raise
        if isinstance(got, bytes):
            return self._keep(got, need, len(data))
        done = self.a.extra["searching"] = asyncio.Event()   # a pipelined read waits

        async def later() -> int:
            try:
                return self._keep(await got, need, len(data))
            finally:
                done.set()
        return later()

    def _keep(self, answer: bytes, need: str, n: int) -> int:
        self.a.extra["search"] = answer
        found = sum(1 for ln in answer.splitlines() if ln and not ln.startswith(b"#"))
        self.a.note(f"search {need[:100]!r} -> {found} tools")
        return n

    def read(self, fid: Any, offset: int, count: int) -> Any:
        done = self.a.extra.get("searching")
        if done is not None and not done.is_set():
            async def later() -> bytes:
                await done.wait()
                return snapshot_read(fid, self._answer, offset, count)
            return later()
        return snapshot_read(fid, self._answer, offset, count)

    def truncate(self, fid: Any) -> None:
        return None

    def remove(self) -> None:
        return None
