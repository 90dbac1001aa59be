"""A request in flight and a handler's answer that waits (serve/server.py's records).

`Req` is lib9p's Req, cut to what the core needs: one per tag in `Conn.inflight`, from
the moment a request is admitted until `_respond` frees its tag.  Its `work` says what
will answer it (None while the handler runs; then the Task or the node's Pending it
waits on), so a late answer can tell whether it is still the one awaited (`Conn._owns`),
and a Tflush's `flushing` names the request it waits for.  `Later` is what a handler
returns when its reply needs waiting for.
"""
from __future__ import annotations

from typing import Any, Callable


class Req:
    """One request in flight, as lib9p's Req: its tag, its message, and what answers it:
    `work` is None while its handler runs, then the Task or Pending it waits on; a
    Tflush's `flushing` is the tag of the request it waits for (the first of a chain)."""
    __slots__ = ("tag", "msg", "work", "flushing")
    work: Any                       # None, an asyncio.Task or a tree Pending

    def __init__(self, tag: int, msg: Any, flushing: int | None = None) -> None:
        self.tag, self.msg, self.work, self.flushing = tag, msg, None, flushing

    def __repr__(self) -> str:
        return f"Req({self.tag}, {type(self.msg).__name__}, {self.work!r}, {self.flushing})"


class Later:
    """A handler's answer that needs waiting: `post(await aw)` is the reply."""
    __slots__ = ("aw", "post")

    def __init__(self, aw: Any, post: Callable[[Any], Any]) -> None:
        self.aw, self.post = aw, post
