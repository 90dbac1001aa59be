# toolsrv/run/ownscript.py — a Python tool's own executable, compiled once per change by the
# server, and only when no tool can change it (issue 25).
#
# Theory of operation.  A warm call's child reads its script itself, under its own uid and
# Landlock ruleset, and compiles it (run/init/warm.py): 150 lines cost it 4 ms a call.  The
# server may save that work for one kind of script only: a tool's own executable, beside
# its .meta in a tools directory, which is the operator's configuration (the registry
# reads the .meta there already).  `ScriptCache.compiled` reads and compiles such a script,
# and only when all of these hold, else the child compiles it itself:
#   - the script is the tool's own executable (a `#!` tool: its directory is the tool's);
#   - no grant of the call's profile that is writable (rw, rwx) contains that directory,
#     nor the directory the executable really lives in (the session's cwd, above all);
#   - that file and both directories are owned by root or the server's uid and writable by
#     neither group nor others (so the tools' uid cannot replace them);
#   - the file, opened with O_NONBLOCK and checked with fstat, is a regular file of at most
#     MAX_COMPILED bytes.
# A `python3 job.py` in the session's cwd is never looked at here: the server does not open,
# stat or follow a path a tool can change.  The child uses the bytecode only if the file
# it read itself holds the very source compiled (run/init/warm.py), so a stale or racing
# entry costs a compile, never a wrong run.
from __future__ import annotations

import marshal
import os
import stat
import sys

MAX_COMPILED = 256 << 10  # bytes of a script the server compiles for its warm calls
# the bytecode magic (importlib.util would cost the start-up 7 ms to import for this)
MAGIC = sys.modules["_frozen_importlib_external"].MAGIC_NUMBER.hex()


def _operators(st: os.stat_result) -> bool:
    """Owned by root or us, and writable by no one else."""
    return st.st_uid in (0, os.geteuid()) and not st.st_mode & 0o022


def _under(path: str, top: str) -> bool:
    top = top.rstrip("/") or "/"
    return path == top or path.startswith(top + "/") or top == "/"


class ScriptCache:
    """(source + bytecode, the source's length) of tools' own scripts, by path and stamp."""

    def __init__(self, limit: int = 256) -> None:
        self.limit = limit
        self.codes: dict[str, tuple[tuple, bytes, int]] = {}

    def compiled(self, script: str, tool_dir: str | None, writable: list[str]
            ) -> tuple[bytes, int] | None:
        """The compiled script, or None (the child compiles it); see the module comment."""
        if not tool_dir or os.path.dirname(script) != os.path.normpath(tool_dir):
            return None
        try:
            real_dir = os.path.dirname(os.path.realpath(script))
            dirs = {os.path.normpath(tool_dir), real_dir}
            if any(_under(d, w) for d in dirs for w in writable):
                return None
            if not all(_operators(os.stat(d)) for d in dirs):
                return None
            fd = os.open(script, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or not _operators(st) or st.st_size > MAX_COMPILED:
                return None
            stamp = (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)
            cached = self.codes.get(script)
            if cached is not None and cached[0] == stamp:
                return cached[1], cached[2]
            source = b""
            while len(source) <= st.st_size and (more := os.read(fd, MAX_COMPILED + 1)):
                source += more
            code = marshal.dumps(compile(source, script, "exec", dont_inherit=True, optimize=0))
        except (OSError, SyntaxError, ValueError):
            return None
        finally:
            os.close(fd)
        if len(self.codes) > self.limit:
            self.codes.clear()
        self.codes[script] = (stamp, source + code, len(source))
        return source + code, len(source)
