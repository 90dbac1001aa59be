"""The root's `policy` and `block` files: the policy in force, and the kill switch.

/policy (r, 0444): where the rules come from (`file PATH`), when they were read, why the
file on disk is not in force (`error ...`), one line per principal (`default`, then each
named: its tools, deny, confirm and limits as merged) and each block (`blocked WORD`).

/block (rw, 0600): a read lists the blocks, one a line.  A write holds lines of
`block WORD...` or `unblock WORD...` (a WORD is a tool name or glob, or a principal:
blocks.py), applied in order once the whole write is checked; a block kills the calls
under way that it covers.  Only the operator writes it: a peer of a Unix socket of the
server's own uid or root, and never a tool's own connection (which its scope refuses
first anyway), so no agent lifts a block on itself; any other writer is refused
(`permission denied: block: ...`).  `toolsrv block` and `toolsrv unblock` write it.
"""
from __future__ import annotations

from typing import Any

from ...errors import P9Error, fit
from ..node import Node, TextFile, answer_read, answered
from ..state.audit import principal
from .consent import operator
from .gate import PolicyGate

VERBS = ("block", "unblock")
MAX_WRITE = 1 << 16


def policy_file(fs: Any, gate: PolicyGate) -> Node:
    return TextFile("policy", fs.q("policy"), fs.root, lambda: gate.text().encode(),
                    changes=lambda: (gate.revision, tuple(gate.blocks.words)))


class BlockFile(Node):
    """/block: the kill switch (the module's header)."""

    perm = 0o600

    def __init__(self, name: str, qpath: int, parent: Node, gate: PolicyGate) -> None:
        super().__init__(name, qpath, parent)
        self.gate = gate

    def _text(self) -> bytes:
        return self.gate.blocks.text().encode()

    def length(self) -> int:
        return len(self._text())

    def read(self, fid: Any, offset: int, count: int) -> bytes:
        return answer_read(fid, self._text, offset, count)

    def write(self, fid: Any, offset: int, data: bytes) -> int:
        who = principal(fid)
        if not operator(who):
            raise P9Error(fit("permission denied: block: ", "only the server's own uid or "
                              "root, through its Unix socket, may block or unblock", ""))
        if len(data) > MAX_WRITE:
            raise P9Error(fit("block: ", f"a write longer than {MAX_WRITE} bytes"))
        try:
            text = data.decode()
        except UnicodeDecodeError:
            raise P9Error(fit("block: ", "not UTF-8")) from None
        cmds = []
        for line in text.splitlines():
            words = line.split()
            if not words or words[0].startswith("#"):
                continue
            if words[0] not in VERBS or len(words) < 2:
                raise P9Error(fit("block: ", f"say block WORD... or unblock WORD...; not "
                                  f"{line.strip()[:40]!r}"))
            cmds.append((words[0], words[1:]))
        for verb, words in cmds:
            if verb == "block":
                self.gate.block(words, who)
            else:
                self.gate.unblock(words, who)
        answered(fid, offset + len(data))
        return len(data)

    def truncate(self, fid: Any) -> None:
        return None


def add_files(fs: Any, gate: PolicyGate) -> None:
    """Serve /policy and /block at fs's root (root.py's add_root)."""
    fs.add_root(policy_file(fs, gate))
    fs.add_root(BlockFile("block", fs.q("block"), fs.root, gate))
