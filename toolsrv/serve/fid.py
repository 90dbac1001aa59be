"""Per-connection fid table entries.

A Fid names a node of the tree for one connection.  `omode` is None until
Topen/Tcreate; `aux` is scratch space owned by the node's handlers (read
snapshots, a call's accumulated JSON, the revision seen at open); `conn` is the
connection that owns it, for a node that tells one client's fids from another's (who
is handed a call's out and err: tree/agent.py); the
directory-read cursor lives here because the server core enforces its rules.
"""
from __future__ import annotations

from typing import Any

from toolsrv.proto import OEXEC, ORDWR, OREAD, OWRITE

from ..record import Plain
from ..tree.node import Node


class Fid(Plain):
    FIELDS = ("num", "node", "uname", "omode", "aux", "dir_entries", "dir_index", "dir_offset",
              "held", "conn")

    def __init__(self, num: int, node: Node, uname: str = "", omode: int | None = None,
                 aux: dict[str, Any] | None = None, dir_entries: list[bytes] | None = None,
                 dir_index: int = 0, dir_offset: int = 0, held: int = 0,
                 conn: Any = None) -> None:
        self.num = num
        self.node = node
        self.uname = uname
        self.omode = omode
        self.aux: dict[str, Any] = {} if aux is None else aux
        self.dir_entries = dir_entries      # encoded entries snapshot at offset 0
        self.dir_index = dir_index          # next entry to send
        self.dir_offset = dir_offset        # byte offset the next read must use
        self.held = held                    # bytes of aux counted against the conn's max_held
        self.conn = conn

    @property
    def is_open(self) -> bool:
        return self.omode is not None

    def can_read(self) -> bool:
        return self.omode is not None and (self.omode & 3) in (OREAD, ORDWR, OEXEC)

    def can_write(self) -> bool:
        return self.omode is not None and (self.omode & 3) in (OWRITE, ORDWR)
