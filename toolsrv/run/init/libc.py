# toolsrv/run/init/libc.py — the C library calls the inits make that `os` does not offer.
#
# Theory of operation.  One CDLL of the process's own C library, with errno kept
# (use_errno), and the prototypes the zygote and the inits share: unshare and setns.
# check() turns a call's non-zero return into the OSError of its errno, as `os` raises.
# Standard library only: the warm boot loads it from its memfd (warm.SOURCES).
from __future__ import annotations

import ctypes
import os

libc = ctypes.CDLL(None, use_errno=True)
unshare = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, use_errno=True)(("unshare", libc))
setns = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_int,
                         use_errno=True)(("setns", libc))


def check(ret: int) -> None:
    """Raise the OSError of errno when a C call returned non-zero."""
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
