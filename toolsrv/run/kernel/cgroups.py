# toolsrv/run/kernel/cgroups.py — a cgroup per run: limits that do not spill across runs.
#
# Theory of operation.  rlimits are per process (CPU, address space) or per uid (the number
# of processes), and every run of every session shares the uid tools run as: a fork bomb in
# one session would starve the next session's `echo`, and memory has no total bound.  Where
# the launcher may create cgroups (root, or a delegated subtree), each run gets one: the pids
# and memory controllers bound the run as a whole (pids.max; memory.max or, on cgroup v1,
# memory.limit_in_bytes).  The server finds the hierarchies and makes its own base group
# (RunGroups.setup, in the server's PID namespace, where a server's pid means something);
# the launcher (toolsrv/run/init/zygote.py) gets it as an option and makes a group when it prepares
# a run's init, and the init moves itself in (writes 0 to cgroup.procs) before it spawns
# the tool, so every process of the run is born inside.  Once its run's init has been
# reaped (its namespace, and so the group, is empty by then), a group is checked empty and
# kept for a later run (limits unchanged; up to FREE_KEPT), or removed.
#
# Where: cgroup v2 when its pids and memory controllers can be enabled below the server's
# own group (the container's root group, or a delegated one); else cgroup v1's pids and
# memory hierarchies; else none, said in the banner and by `toolsrv sandbox check`, and the
# per-uid RLIMIT_NPROC stays the only process bound.  Groups live in toolsrv-<pid>-<n> (the
# server's pid, one per launcher it starts) under the server's own group in each hierarchy;
# those of servers that died are swept when the next one starts.
#
# All runs together.  The base group carries limits of its own (total_memory, total_pids),
# which bound every run of the server at once whatever each run may have: 16 runs of 4 GiB
# each cannot ask for 64 GiB.  The default total memory is half of what the server may use
# (the host's memory, or its own group's limit when that is lower: default_total_memory);
# `serve --max-run-memory` and `--max-run-pids` set them.  usage() reads what is in use.
from __future__ import annotations

import itertools
import os

ROOT = "/sys/fs/cgroup"
CONTROLLERS = ("pids", "memory")
FREE_KEPT = 16  # empty run groups kept for reuse


def _own_groups() -> dict[str, str]:
    """The calling process's group per controller ("" for v2), from /proc/self/cgroup."""
    out: dict[str, str] = {}
    try:
        with open("/proc/self/cgroup") as f:
            for line in f:
                _, names, path = line.rstrip("\n").split(":", 2)
                for name in names.split(",") if names else [""]:
                    out[name] = path
    except OSError:
        pass
    return out


def _mounts() -> list[tuple[str, str, str]]:
    """(mount point, fs type, options) of every cgroup mount."""
    found = []
    try:
        with open("/proc/self/mounts") as f:
            for line in f:
                _, where, kind, opts, *_ = line.split()
                if kind in ("cgroup", "cgroup2"):
                    found.append((where, kind, opts))
    except OSError:
        pass
    return found


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


class RunGroups:
    """Makes and removes the run groups; `kind` says what is in use ("none" if nothing)."""

    _made = itertools.count(1)  # bases made by this server process

    def __init__(self, pids: int | None = 1024, memory: int | None = 4 << 30,
                 total_pids: int | None = None, total_memory: int | None = None) -> None:
        self.limits = {"pids": pids, "memory": memory}
        self.totals = {"pids": total_pids, "memory": total_memory}
        self.totals_why = ""   # why a total could not be set, if one could not
        self.bases: list[tuple[str, tuple[str, ...]]] = []  # (base dir, its controllers)
        self.version = ""
        self.kind = "none"
        self.why = "not set up"
        self._names = itertools.count(1)
        self._free: list[list[str]] = []  # empty groups kept for the next runs

    @classmethod
    def setup(cls, pids: int | None = 1024, memory: int | None = 4 << 30,
              total_pids: int | None = None, total_memory: int | None = None) -> RunGroups:
        """In the server: find where run groups can go and make this launcher's base, its
        total limits written."""
        groups = cls(pids, memory, total_pids, total_memory)
        if pids is None and memory is None:
            groups.why = "no per-run limit configured"
            return groups
        try:
            groups._setup()
            groups.why = ""
        except OSError as e:
            groups.close()
            groups.why = f"{e.filename or ROOT}: {e.strerror or e}"
        return groups

    def options(self) -> dict:
        """What the launcher needs to make run groups (JSON)."""
        return {"bases": [[b, list(c)] for b, c in self.bases], "version": self.version,
                "limits": self.limits, "kind": self.kind, "why": self.why}   # (totals: ours)

    @classmethod
    def from_options(cls, opts: dict) -> RunGroups:
        """In the launcher: the groups the server set up."""
        groups = cls(**opts.get("limits", {"pids": None, "memory": None}))
        groups.bases = [(b, tuple(c)) for b, c in opts.get("bases", [])]
        groups.version = opts.get("version", "")
        groups.kind, groups.why = opts.get("kind", "none"), opts.get("why", "not set up")
        return groups

    def _setup(self) -> None:
        own = _own_groups()
        mounts = _mounts()
        v2 = [m for m in mounts if m[1] == "cgroup2"]
        if v2 and "" in own and self._try_v2(v2[0][0], own[""]):
            return
        for ctrl in CONTROLLERS:
            where = [m[0] for m in mounts if m[1] == "cgroup" and ctrl in m[2].split(",")]
            if not where or ctrl not in own:
                raise OSError(f"no cgroup v1 {ctrl} hierarchy and no usable cgroup v2")
            self.bases.append((self._base(os.path.join(where[0], own[ctrl].lstrip("/"))), (ctrl,)))
        self.version = "1"
        for base, controllers in self.bases:
            self._bound(base, controllers)
        self.kind = "cgroup v1 " + "+".join(CONTROLLERS)

    def _try_v2(self, mount: str, own: str) -> bool:
        """cgroup v2: usable when our group offers pids and memory and we may enable them."""
        mine = os.path.join(mount, own.lstrip("/"))
        try:
            with open(os.path.join(mine, "cgroup.controllers")) as f:
                offered = f.read().split()
            if not all(c in offered for c in CONTROLLERS):
                return False
            _write(os.path.join(mine, "cgroup.subtree_control"),
                   " ".join("+" + c for c in CONTROLLERS))
            base = self._base(mine)
            _write(os.path.join(base, "cgroup.subtree_control"),
                   " ".join("+" + c for c in CONTROLLERS))
        except OSError:
            return False
        self.bases = [(base, CONTROLLERS)]
        self.version = "2"
        self._bound(base, CONTROLLERS)
        self.kind = "cgroup v2 " + "+".join(CONTROLLERS)
        return True

    def _base(self, parent: str) -> str:
        """A new toolsrv-<pid>-<n> group under parent, after sweeping those of dead servers."""
        for name in os.listdir(parent):
            pid = name.split("-")[1] if name.count("-") == 2 else ""
            if name.startswith("toolsrv-") and pid.isdigit() and not _alive(int(pid)):
                _remove_tree(os.path.join(parent, name))
        if not hasattr(self, "_n"):
            self._n = next(RunGroups._made)
        base = os.path.join(parent, f"toolsrv-{os.getpid()}-{self._n}")
        os.makedirs(base, exist_ok=True)
        return base

    def _bound(self, base: str, controllers: tuple[str, ...]) -> None:
        """Write the totals on a base group (the limits of all its runs together); one
        that cannot be written is left unbounded, and totals_why says why (the per-run
        groups are made all the same)."""
        pids, memory = self.totals["pids"], self.totals["memory"]
        files = []
        if pids is not None and "pids" in controllers:
            files.append(("pids", "pids.max", pids))
        if memory is not None and "memory" in controllers:
            files.append(("memory", "memory.max" if self.version == "2"
                          else "memory.limit_in_bytes", memory))
        for ctrl, name, value in files:
            try:
                _write(os.path.join(base, name), str(value))
            except OSError as e:
                self.totals[ctrl] = None
                self.totals_why = f"{name}: {e.strerror or e}"

    def usage(self) -> dict[str, int]:
        """What all runs use now: {"memory": bytes, "pids": n} (what can be read)."""
        out: dict[str, int] = {}
        files = {"memory": "memory.current" if self.version == "2" else "memory.usage_in_bytes",
                 "pids": "pids.current"}
        for base, controllers in self.bases:
            for ctrl in controllers:
                try:
                    with open(os.path.join(base, files[ctrl])) as f:
                        out[ctrl] = int(f.read().strip())
                except (OSError, ValueError, KeyError):
                    pass
        return out

    def make(self) -> list[str]:
        """A run group (one directory per hierarchy) with the limits written: one a run
        left empty if there is one (making a memory group costs ~0.1 ms), else a new one."""
        if not self.bases:
            return []
        if self._free:
            return self._free.pop()
        name = f"run-{next(self._names)}"
        made: list[str] = []
        try:
            for base, controllers in self.bases:
                path = os.path.join(base, name)
                os.mkdir(path)
                made.append(path)
                for file, value in self._files(controllers):
                    try:
                        _write(os.path.join(path, file), value)
                    except FileNotFoundError:  # no swap accounting: nothing to bound
                        if "swap" not in file and "memsw" not in file:
                            raise
        except OSError:
            self.remove(made)
            raise
        return made

    def _files(self, controllers: tuple[str, ...]) -> list[tuple[str, str]]:
        """The limit files of one hierarchy's group, with their values."""
        pids, memory = self.limits["pids"], self.limits["memory"]
        files = []
        if pids is not None and "pids" in controllers:
            files.append(("pids.max", str(pids)))
        if memory is not None and "memory" in controllers:  # and no swap beyond it
            if self.version == "2":
                files += [("memory.max", str(memory)), ("memory.swap.max", "0")]
            else:
                files += [("memory.limit_in_bytes", str(memory)),
                          ("memory.memsw.limit_in_bytes", str(memory))]
        return files

    def release(self, paths: list[str]) -> None:
        """A group whose every process is gone (its init was reaped, so its namespace is
        empty): kept for the next run while it is empty and few are kept, else removed."""
        if paths and len(self._free) < FREE_KEPT and self._empty(paths):
            self._free.append(paths)
        else:
            self.remove(paths)

    @staticmethod
    def _empty(paths: list[str]) -> bool:
        try:
            for path in paths:
                with open(os.path.join(path, "cgroup.procs"), "rb") as f:
                    if f.read(1):
                        return False
        except OSError:
            return False
        return True

    @staticmethod
    def remove(paths: list[str]) -> bool:
        """rmdir each group; False if one is still busy (not empty yet)."""
        ok = True
        for path in paths:
            try:
                os.rmdir(path)
            except FileNotFoundError:
                pass
            except OSError:
                ok = False
        return ok

    def close(self) -> bool:
        """Remove our groups; False while one is still busy (then call again later)."""
        self.bases = [b for b in self.bases if not _remove_tree(b[0])]
        return not self.bases



def default_total_memory() -> int:
    """Half the memory the server may use: the host's (MemTotal), or its own cgroup's
    limit when that is lower; the default of `serve --max-run-memory`."""
    have = 0
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    have = int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError):
        pass
    for ctrl, path in _own_groups().items():
        if ctrl not in ("", "memory"):
            continue
        for where, kind, opts in _mounts():
            if (kind == "cgroup2") != (ctrl == ""):
                continue
            if kind == "cgroup" and "memory" not in opts.split(","):
                continue
            name = "memory.max" if kind == "cgroup2" else "memory.limit_in_bytes"
            try:
                with open(os.path.join(where, path.lstrip("/"), name)) as f:
                    text = f.read().strip()
            except OSError:
                continue
            if text.isdigit() and 0 < int(text) < (have or 1 << 62):
                have = int(text)
    return (have or 8 << 30) // 2 // 4096 * 4096   # whole pages (v1 rounds down)


def join(paths: list[str]) -> None:
    """Move the calling process into the run group (every hierarchy)."""
    for path in paths:
        _write(os.path.join(path, "cgroup.procs"), "0")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def _remove_tree(path: str) -> bool:
    """rmdir a group and its (empty) children, deepest first; busy ones stay.  True when
    path is gone."""
    try:
        names = [n for n in os.listdir(path) if os.path.isdir(os.path.join(path, n))]
    except FileNotFoundError:
        return True
    except OSError:
        return False
    for n in names:
        _remove_tree(os.path.join(path, n))
    try:
        os.rmdir(path)
    except FileNotFoundError:
        pass
    except OSError:
        return False
    return True
