"""The tool registry: `.meta` discovery over the search path, variants, command
resolution, live reload, and the revision that counts changes to what `tools/` serves.

Theory of operation.  Three layers of state, each derived from the one before:
  files    dir -> name -> `MetaFile`: a parsed `MetaDef` (or its error) cached under the
           file's stat key (mtime_ns, size, inode); a file is re-read only when that moves.
  entries  name -> `_Entry`: the outcome for one name: the `Tool` served (or None) and its
           lines for tools/errors (broken, shadowed, hidden, no command); plus the host
           probes ($PATH lookups, files, env) the outcome depended on.
  served   `tools` (the visible tools), `errors`, and their text, rebuilt lazily.
A pass (`load`, `rescan`, `recheck`, a batch of watch events) finds the names that may
have changed (a file's stat key moved, an executable beside it came or went, a probe's
answer changed), re-evaluates only those, and compares the outcome with the previous one.
`revision` grows by one per pass that changed what is served, never otherwise: a touch, or
a re-check that finds the host unchanged, leaves it alone.  `load()` turns revision 0
("nothing loaded") into 1, whatever it finds.  Waiters (`wait_change`) and subscribers
run after each bump;
`on_tool_change` hooks hear each name whose served Tool moved, as it moves.

Name clashes: the first directory of the path holding `<name>.meta` owns the name,
whatever that file's state; the same name further down is listed as shadowed.  Watching
(watch.py) feeds hints into `rescan`; the periodic tick re-checks probes (a binary
installed on $PATH), re-arms watches, and polls whatever cannot be watched.
All methods run on the event loop's thread; none blocks for long except a cold `load()`.
"""

from __future__ import annotations

import asyncio
import bisect
import gc
import logging
import os
import stat
import types
from collections.abc import Callable, Iterable, Mapping

from ..dirs import bundled
from .metafile import MetaDef, MetaFile, read_meta
from .names import check_name, valid_name
from ..record import Record
from .resolve import Command, Tool, make_tool, one_line, resolve
from .variants import Host, choose
from .watch import Follower

log = logging.getLogger(__name__)
Probe = tuple[str, str]
_NO_DEPS: frozenset[Probe] = frozenset()
__all__ = ["Command", "Registry", "Tool", "default_paths"]


class _Entry(Record):
    FIELDS = ("tool", "errors", "meta", "deps")

    def __init__(self, tool: Tool | None, errors: tuple[tuple[str, str], ...],
                 meta: MetaDef | None = None, deps: frozenset[Probe] = _NO_DEPS) -> None:
        self.tool = tool
        self.errors = errors
        self.meta = meta
        self.deps = deps


def default_paths(env: Mapping[str, str]) -> list[str]:
    """The search path: $OLLIE_TOOLS_PATH (colon-separated), else ~/.config/ollie/tools."""
    parts = [p for p in env.get("OLLIE_TOOLS_PATH", "").split(":") if p]
    return parts or [os.path.join(env.get("HOME") or os.path.expanduser("~"),
                                  ".config", "ollie", "tools")]


class Registry:
    """The tools visible on this host, following the search directories live."""

    def __init__(self, paths: list[str] | None = None, *,
                 env: Mapping[str, str] | None = None, poll_interval: float = 2.0,
                 watch: str = "auto") -> None:
        """`paths` None: from `env` (default os.environ).  `watch`: "auto" (inotify when
        available, else polling), "inotify" or "poll"; `poll_interval` paces polling and
        the periodic re-check of $PATH binaries and files."""
        self.env: Mapping[str, str] = os.environ if env is None else env
        home = self.env.get("HOME") or os.path.expanduser("~")
        dirs = paths if paths is not None else default_paths(self.env)
        norm = (os.path.abspath(home + p[1:] if p.startswith("~/") else p) for p in dirs)
        self.dirs: list[str] = list(dict.fromkeys(norm))
        self.poll_interval = poll_interval
        self.watch_mode = watch
        self.revision = 0
        self._files: dict[str, dict[str, MetaFile]] = {d: {} for d in self.dirs}
        self._beside: dict[str, dict[str, tuple[int, int]]] = {d: {} for d in self.dirs}
        self._links: dict[str, set[str]] = {d: set() for d in self.dirs}  # symlinked .meta
        self._dir_errors: dict[str, str] = {}
        self._entries: dict[str, _Entry] = {}
        self._tools: dict[str, Tool] = {}
        self._probes: dict[Probe, object] = {}
        self._dependents: dict[Probe, set[str]] = {}
        self._names: list[str] | None = []  # sorted keys of _tools, None: to sort again
        self._lines: list[str] = []  # tools/index lines, in _names order
        self._erring: dict[str, tuple[tuple[str, str], ...]] = {}  # name -> its error lines
        self._index: str | None = None  # caches, dropped when what they show moves
        self._errors: tuple[list[tuple[str, str]], str] | None = None
        self._waiters: set[asyncio.Future[int]] = set()
        self._subscribers: list[Callable[[int], None]] = []
        self._movers: list[Callable[[str], None]] = []  # told each name whose Tool moved
        self._follower: Follower | None = None
        self._remote: dict[str, dict[str, Tool]] = {}   # source -> the tools it serves
        self._remote_errors: dict[str, list[tuple[str, str]]] = {}   # source -> lines
        self._held: dict[str, Tool] = {}    # a source's tools while it is unreachable

    # --- what is served ---------------------------------------------------------------

    @property
    def tools(self) -> Mapping[str, Tool]:
        """The visible tools by name (a read-only live view)."""
        return types.MappingProxyType(self._tools)

    @property
    def errors(self) -> list[tuple[str, str]]:
        """(file, reason) for every .meta not served, and every unusable directory."""
        return list(self._error_lines()[0])

    def get(self, name: str) -> Tool | None:
        """The visible tool `name`, or None (unknown, hidden, broken, no command); or a
        tool of an import that is unreachable now, not listed, whose calls say why."""
        t = self._tools.get(name)
        if t is None and self._held:
            return self._held.get(name)
        return t

    def why_missing(self, name: str) -> str:
        """Why `name` is not a visible tool, and what to do, in one line: its .meta's error,
        the variants that hide it, its missing command, or the closest names ("" when
        there is nothing more to say than that it is unknown)."""
        e = self._entries.get(name)
        if e is not None and e.tool is None and e.errors:
            why = e.errors[-1][1]
            if e.meta is None:
                return f"its .meta has an error (see tools/errors): {why}"
            if why.startswith("hidden: "):
                return f"hidden on this host (see tools/errors): {why[len('hidden: '):]}"
            return f"not usable (see tools/errors): {why}"
        import difflib
        close = difflib.get_close_matches(name, self._sorted_names(), n=3, cutoff=0.6)
        if close:                             # the nearest, and any as near as they
            best = difflib.SequenceMatcher(None, name, close[0]).ratio()
            close = [c for c in close
                     if difflib.SequenceMatcher(None, name, c).ratio() >= best - 0.1]
            return "did you mean " + " or ".join(close) + "?"
        return ""

    def names(self) -> list[str]:
        """The visible tools' names, sorted (a copy)."""
        return list(self._sorted_names())

    def _sorted_names(self) -> list[str]:
        if self._names is None:
            self._names = sorted(self._tools)
            self._lines = [self._tools[n].index_line for n in self._names]
        return self._names

    def index_text(self) -> str:
        """tools/index: "name<TAB>tier<TAB>description" per visible tool, sorted by name."""
        if self._index is None:
            self._sorted_names()
            self._index = "".join(self._lines)
        return self._index

    def errors_text(self) -> str:
        """tools/errors: "file<TAB>reason" per line, sorted by file."""
        return self._error_lines()[1]

    def _error_lines(self) -> tuple[list[tuple[str, str]], str]:
        if self._errors is None:
            errs = [e for errors in self._erring.values() for e in errors]
            errs += self._dir_errors.items()
            errs += [e for lines in self._remote_errors.values() for e in lines]
            errs.sort()
            self._errors = errs, "".join(f"{one_line(f)}\t{one_line(r)}\n" for f, r in errs)
        return self._errors

    def serve_remote(self, source: str, tools: Mapping[str, Tool],
                     errors: list[tuple[str, str]], held: Mapping[str, Tool] | None = None
                     ) -> bool:
        """Serve `tools` as all that `source` (an import of another host: hosts/) serves,
        in place of what it served before, with its tools/errors lines; bump the revision
        when anything moved.  A name a local .meta serves stays the local tool's.  `held`:
        the tools of a source gone unreachable, found by get() alone (an agent's loaded
        tool stays, and its call fails with the reason) until the source serves again."""
        for name in [n for n, t in self._held.items() if getattr(t, "source", None) == source]:
            del self._held[name]
        old = self._remote.get(source, {})
        changed = False
        for name in set(old) | set(tools):
            was, now = old.get(name), tools.get(name)
            local = self._entries.get(name)
            if local is not None and local.tool is not None:
                continue
            if was is now or (was is not None and now is not None and
                              was.meta_text == now.meta_text):
                if now is not None and was is not None:
                    tools = {**tools, name: was}     # unchanged: the Tool served stays
                continue
            changed = True
            if now is None:
                self._tools.pop(name, None)
            else:
                self._tools[name] = now
            self._names, self._index = None, None
            for fn in self._movers:
                fn(name)
        self._remote[source] = dict(tools)
        if not tools:
            del self._remote[source]
        for name, t in (held or {}).items():
            if name not in self._tools:
                self._held[name] = t
        if self._remote_errors.get(source, []) != errors:
            changed = True
            self._errors = None
            self._remote_errors[source] = list(errors)
            if not errors:
                del self._remote_errors[source]
        if changed:
            self._bump()
        return changed

    # --- passes -----------------------------------------------------------------------

    def load(self) -> None:
        """Scan every search directory (synchronously); the first load makes revision 1."""
        first = self.revision == 0
        if not self._update(None, recheck=True) and first:
            self._bump()

    def rescan(self, hints: Iterable[str] | None = None) -> bool:
        """Re-read what changed: with `hints` (paths of entries in, or of, search
        directories) only those; without, every directory by stat.  True if what tools/
        serves changed (revision was bumped)."""
        return self._update(hints, recheck=False)

    def recheck(self) -> bool:
        """Re-ask the host probes tools depend on ($PATH binaries, files, env); re-evaluate
        the tools whose answers moved.  True if revision was bumped."""
        return self._update((), recheck=True)

    def _update(self, hints: Iterable[str] | None, recheck: bool) -> bool:
        collecting = gc.isenabled()
        gc.disable()  # a pass allocates many acyclic objects: collecting meanwhile is waste
        try:
            return self._pass(hints, recheck)
        finally:
            if collecting:
                gc.enable()

    def _pass(self, hints: Iterable[str] | None, recheck: bool) -> bool:
        host = Host(self.env)
        dirty: set[str] = set()
        changed = False
        dirset = self._files.keys()
        for h in (self.dirs if hints is None else hints):
            if h in dirset:
                names, err = self._scan_dir(h)
                dirty |= names
                if self._dir_errors.get(h, "") != err:
                    changed = True
                    self._errors = None
                    self._dir_errors[h] = err
                    if not err:
                        del self._dir_errors[h]
            parent, name = os.path.split(h)
            if hints is not None and name and parent in dirset:
                dirty |= self._scan_entry(parent, name)
        if recheck:  # also re-stat symlinked .meta files: their targets are not watched
            for d, links in self._links.items():
                for fname in list(links):
                    dirty |= self._scan_entry(d, fname)
            for probe, names in self._dependents.items():
                if host.probe(probe[0], probe[1], record=False) != self._probes[probe]:
                    dirty |= names
        for name in dirty:
            changed |= self._reevaluate(name, host)
        if changed:
            self._bump()
        return changed

    def _scan_dir(self, d: str) -> tuple[set[str], str]:
        """List `d` afresh: (names whose .meta or beside-executable moved, the reason `d`
        is unusable or "")."""
        old, old_beside = self._files[d], self._beside[d]
        new: dict[str, MetaFile] = {}
        others: dict[str, os.DirEntry[str]] = {}
        links = self._links[d] = set()
        err = ""
        try:
            with os.scandir(d) as it:
                for e in it:
                    if e.name.endswith(".meta"):
                        name = e.name[:-5]
                        try:
                            st = e.stat()
                        except OSError:
                            continue  # vanished, or a dangling symlink: absent
                        if e.is_symlink():
                            links.add(e.name)
                        f = old.get(name)
                        key = (st.st_mtime_ns, st.st_size, st.st_ino)
                        new[name] = f if f is not None and f.key == key else \
                            read_meta(e.path, st)
                    else:
                        others[e.name] = e
        except (FileNotFoundError, NotADirectoryError) as e:
            if isinstance(e, NotADirectoryError) or os.path.lexists(d):
                err = "not a directory"
        except OSError as e:
            err = f"cannot list: {e.strerror}"
        beside = {n: k for n in new.keys() & others.keys()
                  if (k := _beside_key(others[n])) is not None}
        dirty = {n for n in new.keys() | old.keys() if new.get(n) is not old.get(n)}
        dirty |= {n for n in beside.keys() | old_beside.keys()
                  if beside.get(n) != old_beside.get(n)}
        self._files[d], self._beside[d] = new, beside
        return dirty, err

    def _scan_entry(self, d: str, fname: str) -> set[str]:
        """Re-examine one entry of `d`; return the tool names it may affect."""
        path = os.path.join(d, fname)
        files, beside = self._files[d], self._beside[d]
        if not fname.endswith(".meta"):  # maybe the executable beside fname.meta
            if fname not in files:
                return set()
            key = _beside_key(path)
            if key == beside.get(fname):
                return set()
            _put(beside, fname, key)
            return {fname}
        name = fname[:-5]
        try:
            st = os.stat(path)
        except OSError:
            beside.pop(name, None)
            self._links[d].discard(fname)
            return {name} if files.pop(name, None) is not None else set()
        if os.path.islink(path):
            self._links[d].add(fname)
        else:
            self._links[d].discard(fname)
        _put(beside, name, _beside_key(os.path.join(d, name)))
        f = files.get(name)
        if f is not None and f.key == (st.st_mtime_ns, st.st_size, st.st_ino):
            return set()
        files[name] = read_meta(path, st)
        return {name}

    def _reevaluate(self, name: str, host: Host) -> bool:
        """Recompute the entry of `name`; True if what is served changed."""
        old = self._entries.get(name)
        asked: list[Probe] = []
        host.asked = asked
        new = self._evaluate(name, host, old)
        host.asked = None
        deps = frozenset(asked) if asked else _NO_DEPS
        if old is not None and old.deps:
            for p in old.deps - deps:
                names = self._dependents[p]
                names.discard(name)
                if not names:
                    del self._dependents[p], self._probes[p]
        for p in deps:
            self._dependents.setdefault(p, set()).add(name)
            self._probes[p] = host.probe(p[0], p[1], record=False)
        if new is None:
            self._entries.pop(name, None)
        else:
            new.deps = deps
            self._entries[name] = new
        return self._serve(name, old, new)

    def _serve(self, name: str, old: _Entry | None, new: _Entry | None) -> bool:
        """Make the served state follow `name`'s new entry; True if it changed."""
        old_tool = old.tool if old else None
        new_tool = new.tool if new else None
        tool_moved = old_tool is not new_tool and old_tool != new_tool
        if tool_moved:
            if new_tool is None:
                del self._tools[name]
            else:
                self._tools[name] = new_tool
            if old_tool is None or new_tool is None:
                self._names = None  # membership moved: sort again when next asked
            elif self._names is not None:  # same place, new line
                self._lines[bisect.bisect_left(self._names, name)] = new_tool.index_line
            self._index = None
            for fn in self._movers:
                fn(name)
        old_errs, new_errs = old.errors if old else (), new.errors if new else ()
        if old_errs != new_errs:
            self._errors = None
            if new_errs:
                self._erring[name] = new_errs
            else:
                del self._erring[name]
        return tool_moved or old_errs != new_errs

    def _evaluate(self, name: str, host: Host, old: _Entry | None) -> _Entry | None:
        fname = name + ".meta"
        owners = [d for d in self.dirs if name in self._files[d]]
        if not owners:
            return None
        d = owners[0]
        path = os.path.join(d, fname)
        errs = [(os.path.join(o, fname), f"shadowed by {path}") for o in owners[1:]] \
            if len(owners) > 1 else []
        f = self._files[d][name]
        if not valid_name(name):
            try:
                check_name(name, "tool")
            except ValueError as e:
                return _Entry(None, tuple(errs + [(path, str(e))]))
        if f.meta is None:
            return _Entry(None, tuple(errs + [(path, f.error)]))
        meta = f.meta
        variant, reason = choose(meta.variants, host) if meta.variants else (None, "")
        fields, extra = meta.effective(variant)
        command = None
        if not reason:
            command, reason = resolve(name, d, fields.get("cmd"), host,
                                      beside=name in self._beside[d])
        if command is None or (reason := self._no_profile(extra.get("sandbox"), host)):
            return _Entry(None, tuple(errs + [(path, reason)]), meta)
        if old is not None and old.meta is meta and old.tool is not None \
                and old.tool.variant == variant and old.tool.command == command:
            return _Entry(old.tool, tuple(errs), meta)
        tool = make_tool(name, d, path, fields, extra, command, variant)
        return _Entry(tool, tuple(errs), meta)

    def _no_profile(self, name: object, host: Host) -> str:
        """Why the sandbox profile a .meta names cannot be found, or "": the places
        run/sandbox.py's load_profile looks (the user's, then the shipped), probed so
        that the tool is served once the profile is written."""
        if not isinstance(name, str):
            return ""
        home = self.env.get("HOME") or os.path.expanduser("~")
        where = (os.path.join(home, ".config", "ollie", "sandbox"), bundled.PROFILES)
        if "/" not in name and not name.startswith(".") and \
                any(host.exists(os.path.join(w, name + ".yaml")) for w in where):
            return ""
        return (f"sandbox: profile {name}: not found (looked for {name}.yaml in "
                f"{where[0]} and {where[1]}; write it there, or name another)")

    def _bump(self) -> None:
        self.revision += 1
        rev = self.revision
        waiters, self._waiters = self._waiters, set()
        for fut in waiters:
            if not fut.done():
                fut.set_result(rev)
        for fn in list(self._subscribers):
            try:
                fn(rev)
            except Exception:
                log.exception("registry subscriber failed")

    # --- waiting and watching ---------------------------------------------------------

    async def wait_change(self, seen: int, timeout: float) -> int:
        """Return the revision as soon as it differs from `seen`, or after `timeout`
        seconds the current (unchanged) one.  Cancelling the caller cancels the wait."""
        if self.revision != seen:
            return self.revision
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._waiters.add(fut)
        try:
            async with asyncio.timeout(timeout):
                await fut
        except TimeoutError:
            pass
        finally:
            self._waiters.discard(fut)
        return self.revision

    def subscribe(self, fn: Callable[[int], None]) -> Callable[[], None]:
        """Call `fn(revision)` after each bump; returns a function that unsubscribes."""
        self._subscribers.append(fn)
        return lambda: self._subscribers.remove(fn) if fn in self._subscribers else None

    def on_tool_change(self, fn: Callable[[str], None]) -> None:
        """Call `fn(name)` whenever the Tool served as `name` moves (added, changed or
        gone), during the pass that moves it, before the bump (search.py's index)."""
        self._movers.append(fn)

    async def start(self) -> None:
        """Start following the disk (inotify, else polling) and the periodic re-check of
        host probes; loads first if `load()` was not called.  Watches are armed before
        that scan, so nothing written meanwhile is missed."""
        if self._follower is not None:
            return
        self._follower = Follower(self.dirs, self._update, self.watch_mode, self.poll_interval)
        self._follower.start()
        if self.revision == 0:
            self.load()
        else:
            self._update(None, recheck=True)

    async def close(self) -> None:
        """Stop following the disk; the loaded state stays readable."""
        if self._follower is not None:
            await self._follower.close()
            self._follower = None


def _beside_key(e: os.DirEntry[str] | str) -> tuple[int, int] | None:
    """(mode, inode) of a regular file (after symlinks) that may be run beside a .meta."""
    try:
        st = e.stat() if isinstance(e, os.DirEntry) else os.stat(e)
    except OSError:
        return None
    return (st.st_mode, st.st_ino) if stat.S_ISREG(st.st_mode) else None


def _put(d: dict[str, tuple[int, int]], k: str, v: tuple[int, int] | None) -> None:
    if v is None:
        d.pop(k, None)
    else:
        d[k] = v
