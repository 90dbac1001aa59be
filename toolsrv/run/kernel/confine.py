# toolsrv/run/kernel/confine.py — the last steps of a run's confinement, the same in every init.
#
# Theory of operation.  Whoever is about to become (or spawn) a tool — the cold init's
# spawning thread (toolsrv/run/init/cold.py) or a warm init's forked child
# (toolsrv/run/init/warm.py) — has taken on what its kind of init takes on first (netns,
# mounts, uid); then, in this order: the cwd, the run's Landlock ruleset (which sets
# no_new_privs first) or no_new_privs alone, then the seccomp filter (which needs
# no_new_privs).  A step that fails raises its OSError with `.step` naming it.
from __future__ import annotations

import ctypes
import os

from toolsrv.run.kernel import landlock
from toolsrv.run.kernel.seccomp import Filter

_libc = ctypes.CDLL(None, use_errno=True)


def confine_rest(cwd: str, ruleset: int, nnp: bool, filt: Filter) -> None:
    """chdir, Landlock (or no_new_privs), seccomp; raises OSError with .step set."""
    step = "cwd: " + cwd
    try:
        os.chdir(cwd)
        if ruleset >= 0:
            step = "landlock"
            landlock.restrict_self(ruleset)  # sets no_new_privs first
        elif nnp:
            step = "no_new_privs"
            if _libc.prctl(landlock.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
                err = ctypes.get_errno()
                raise OSError(err, os.strerror(err))
        if nnp and filt.available:
            step = "seccomp"
            filt.install()
    except OSError as e:
        e.step = step  # type: ignore[attr-defined]
        raise
