# toolsrv/run/kernel/libc.py — the libc calls the inits share, and their one error check.
#
# unshare(2) and setns(2) with fixed prototypes (the zygote's PID namespace, a cold init's
# private fs state and the runs' netns); check() turns a call's nonzero return into the
# OSError of its errno.  Each module keeps its own CDLL for the rest (a restype set on one
# CDLL's function does not reach another's).
from __future__ import annotations

import ctypes
import os

_libc = ctypes.CDLL(None, use_errno=True)
unshare = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, use_errno=True)(("unshare", _libc))
setns = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_int,
                         use_errno=True)(("setns", _libc))


def check(ret: int) -> None:
    """Nothing for 0; else the OSError of the call's errno."""
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
