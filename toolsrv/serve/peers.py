"""Who may connect: the peer policy of the listeners, and the connection a tool is given.

Theory of operation.  A Unix-socket peer must have the server's uid or one allowed by
--allow-uid (SO_PEERCRED), and must not be one of our own tool processes: a peer whose
pid descends from the launcher (the zygote, whose pid the runner knows) is refused, so a
tool cannot connect back to its server through the socket.  A TCP or TLS peer is let in
here and proves the shared secret at attach (auth.py).  The one way in for a tool is
the connection it is given (a profile with `general.toolsrv: true`, client_9p's, gets it
as fd 3): one end of a socketpair whose other end this server serves with the Unix
listeners' config and a guard (tree/scope.py AgentScope) that keeps it to its own agent.
"""
from __future__ import annotations

import asyncio
import os
import socket
from typing import Any, Callable

from ..record import replace
from ..tree.scope import AgentScope
from .transport import Peer


def parent_pid(pid: int) -> int:
    """The parent of pid from /proc, or 0 when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return int(f.read().rsplit(b")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def descends_from(pid: int, ancestor: int, limit: int = 128) -> bool:
    """True when `ancestor` is pid itself or one of its ancestors."""
    for _ in range(limit):
        if pid == ancestor:
            return True
        if pid <= 1:
            return False
        pid = parent_pid(pid)
    return False


class PeerPolicy:
    """Who may connect through the listeners: peer_check is the Gate's check."""

    def __init__(self, allow_uids: Any, zygote_pid: Callable[[], int | None]) -> None:
        self.allow_uids = allow_uids
        self.zygote_pid = zygote_pid   # the launcher's pid now (it may be restarted)

    def peer_check(self, peer: Peer) -> str | None:
        """Why a peer may not connect (an Rerror string), or None."""
        if peer.kind != "unix":
            return None          # TCP: the shared secret (auth.py), checked at attach
        if peer.uid is None:
            return "permission denied: cannot tell the peer's uid"
        if peer.uid != os.getuid() and peer.uid not in self.allow_uids:
            return f"permission denied: uid {peer.uid} may not connect (see --allow-uid)"
        zygote = self.zygote_pid()
        if zygote and peer.pid and descends_from(peer.pid, zygote):
            return "permission denied: a tool may not connect back to its server"
        return None


class Internal:
    """Sockets already connected to this server, each scoped to one agent (connect)."""

    def __init__(self) -> None:
        self.factory: Any = None   # config -> protocol factory, set once the listeners'
        self.config: Any = None    # config is made (serve_with); before that, no calls run

    def serve_with(self, factory: Any, config: Any) -> None:
        self.factory, self.config = factory, config

    async def connect(self, session: str, agent: str, call: Any = None) -> socket.socket:
        """A socket connected to this server, scoped to that agent; the calls written
        through it are children of `call`, the run it is given to (tree/calls/nested.py).
        The caller closes it."""
        config = replace(self.config, guard=AgentScope(session, agent, call))
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            await asyncio.get_running_loop().connect_accepted_socket(self.factory(config), ours)
        except BaseException:
            ours.close()
            theirs.close()
            raise
        return theirs
