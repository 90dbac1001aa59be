# toolsrv/registry/warmstart.py — which calls start warm, and the warm start they get.
#
# Theory of operation.  A call's resolved command runs a Python script when it is
#   a script whose first line is  #!/…/python3[.N]  or  #!/usr/bin/env python3[.N]
#   (python and python3 alike), or
#   a `cmd` that is the shell command  python3 SCRIPT [ARGS...]  (plain words only).
# plan() finds that out (a script's first line is read once per change of the file) and
# says how a cold start would run it: the interpreter's path (found on the call's PATH
# when the command names it bare, so the path is sys.executable), sys.argv and
# sys.orig_argv.  Anything else it cannot honour gets a reason instead — flags for the
# interpreter, -m or -c — and the call starts cold.  The script itself is never opened,
# stat'ed or followed here (issue 25): `python3 job.py` names a file in the session's cwd,
# which the model can replace, so only the call's confined child reads it (run/init/warm.py),
# and a missing one fails as a cold start's does.  The #! line read is of a tool's own
# executable, in a tools directory (the operator's configuration, as its .meta is), opened
# without blocking and only when it is a regular file.
# The interpreter is keyed by that path, not by the binary behind it: a virtualenv's
# python is a symlink to the system's but has its own prefix, so it gets its own warm
# interpreters.  The tree plans each call (its PATH and cwd are known then) and the runner
# starts it (toolsrv/run/runner.py, toolsrv/run/init/warm.py); describe() is what
# tools/<tool>/meta says of it.
from __future__ import annotations

import os
import re
import stat

_NAME = re.compile(r"python(3(\.[0-9]+)?)?")
_PLAIN = re.compile(r"[A-Za-z0-9._+,:@%/=-]+", re.ASCII)
_shebangs: dict[str, tuple[tuple[int, int, int], list[str] | None]] = {}
SHEBANG_MAX = 256  # the bytes of a #! line the kernel reads (BINPRM_BUF_SIZE, Linux 5.1 on)
# a run's PATH unless its profile names one: run/init/wire.py's, which registry/ may not
# import (tests/registry/test_registry.py holds the two equal)
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"


class Plan:
    """A warm start: the interpreter as a cold start would exec it, and the script."""

    __slots__ = ("python", "argv0", "script", "argv", "orig_argv")

    def __init__(self, python: str, argv0: str, script: str, args: list[str]) -> None:
        self.python, self.argv0, self.script = python, argv0, script
        self.argv = args  # sys.argv: the script as written, then its arguments
        self.orig_argv = [argv0, *args]

    def message(self) -> dict:
        """The part of the spawn request a warm init reads (toolsrv/run/init/warm.py)."""
        return {"script": self.script, "argv": self.argv, "orig_argv": self.orig_argv}


OFF: str | None = None  # why no call starts warm (toolsrv serve --no-warm), or None


def plan(argv: list[str], env: dict[str, str], cwd: str) -> tuple[Plan | None, str | None]:
    """(a warm start, None), or (None, why this call starts cold); (None, None) when the
    command does not run a Python script at all."""
    if len(argv) == 3 and argv[0] == "/bin/sh" and argv[1] == "-c":
        if not all(_PLAIN.fullmatch(w) for w in argv[2].split()):
            return None, None
        import shlex  # only here: it costs the server's start-up half a millisecond
        words = shlex.split(argv[2])
        if not words or not _NAME.fullmatch(os.path.basename(words[0])):
            return None, None
        interp, rest = words[0], words[1:]
        where = cwd
    else:
        line = _shebang(argv[0])
        if line is None:
            return None, None
        interp, rest, where = line[0], [*line[1:], argv[0], *argv[1:]], cwd
    if not rest:
        return None, "the interpreter is given no script"
    if rest[0].startswith("-"):
        return None, f"interpreter flag {rest[0]} is not warmed"
    python = _find(interp, env)
    if python is None:
        return None, f"{interp} not found on the tools' PATH"
    script = rest[0] if os.path.isabs(rest[0]) else os.path.join(where, rest[0])
    # named, never looked at: a script under a session's cwd is the model's to replace (a
    # FIFO, /proc/kmsg, a link to a root-only file), so only the call's child opens it
    return Plan(python, interp, os.path.normpath(script), rest), None


def _shebang(path: str) -> list[str] | None:
    """The interpreter words of a Python script's #! line ([python, flags...]), or None."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
    cached = _shebangs.get(path)
    if cached is not None and cached[0] == stamp:
        return cached[1]
    words: list[str] | None = None
    first = b""
    if stat.S_ISREG(st.st_mode):
        try:   # O_NONBLOCK: a file swapped in after the stat cannot make the read wait
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            try:
                if stat.S_ISREG(os.fstat(fd).st_mode):
                    first = os.read(fd, SHEBANG_MAX)
            finally:
                os.close(fd)
        except OSError:
            pass
    parts = shebang(first)
    if parts and _NAME.fullmatch(os.path.basename(parts[0])):
        words = parts
    if len(_shebangs) > 4096:
        _shebangs.clear()
    _shebangs[path] = (stamp, words)
    return words


def shebang(head: bytes) -> list[str]:
    """The words of the #! line that begins `head` ([interpreter, args...]), as the kernel
    and env(1) run them: `env PROG ...` gives PROG's words, `env -FLAG ...` stays env's;
    [] for a file that has no #! line.  The one rule here and in cli/importmcp.py."""
    first = head[:SHEBANG_MAX].split(b"\n", 1)[0]
    if not first.startswith(b"#!"):
        return []
    words = first[2:].decode("utf-8", "replace").split()
    if words and os.path.basename(words[0]) == "env" and len(words) > 1 \
            and not words[1].startswith("-"):
        words = words[1:]
    return words


def _find(name: str, env: dict[str, str]) -> str | None:
    """The interpreter as a cold start finds it: as written when it has a slash, else the
    first executable of that name on the call's PATH (the path becomes sys.executable)."""
    if "/" in name:
        return name if os.access(name, os.X_OK) else None
    for d in env.get("PATH", DEFAULT_PATH).split(":"):
        candidate = os.path.join(d or ".", name)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def describe(argv: list[str], meta_warm: object, cwd: str | None = None) -> dict:
    """The "start" entry of tools/<tool>/meta: how its calls start, and why not warm."""
    p, why = plan(argv, {"PATH": DEFAULT_PATH}, cwd or "/")
    if p is None and why is None:
        return {"warm": False, "why": "not a Python script"}
    if meta_warm is False:
        return {"warm": False, "why": '"warm": false in the .meta'}
    if OFF is not None:
        return {"warm": False, "why": OFF}
    if p is None:
        return {"warm": False, "why": str(why)}
    return {"warm": True, "python": p.python}
