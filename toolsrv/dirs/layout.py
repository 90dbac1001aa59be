"""Where the server keeps things, each directory proved ours before it serves.

Theory of operation.  The state directory (statedir.py: --state, else one named for the
first address) holds state.json and, for a server that runs tools as its own uid, work/:
the sessions' private cwds.  A server that runs tools as another uid keeps those under
the work base /var/tmp/toolsrv.<euid> (0711) instead, in work/ when it has state; one
without state claims a directory of its own under nostate/, held by a lock for the
server's life (serverdir.py), and each start sweeps the nostate/ directories whose lock
is free: servers without state that crashed.  trusted.py walks every directory on the
way with O_NOFOLLOW and refuses one that others could change; the server then refuses to
start and says what is wrong.
"""
from __future__ import annotations

import logging
import os
from typing import Callable

from . import trusted
from .serverdir import ServerDir

log = logging.getLogger("toolsrv")


def work_dir(state: str | None, tool_uid: tuple[int, int] | None,
             nostate: Callable[[ServerDir], None]) -> trusted.Dir:
    """Where the sessions' private cwds go, every directory on the way proved ours; the
    work base's nostate/ is handed to `nostate` as soon as it is open."""
    if state:
        sdir = trusted.open_dir(state, 0o700, "remove it, or choose another with --state")
        try:
            if tool_uid is None:
                return sdir.subdir("work", 0o711)
        finally:
            sdir.close()
    base = trusted.open_dir(work_base(), 0o711)
    try:
        kept = ServerDir(base.subdir("nostate", 0o711))
        nostate(kept)
        return base.subdir("work", 0o711) if state else kept.claim()
    finally:
        base.close()


def work_base() -> str:
    """The work base of a server that runs tools as another uid: /var/tmp/toolsrv.<euid>."""
    return f"/var/tmp/toolsrv.{os.geteuid()}"


def sweep(nostate: ServerDir) -> None:
    """Remove the directories of servers without state that ended without removing them."""
    try:
        n = nostate.sweep()
    except OSError as e:
        log.warning("%s: sweeping the directories of servers gone: %s", nostate.base.path, e)
        return
    if n:
        log.info("swept the session directories of %d server%s without state that "
                 "ended without removing them", n, "" if n == 1 else "s")
