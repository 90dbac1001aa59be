"""The kill switch's list: the tools (names or globs) and principals blocked.

A block is one word: a principal (`uid:1000`, `tls:CN=x`, `host:A`, `token:sha256:H`,
`oauth:S`: who.py's names, told by their kind) or else a tool name or glob (`deploy_*`).
While a tool is blocked no one may load or call it; while a principal is, it may load and
call nothing.  The list is kept in the state directory (`blocks`, one word a line, mode
600, replaced whole by a rename), so a restart keeps it; without state it lasts as long
as the server.
"""
from __future__ import annotations

import fnmatch
import os

from .rules import KINDS

FILE = "blocks"
MAX_WORD = 256


def is_principal(word: str) -> bool:
    return word.partition(":")[0] in KINDS and ":" in word


def bad_word(word: str) -> str:
    """Why `word` cannot be blocked, or ""."""
    if not word or len(word) > MAX_WORD or not word.isprintable() or any(
            c.isspace() for c in word):
        return f"not a tool or principal: {word[:60]!r}"
    return ""


class Blocks:
    """The blocked words, and where they are kept (None: nowhere)."""

    def __init__(self, state: str | None) -> None:
        self.path = os.path.join(state, FILE) if state else None
        self.words: list[str] = []

    def load(self) -> "Blocks":
        if self.path is None:
            return self
        try:
            with open(self.path, encoding="utf-8") as f:
                self.words = [w for w in (line.strip() for line in f) if w and not bad_word(w)]
        except FileNotFoundError:
            pass
        return self

    def save(self) -> None:
        """Write the list whole (OSError when it cannot be kept)."""
        if self.path is None:
            return
        tmp = f"{self.path}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600)
        try:
            os.write(fd, "".join(w + "\n" for w in self.words).encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.path)

    def tool_blocked(self, tool: str) -> str | None:
        """The word that blocks calls of `tool`, or None."""
        for w in self.words:
            if not is_principal(w) and fnmatch.fnmatchcase(tool, w):
                return w
        return None

    def text(self) -> str:
        return "".join(w + "\n" for w in self.words)
