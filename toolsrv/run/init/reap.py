# toolsrv/run/init/reap.py — how an init ends a run: reap the tool, then everything left of it.
#
# Theory of operation.  An init is the ancestor of every process of its run (orphans are
# reparented to it).  Once the tool has ended, what is left is killed and reaped until
# waitpid says no child is left: with a PID namespace, kill(-1) from its pid 1 reaches
# every other process of the namespace at once (atomic against fork), and no child left
# means no process left.  Without one, the init is a subreaper and kills its children,
# round after round, from /proc/<pid>/task/<tid>/children.  kill(-1) must never be sent
# without a namespace: outside one it reaches every process the uid may signal.  The cold
# init (toolsrv/run/init/cold.py) and the warm one (toolsrv/run/init/warm.py) share this.
from __future__ import annotations

import os
import signal


def reap_until(tool: int, pidns: bool) -> int:
    """Reap every child (orphans come to us) until the tool has ended, then end the rest;
    the tool's wait status, once nothing of the run is left but us."""
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            return 0
        if pid == tool:
            break
    if not pidns:
        kill_below()
        return status
    while True:
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:  # a child is still running:
                os.kill(-1, signal.SIGKILL)  # from a namespace's pid 1: every other process
                while True:
                    os.waitpid(-1, 0)
        except ProcessLookupError:
            pass
        except ChildProcessError:  # no child left, so no process: each has us as ancestor
            return status


def kill_below() -> None:
    """Without a PID namespace: kill what is left below us (orphans come to a subreaper),
    round after round, until nothing is."""
    me = os.getpid()
    while True:
        try:
            with open(f"/proc/{me}/task/{me}/children", "rb") as f:
                left = [int(p) for p in f.read().split()]
        except OSError:
            left = []
        if not left:
            return
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        for _ in left:
            try:
                os.waitpid(-1, 0)
            except ChildProcessError:
                break
