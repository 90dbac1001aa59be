"""Host facts, and choosing a tool's variant from them.

Theory of operation.  A `Host` answers the questions a variant's `match` or a command's
resolution asks (is this binary on $PATH, does this file exist, is this path executable,
what are GOOS/GOARCH, what is in the environment) and memoises every answer: one Host
serves one pass over the registry, so a thousand tools asking about `jq` cost one lookup,
and the next pass (a reload, or the periodic re-check) builds a fresh Host to see changes.

`choose` applies the spec's rule: the first variant whose conditions all hold decides.
Within one `match`, keys AND; a key's array value ORs its alternatives; a variant without
`match` always holds.  When none holds, the reason lists each variant's failed conditions,
so `tools/errors` says exactly why a tool is hidden on this host.
"""

from __future__ import annotations

import os
import stat
import struct
import sys
from collections.abc import Callable, Mapping, Sequence

from .metafile import Variant

_GOOS = {"linux": "linux", "darwin": "darwin", "win32": "windows", "cygwin": "windows",
         "aix": "aix", "sunos5": "solaris"}
_GOARCH = {"x86_64": "amd64", "amd64": "amd64", "i386": "386", "i486": "386", "i586": "386",
           "i686": "386", "x86": "386", "aarch64": "arm64", "arm64": "arm64",
           "ppc64le": "ppc64le", "ppc64": "ppc64", "s390x": "s390x", "riscv64": "riscv64",
           "loongarch64": "loong64", "mips64": "mips64", "mips": "mips"}


def go_os() -> str:
    """This host's operating system under Go's GOOS name (linux, darwin, freebsd, ...)."""
    plat = sys.platform
    for prefix in ("freebsd", "openbsd", "netbsd", "dragonfly"):
        if plat.startswith(prefix):
            return prefix
    return _GOOS.get(plat, plat)


def go_arch() -> str:
    """This process's architecture under Go's GOARCH name (amd64, arm64, 386, arm, ...)."""
    if hasattr(os, "uname"):        # what platform.machine() returns here, without importing
        m = os.uname().machine.lower()   # platform (its regexes cost start-up time)
    else:
        import platform
        m = platform.machine().lower()
    arch = "arm" if m.startswith("arm") and m != "arm64" else _GOARCH.get(m, m)
    if struct.calcsize("P") == 4:  # a 32-bit interpreter on a 64-bit kernel
        arch = {"amd64": "386", "arm64": "arm"}.get(arch, arch)
    return arch


GOOS_HERE = go_os()
GOARCH_HERE = go_arch()


def _is_exec(path: str) -> bool:
    try:
        return stat.S_ISREG(os.stat(path).st_mode) and os.access(path, os.X_OK)
    except (OSError, ValueError):
        return False


class Host:
    """Memoised answers about this host for one pass; build a new one to see changes.

    Each answer is a *probe* `(kind, arg)` -> value.  While `asked` is a list, every probe
    answered is appended to it: the registry records which probes a tool's outcome
    depended on, and re-evaluates the tool only when one of them changes."""

    def __init__(self, env: Mapping[str, str], goos: str = GOOS_HERE,
                 goarch: str = GOARCH_HERE) -> None:
        self.env = env
        self.goos = goos
        self.goarch = goarch
        path = env.get("PATH")
        # Relative $PATH entries would resolve against the server's cwd: ignore them.
        self.path_dirs = [d for d in (os.defpath if path is None else path).split(":")
                          if d.startswith("/")]
        self.asked: list[tuple[str, str]] | None = None
        self._memo: dict[tuple[str, str], object] = {}

    def probe(self, kind: str, arg: str, record: bool = True) -> object:
        """The answer to probe `kind` ("exec", "which", "exists", "env") about `arg`."""
        key = (kind, arg)
        try:
            v = self._memo[key]
        except KeyError:
            v = self._memo[key] = _PROBES[kind](self, arg)
        if record and self.asked is not None:
            self.asked.append(key)
        return v

    def is_exec(self, path: str, record: bool = True) -> bool:
        """True if `path` is a regular file (after symlinks) that we may execute.
        `record=False` for paths whose directory is watched anyway."""
        return bool(self.probe("exec", path, record))

    def which(self, name: str) -> str | None:
        """The first executable `name` in $PATH's absolute directories, or None."""
        return self.probe("which", name)  # type: ignore[return-value]

    def exists(self, path: str) -> bool:
        """True if `path` exists (a file or a directory, after symlinks)."""
        return bool(self.probe("exists", path))

    def has_binary(self, b: str) -> bool:
        """The `binary` condition: an executable absolute path, or a name on $PATH."""
        return self.is_exec(b) if b.startswith("/") else self.which(b) is not None

    def env_set(self, name: str) -> bool:
        """True if environment variable `name` is set and non-empty."""
        return bool(self.probe("env", name))


_PROBES: dict[str, Callable[[Host, str], object]] = {
    "exec": lambda h, p: _is_exec(p),
    "which": lambda h, n: next((p for p in (os.path.join(d, n) for d in h.path_dirs)
                                if _is_exec(p)), None),
    "exists": lambda h, p: os.path.exists(p),
    "env": lambda h, n: bool(h.env.get(n)),
}


def _describe(key: str, alts: Sequence[str], host: Host) -> str:
    what = "|".join(alts)
    if key == "binary":
        return f"binary {what} not found"
    if key == "file":
        return f"file {what} does not exist"
    if key == "os":
        return f"os is {host.goos}, not {what}"
    if key == "arch":
        return f"arch is {host.goarch}, not {what}"
    if key == "env":
        return f"env {what} unset or empty"
    return f"nenv {what} set"


_HOLDS: dict[str, Callable[[Host, str], bool]] = {
    "binary": Host.has_binary,
    "file": Host.exists,
    "os": lambda h, a: h.goos == a,
    "arch": lambda h, a: h.goarch == a,
    "env": Host.env_set,
    "nenv": lambda h, a: not h.env_set(a),
}


def failed_conditions(match: Mapping[str, Sequence[str]], host: Host) -> list[str]:
    """The conditions of one `match` that do not hold on `host` (empty: it matches)."""
    return [_describe(k, alts, host) for k, alts in match.items()
            if not any(_HOLDS[k](host, a) for a in alts)]


def choose(variants: Sequence[Variant], host: Host) -> tuple[int | None, str]:
    """(index of the first variant that holds, "") or (None, the reason it is hidden)."""
    failures = []
    for i, v in enumerate(variants):
        failed = failed_conditions(v.match, host)
        if not failed:
            return i, ""
        failures.append(f"variant {i}: {', '.join(failed)}")
    return None, "hidden: no variant matches (" + "; ".join(failures) + ")"
