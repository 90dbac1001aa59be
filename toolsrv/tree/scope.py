"""The guard on a tool's own connection: what the client9p profile's connection may reach.

A connection handed to one agent's tool (serve/: the internal connection) checks every
walk and write against AgentScope, which names nodes by their path from the root
(node_path), so no other session or agent is visible to it and it cannot widen its
own sandbox.
"""
from __future__ import annotations

from typing import Any

from ..errors import P9Error, fit
from .node import Node


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

    def __init__(self, session: str, agent: str, parent: Any = None) -> None:
        self.session, self.agent = session, agent
        self.parent = parent    # the Call whose run holds the connection: its calls' parent

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
        raise P9Error(fit("permission denied: ", what, " is outside this tool's scope"))
