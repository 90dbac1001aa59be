"""Per-connection fid table entries.

A Fid names a node of the tree for one connection.  `omode` is None until
Topen/Tcreate; `aux` is scratch space owned by the node's handlers (read
snapshots, a call's accumulated JSON, the revision seen at open); the
directory-read cursor lives here because the server core enforces its rules.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from proto import OEXEC, ORDWR, OREAD, OWRITE

from .tree import Node


@dataclass(eq=False)
class Fid:
    num: int
    node: Node
    uname: str = ""
    omode: int | None = None
    aux: dict[str, Any] = field(default_factory=dict)
    dir_entries: list[bytes] | None = None   # encoded entries snapshot at offset 0
    dir_index: int = 0                        # next entry to send
    dir_offset: int = 0                       # byte offset the next read must use
    held: int = 0                             # bytes of aux counted against the conn's max_held

    @property
    def is_open(self) -> bool:
        return self.omode is not None

    def can_read(self) -> bool:
        return self.omode is not None and (self.omode & 3) in (OREAD, ORDWR, OEXEC)

    def can_write(self) -> bool:
        return self.omode is not None and (self.omode & 3) in (OWRITE, ORDWR)
