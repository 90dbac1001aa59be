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
                                separate fids for the two) works; a fid that wrote reads
                                it from where its writes ended, as `tools/search` does
                                (`exec 3<>search`: the descriptor reads after its write).
Every search runs in the server's one search worker thread (`Searcher`): the first loads
the semantic model and indexes every tool (seconds at 10,000 tools), each one after it
re-indexes what moved and ranks (a few ms).  The event loop only takes the list of what
moved, so no other client's request ever waits on tokenising or embedding (issue 25); the
write waits for its answer without blocking its connection.
"""
from __future__ import annotations

import asyncio
import gc
import logging
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Awaitable

from ..errors import P9Error
from ..registry.search.index import (LIMIT_DEFAULT, NEED_MAX, SearchIndex, answer_text,
                                     parse_need)
from .node import Node, answer_read, answered, changes

log = logging.getLogger("toolsrv.search")


class Searcher:
    """The server's one search: a SearchIndex and the one worker thread it runs in."""

    def __init__(self, index: SearchIndex) -> None:
        self.index = index
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="toolsrv-search",
                                        initializer=_share_the_interpreter)
        self._frozen = False

    def close(self) -> None:
        """The server stops: a search still running finishes in its thread, none starts."""
        self._pool.shutdown(wait=False, cancel_futures=True)

    def answer(self, aux: dict, data: bytes, final: bool = False
               ) -> tuple[str, Awaitable[bytes] | None]:
        """(the need, an awaitable of the answer to one write); raises P9Error for a need
        that cannot be searched.  The answer is None when the write is kept for the fid's
        next one (`aux`): a `limit N` line alone, or exactly 4 KiB with no newline (9pfuse
        cuts a longer write(2) into 4 KiB Twrites)."""
        data = aux.pop("piece", b"") + data
        if len(data) == NEED_MAX and not data.endswith(b"\n") and not final:
            aux["piece"] = data
            return "", None
        need, limit = parse_need(data, aux.pop("limit", LIMIT_DEFAULT))
        if not need:
            aux["limit"] = limit
            return "", None
        return need, self._search(need, limit)

    def held(self, aux: dict) -> Awaitable[bytes] | None:
        """The answer to a 4 KiB piece still kept when its fid reads (nothing followed)."""
        piece = aux.pop("piece", None)
        return None if piece is None else self.answer(aux, piece, final=True)[1]

    async def _search(self, need: str, limit: int) -> bytes:
        """What moved is taken here, on the loop (a few look-ups); the worker indexes it and
        searches.  Jobs run one at a time, in the order they were taken, so each sees every
        change before it; a flushed search still applies its changes (shielded)."""
        moved = self.index.pending()
        job = asyncio.get_running_loop().run_in_executor(self._pool, self._work, moved,
                                                         need, limit)
        return await asyncio.shield(job)

    def _work(self, moved: list, need: str, limit: int) -> bytes:
        """In the worker thread: the model loads on the first search (a failure leaves
        search lexical), then `moved` is indexed and the need ranked.  After the first
        build, everything alive is frozen out of the cyclic collector (`gc.freeze`, once):
        the model and the index are long-lived, and a full collection that walks them
        holds the interpreter for a long time (191 ms seen on this machine, in this thread,
        while a search indexed ten large tools)."""
        try:
            self.index.load_semantic()
        except Exception:
            log.exception("search: loading the semantic model failed")
        hits = self.index.search(need, limit, moved)
        if not self._frozen:
            self._frozen = True
            gc.freeze()
        return answer_text(hits, self.index.notice())


SWITCH_INTERVAL = 0.0005    # s: how long the search thread may keep the interpreter


def _share_the_interpreter() -> None:
    """Once the search thread exists, the event loop's thread gets the interpreter back
    within SWITCH_INTERVAL of asking (CPython's default is 5 ms, and a 9P request asks for
    it after each of its several system calls); an interval never lengthened."""
    if sys.getswitchinterval() > SWITCH_INTERVAL:
        sys.setswitchinterval(SWITCH_INTERVAL)


class SearchFile(Node):
    """tools/search: write a need, read the answer on the same fid."""

    perm = 0o666

    def __init__(self, name: str, qpath: int, parent: Node, searcher: Searcher) -> None:
        super().__init__(name, qpath, parent)
        self.searcher = searcher

    def write(self, fid: Any, offset: int, data: bytes) -> Any:
        got = self.searcher.answer(fid.aux, data)[1]
        if got is not None:
            self._take(fid, got, offset + len(data))
        return len(data)

    def _take(self, fid: Any, got: Any, end: int) -> None:
        """Keep the answer on the fid when the search has it (a read that comes
        meanwhile, pipelined, waits for it)."""
        if isinstance(got, bytes):
            fid.aux["search"] = got
            answered(fid, end)
            return
        done = fid.aux["searching"] = asyncio.get_running_loop().create_future()

        def keep(task: asyncio.Future[bytes]) -> None:
            if task.cancelled():
                pass
            elif task.exception() is not None:
                log.error("search failed", exc_info=task.exception())
            else:
                fid.aux["search"] = task.result()
                answered(fid, end)
            done.set_result(None)
        asyncio.ensure_future(got).add_done_callback(keep)

    def read(self, fid: Any, offset: int, count: int) -> Any:
        if "piece" in fid.aux:           # a 4 KiB write that nothing followed: search it
            got = self.searcher.held(fid.aux)
            self._take(fid, got, fid.aux.get("wrote", 0))
        done = fid.aux.get("searching")
        if done is not None and not done.done():
            async def later() -> bytes:
                await asyncio.shield(done)
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

    def version(self) -> int:       # qid.vers and mtime move with the agent's answer
        return changes(self)(self.qpath, self._answer())[0]

    def mtime(self) -> int:
        return changes(self)(self.qpath, self._answer())[1]

    def write(self, fid: Any, offset: int, data: bytes) -> Any:
        try:
            need, got = self.searcher.answer(fid.aux, data)
        except P9Error as e:
            self.a.note(f"search -> error: {e.full}")
            raise
        answered(fid, offset + len(data))      # the fid's next read answers afresh
        if got is None:
            return len(data)
        done = self.a.extra["searching"] = asyncio.Event()   # a pipelined read waits

        async def later() -> int:
            try:
                self._keep(await got, need)
            finally:
                done.set()
            return len(data)
        return later()

    def _keep(self, answer: bytes, need: str) -> None:
        self.a.extra["search"] = answer
        found = sum(1 for ln in answer.splitlines() if ln and not ln.startswith(b"#"))
        self.a.note(f"search {need[:100]!r} -> {found} tools")

    def clunk(self, fid: Any) -> None:
        """A 4 KiB piece that nothing followed is searched when its writer closes."""
        if "piece" in fid.aux:
            try:
                got = self.searcher.held(fid.aux)
            except P9Error as e:
                self.a.note(f"search -> error: {e.full}")
                return
            if got is not None:      # the clunk answers now; the answer is kept when found
                done = self.a.extra["searching"] = asyncio.Event()

                async def keep() -> None:
                    try:
                        self._keep(await got, "(4 KiB need)")
                    except Exception:
                        log.exception("search failed")
                    finally:
                        done.set()
                asyncio.ensure_future(keep())

    def read(self, fid: Any, offset: int, count: int) -> Any:
        done = self.a.extra.get("searching")
        if done is not None and not done.is_set():
            async def later() -> bytes:
                await done.wait()
                return answer_read(fid, self._answer, offset, count)
            return later()
        return answer_read(fid, self._answer, offset, count)

    def truncate(self, fid: Any) -> None:
        return None

    def remove(self) -> None:
        return None
