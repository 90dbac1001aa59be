"""Sessions and agents: the state behind session/, and its persistence.

A Session has a name, a working directory (`cwd`) and a sandbox profile
name; it holds Agents, each with the ordered list of tools it has loaded and
a log bounded in bytes (LOG_BYTES, kept as one bytearray whose oldest whole
lines drop: memory per agent is known whatever the lines' length).  Every session and agent carries a serial number that is new
each time it is created, so a removed and re-created session gets new qid
paths.

By default a session's cwd is a private directory made for it under
`work_dir` and removed with it; a cwd set by the client is used as it is and
never removed.  When tools run as another uid (the server runs as root),
the private directory is chowned to that uid so the tool can use it.  The
work directory is a trusted.Dir (proved ours, see trusted.py): private
directories are made, chowned and removed through its fd, and a removal
never follows a symlink a tool planted.

The store saves itself to `<state_dir>/state.json` after every change, with
an atomic write (temp file, fsync, rename): a crash or a full disk leaves
the previous state intact.  In the server the writes happen off the event
loop (start_writer, _Writer): a change waits for the next write, which takes
every change made while the one before it was under way (a group commit), and
the reply to the client that made it comes after that write (a flush does not
cancel that wait: server.py).  What a change does once saved (set_cwd removing
the private directory it replaced) hangs on the write, not on that reply.
Without a writer (tests, tools) each change is written at once.  Every change
(a creation, a setting, a ctl load or unload, a removal) that cannot be saved
(disk full) is undone and fails with the reason, so what a client was told is
what a restart will restore (other clients may see a change while its write
is under way).  A removal is undone the same way: what cannot be taken back
(its runs killed, its private directory removed) happens only once the
removal is saved, and its name cannot be taken again until then.  Undoing
goes newest change first.  On start a corrupt file is moved aside to
`state.json.corrupt-<time>` and reported, never silently dropped; temp files
left by a server killed during a save (`state.json.tmp.<pid>`) are removed
(sweep_temp: the state directory is locked by then, so no live server owns one).

A temporary session (made with DMTMP in the Tcreate's perm: the MCP face makes its
own so) is never saved: it lives as long as the server or until removed, and is
counted against a limit of its own (max_sessions temporary ones besides max_sessions
saved ones), so clients that make temporary sessions never use up another client's.
"""
from __future__ import annotations

import asyncio
import errno
import itertools
import json
import logging
import os
import time
from typing import Any, Awaitable, Callable, TypeVar

from ... import errors as E
from ...dirs import trusted
from ...errors import P9Error, busy, fit, quoting
from ...registry.names import valid_name
from ...record import Plain

log = logging.getLogger("toolsrv.sessions")

LOG_BYTES = 32 * 1024  # an agent's log: its newest lines, at most this many bytes
LOG_LINE_MAX = 1024
_serials = itertools.count(1)
_last_stamp: list = [0, ""]


def _stamp() -> str:
    """The log's time stamp, formatted once per second."""
    now = int(time.time())
    if now != _last_stamp[0]:
        _last_stamp[:] = now, time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(now))
    return _last_stamp[1]


class Agent(Plain):
    FIELDS = ("name", "session", "serial", "loaded", "log", "extra", "alive")

    def __init__(self, name: str, session: Session, serial: int | None = None,
                 loaded: list[str] | None = None, log: bytearray | None = None,
                 extra: dict[str, Any] | None = None, alive: bool = True) -> None:
        self.name = name
        self.session = session
        self.serial = next(_serials) if serial is None else serial
        self.loaded: list[str] = [] if loaded is None else loaded
        self.log = bytearray() if log is None else log   # newline-ended lines, oldest first
        self.extra: dict[str, Any] = {} if extra is None else extra  # per-tool call state
        self.alive = alive                                             # (agent.py)
        self.node: Any = None     # its directory in the tree, kept by fs.py (not state)

    def note(self, line: str) -> None:
        """Append one line to the agent's log, stamped with the time (at most
        LOG_LINE_MAX characters); drop the oldest whole lines past LOG_BYTES."""
        line = " ".join(line.split())
        if len(line) > LOG_LINE_MAX:
            line = line[:LOG_LINE_MAX - 3] + "..."
        buf = self.log
        buf += f"{_stamp()} {line}\n".encode(errors="replace")
        over = len(buf) - LOG_BYTES
        if over > 0:  # bytearray deletes from the front in place, without a copy
            del buf[:buf.index(b"\n", over - 1) + 1]


class Session(Plain):
    FIELDS = ("name", "cwd", "sandbox", "private_cwd", "serial", "agents", "alive",
              "temporary")

    def __init__(self, name: str, cwd: str, sandbox: str = "default", private_cwd: bool = True,
                 serial: int | None = None, agents: dict[str, Agent] | None = None,
                 alive: bool = True, temporary: bool = False) -> None:
        self.name = name
        self.cwd = cwd
        self.sandbox = sandbox
        self.private_cwd = private_cwd
        self.serial = next(_serials) if serial is None else serial
        self.agents: dict[str, Agent] = {} if agents is None else agents
        self.alive = alive
        self.temporary = temporary   # never saved (DMTMP at its creation)
        self.node: Any = None     # its directory in the tree, kept by fs.py (not state)


_dumps = json.JSONEncoder().encode    # ASCII: a path with undecodable bytes (\udcxx) too


def _entry(s: Session) -> dict:
    """A session's entry in state.json."""
    return {"name": s.name, "cwd": s.cwd, "private_cwd": s.private_cwd, "sandbox": s.sandbox,
            "agents": [{"name": a.name, "loaded": list(a.loaded)} for a in s.agents.values()]}


T = TypeVar("T")


def _write_file(state_dir: str | None, path: str, data: bytes) -> BaseException | None:
    """state.json replaced atomically by `data` (temp file, fsync, rename); the error
    if that failed (the old file is then intact and no temp file is left)."""
    tmp = f"{path}.tmp.{os.getpid()}"
    try:
        os.makedirs(state_dir, mode=0o700, exist_ok=True)  # type: ignore[arg-type]
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except Exception as e:           # OSError mostly; anything else must not lose a waiter
        try:
            os.unlink(tmp)
        except OSError:
            pass
        return e
    return None


Undo = Callable[[], None]


def _undo_all(undos: Any) -> None:
    """Undo unsaved changes, newest first (a later change may rest on an earlier one)."""
    for undo in reversed(list(undos)):
        if undo is not None:
            try:
                undo()
            except Exception:
                log.exception("state: undoing an unsaved change failed")


def _settle(err: str | None, value: T, done: Undo | None) -> T:
    if err is not None:
        raise P9Error(f"input/output error: state not saved: {err}")
    if done is not None:
        done()
    return value


class _Writer:
    """Writes the store's state one write at a time, off the event loop.  A change asked
    for while a write is under way goes out, with every other such change, in the next
    write; each asker gets that write's outcome: None, or the error.  When a write fails
    the changes in it are undone here, before the next write is encoded, so no change
    whose maker was told it failed reaches the disk."""

    def __init__(self, store: "SessionStore") -> None:
        self.store = store
        self.waiting: list[tuple[asyncio.Future[str | None], Undo | None]] = []
        self.task: asyncio.Task | None = None

    def request(self, undo: Undo | None) -> asyncio.Future[str | None]:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[str | None] = loop.create_future()
        self.waiting.append((fut, undo))
        if self.task is None:
            self.task = loop.create_task(self._run())
        return fut

    async def _run(self) -> None:
        try:
            while self.waiting:
                group, self.waiting = self.waiting, []
                err: str | None = "interrupted"
                try:
                    err = await self.store._write_now()
                finally:
                    if err is not None:
                        _undo_all(u for _, u in group)
                    for f, _ in group:
                        if not f.done():
                            f.set_result(err)
        finally:
            self.task = None

    async def drain(self) -> None:
        while self.task is not None:
            await asyncio.shield(self.task)


class SessionStore:
    """All sessions of the server, saved to disk after every change."""

    def __init__(self, state_dir: str | None, work_dir: str | trusted.Dir,
                 tool_uid: tuple[int, int] | None = None,
                 check_profile: Callable[[str], None] | None = None,
                 max_sessions: int = 10000, max_agents: int = 256) -> None:
        self.state_dir = state_dir
        self._work = work_dir if isinstance(work_dir, trusted.Dir) else None
        self.work_dir = work_dir if isinstance(work_dir, str) else work_dir.path
        self.tool_uid = tool_uid
        self.check_profile = check_profile
        self.max_sessions = max_sessions
        self.max_agents = max_agents
        self.sessions: dict[str, Session] = {}
        self.save_error: str | None = None
        self.on_remove_agent: list[Callable[[Agent], object]] = []
        self.on_remove_session: list[Callable[[Session], None]] = []   # after its agents'
        self.mtime = int(time.time())
        self._encoded: dict[str, tuple[Session, bytes]] = {}   # see _encode
        self._writer: _Writer | None = None
        self._going: set[tuple] = set()   # removals being saved: their names not yet free

    # -- sessions --
    def create(self, name: str, temporary: bool = False) -> Session | Awaitable[Session]:
        """A new session; a temporary one is never saved and has a limit of its own."""
        if not valid_name(name):
            raise P9Error(E.EBADNAME)
        if name in self.sessions:
            raise P9Error(E.EEXIST)
        if ("s", name) in self._going:
            raise P9Error(busy(f"session {name} is being removed", then="try again"))
        if self._count(temporary) >= self.max_sessions:
            raise P9Error(busy(f"too many {'temporary ' if temporary else ''}sessions",
                               self.max_sessions))
        s = Session(name, self._make_private_cwd(name), temporary=temporary)
        self.sessions[name] = s

        def undo() -> None:
            if self.sessions.get(name) is s:
                del self.sessions[name]
                for a in list(s.agents.values()):
                    self._drop_agent(a)
                s.alive = False
                self.remove_private_cwd(s.cwd)
        return self._then(self._commit(s, undo), s)

    def _count(self, temporary: bool) -> int:
        if temporary:
            return self.temporaries
        return len(self.sessions) - self.temporaries

    @property
    def temporaries(self) -> int:
        return sum(1 for s in self.sessions.values() if s.temporary)

    def remove(self, name: str) -> None | Awaitable[None]:
        """Remove a session: gone from the tree at once; once that is saved its agents'
        runs are killed and its private cwd removed; unsaved, it is back as it was."""
        s = self.sessions.pop(name, None)
        if s is None:
            raise P9Error(E.ENOTFOUND)
        key = ("s", name)
        self._going.add(key)

        def undo() -> None:
            self._going.discard(key)
            if name not in self.sessions:
                self.sessions[name] = s

        def done() -> None:
            self._going.discard(key)
            for a in list(s.agents.values()):
                self._drop_agent(a)
            s.alive = False
            for fn in self.on_remove_session:
                try:
                    fn(s)
                except Exception:
                    log.exception("session removal hook failed")
            if s.private_cwd:
                self.remove_private_cwd(s.cwd)
        return self._then(self._commit(s, undo), None, done)

    def set_cwd(self, s: Session, path: str) -> None | Awaitable[None]:
        if not os.path.isabs(path) or not os.path.isdir(path):
            # a path's words never decide the errno (errors.quoting)
            raise quoting("cwd: no such directory: ", path, "no such", "")
        path = os.path.realpath(path)
        old = s.cwd, s.private_cwd
        mine = os.path.realpath(s.cwd)
        moved = s.private_cwd and mine != path
        # A cwd inside the session's own private one: that directory now holds the new cwd,
        # so it stays (left behind with the session, not removed under the tools' feet).
        drop = moved and not path.startswith(mine.rstrip("/") + "/")
        new = s.cwd, s.private_cwd = path, s.private_cwd and not moved

        def undo() -> None:
            if (s.cwd, s.private_cwd) == new:
                s.cwd, s.private_cwd = old

        def done() -> None:
            if drop:
                self.remove_private_cwd(old[0])
        return self._then(self._commit(s, undo), None, done)

    def set_sandbox(self, s: Session, name: str) -> None | Awaitable[None]:
        if not valid_name(name):
            raise P9Error(fit("sandbox: illegal profile name: ", repr(name), ""))
        if self.check_profile:
            try:
                self.check_profile(name)
            except Exception as e:   # the profile's own error names what is wrong
                raise P9Error(fit("sandbox: ", str(e))) from None   # the word kept whole
        old, s.sandbox = s.sandbox, name

        def undo() -> None:
            if s.sandbox == name:
                s.sandbox = old
        return self._then(self._commit(s, undo), None)

    # -- agents --
    def create_agent(self, s: Session, name: str) -> Agent | Awaitable[Agent]:
        if not valid_name(name):
            raise P9Error(E.EBADNAME)
        if name in s.agents:
            raise P9Error(E.EEXIST)
        if ("a", s.serial, name) in self._going:
            raise P9Error(busy(f"agent {name} is being removed", then="try again"))
        if len(s.agents) >= self.max_agents:
            raise P9Error(busy(f"too many agents in session {s.name}", self.max_agents))
        a = Agent(name, s)
        s.agents[name] = a

        def undo() -> None:
            if s.agents.get(name) is a:
                del s.agents[name]
                self._drop_agent(a)
        return self._then(self._commit(s, undo), a)

    def remove_agent(self, s: Session, name: str) -> None | Awaitable[None]:
        """Remove an agent: as remove(), its runs killed once the removal is saved."""
        a = s.agents.pop(name, None)
        if a is None:
            raise P9Error(E.ENOTFOUND)
        key = ("a", s.serial, name)
        self._going.add(key)

        def undo() -> None:
            self._going.discard(key)
            if name not in s.agents:
                s.agents[name] = a

        def done() -> None:
            self._going.discard(key)
            self._drop_agent(a)
        return self._then(self._commit(s, undo), None, done)

    def _drop_agent(self, a: Agent) -> None:
        a.alive = False
        for fn in self.on_remove_agent:
            try:
                fn(a)
            except Exception:
                log.exception("agent removal hook failed")

    # -- private working directories --
    def work(self) -> trusted.Dir:
        """The work directory, opened and proved ours on first use when given as a path."""
        if self._work is None:
            self._work = trusted.open_dir(self.work_dir, 0o711)
        return self._work

    def _make_private_cwd(self, name: str) -> str:
        try:
            work = self.work()
            for _ in range(100):   # a directory of an earlier server with our pid: next name
                entry = f"{name}.{os.getpid()}.{next(_serials)}"
                try:
                    path = work.mkdir(entry, 0o700)
                    break
                except FileExistsError:
                    continue
            else:
                raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST))
            if self.tool_uid is not None:
                work.chown(entry, *self.tool_uid)
        except (OSError, trusted.Untrusted) as e:
            why = getattr(e, "strerror", None) or str(e)
            log.error("session %s: cannot make its directory in %s: %s", name, self.work_dir, why)
            raise P9Error(f"input/output error: session directory: {why}") from None
        return path

    def close(self) -> None:
        """Close the work directory's fd (the server is stopping)."""
        if self._work is not None:
            self._work.close()

    def remove_private_cwd(self, path: str) -> None:
        """Remove a private cwd and all in it (through the work directory's fd when it is
        there), never following a symlink."""
        parent, entry = os.path.split(path)
        if self._work is not None and parent == self._work.path:
            self._work.remove(entry)
        else:
            trusted.remove_path(path)

    # -- persistence --
    def _path(self) -> str | None:
        return os.path.join(self.state_dir, "state.json") if self.state_dir else None

    def snapshot(self) -> dict:
        return {"version": 1, "sessions": [_entry(s) for s in self.sessions.values()
                                           if not s.temporary]}

    def _encode(self) -> bytes:
        """snapshot() as JSON, re-encoding only the sessions changed since the last save.

        Each session's entry is kept encoded, with the Session it was made from; a save
        names the session it changed (save(s)) and only that entry is made again, so a
        change costs a join, not an encoding of every session (at 1,000 sessions x 4
        agents x 10 tools the whole encoding took 70 ms of the event loop)."""
        done, parts = self._encoded, []
        for s in self.sessions.values():
            if s.temporary:
                continue
            got = done.get(s.name)
            if got is None or got[0] is not s:
                got = done[s.name] = (s, _dumps(_entry(s)).encode())
            parts.append(got[1])
        if len(done) > len(parts):                   # removed sessions
            for k in [k for k in done if k not in self.sessions]:
                del done[k]
        return b'{"version": 1, "sessions": [' + b", ".join(parts) + b"]}"

    # -- saving: at once, or by the writer --
    def start_writer(self) -> None:
        """From now on (on this event loop) changes are written by a task, off the loop."""
        self._writer = _Writer(self)

    async def stop_writer(self) -> None:
        """Wait for the writes asked for, then write at once again."""
        w, self._writer = self._writer, None
        if w is not None:
            await w.drain()

    def change(self, s: Session, undo: Undo, done: Undo | None = None) -> None | Awaitable[None]:
        """Save a change of `s` made by the caller (a ctl load or unload): None once saved
        (then `done()`), or raise the save's error after `undo()`; with a writer, an
        awaitable of that."""
        return self._then(self._commit(s, undo), None, done)

    def save(self, changed: Session | None = None) -> bool:
        """Write the state now (with a writer running, ask it and answer True); on
        failure keep the old file, log, return False.  `changed` as for _commit."""
        r = self._commit(changed)
        return True if isinstance(r, asyncio.Future) else r is None

    def _commit(self, changed: Session | None, undo: Undo | None = None
                ) -> str | None | asyncio.Future[str | None]:
        """Mark `changed` (its entry is encoded again; None: every entry), then write, at
        once or by the writer: the error (after `undo()`) or None, or a future of that."""
        self.mtime = int(time.time())
        if changed is None:
            self._encoded.clear()
        else:
            self._encoded.pop(changed.name, None)
        path = self._path()
        if path is None:
            return None
        if self._writer is not None:
            return self._writer.request(undo)
        err = self._written(path, _write_file(self.state_dir, path, self._encode()))
        if err is not None:
            _undo_all([undo])
        return err

    async def _write_now(self) -> str | None:
        """One write by the writer: encoded here, on the loop (every change made so far
        is in it), written and fsynced in a thread."""
        path = self._path()
        if path is None:
            return None
        data = self._encode()
        err = await asyncio.get_running_loop().run_in_executor(
            None, _write_file, self.state_dir, path, data)
        return self._written(path, err)

    def _written(self, path: str, err: BaseException | None) -> str | None:
        """The outcome of one write: None, or its error (logged)."""
        if err is None:
            self.save_error = None
            return None
        self._encoded.clear()        # the changes in it are being undone
        self.save_error = getattr(err, "strerror", None) or str(err)
        log.error("state: cannot save %s: %s (previous state kept)", path, err)
        return self.save_error

    def _then(self, saved: str | None | asyncio.Future[str | None], value: T,
              done: Undo | None = None) -> T | Awaitable[T]:
        """`value` once the change is saved (then `done()`); else raise the error (the
        change is undone by then).  With a writer, an awaitable of that; `done` then
        runs on the write itself, so it happens even when nobody waits for the reply any
        more (a hang-up; the old private cwd of a set_cwd is removed all the same)."""
        if not isinstance(saved, asyncio.Future):
            return _settle(saved, value, done)
        if done is not None:
            saved.add_done_callback(
                lambda f: None if f.cancelled() or f.result() is not None else done())

        async def wait() -> T:
            return _settle(await asyncio.shield(saved), value, None)
        return wait()

    def sweep_temp(self) -> list[str]:
        """Remove `state.json.tmp.<pid>` files left by servers killed during a save; call
        it with the state directory locked (no live server writes one then).  Returns the
        names removed."""
        if not self.state_dir:
            return []
        gone: list[str] = []
        try:
            names = os.listdir(self.state_dir)
        except OSError:
            return gone
        for n in names:
            if n.startswith("state.json.tmp."):
                try:
                    os.unlink(os.path.join(self.state_dir, n))
                    gone.append(n)
                except OSError as e:
                    log.warning("state: cannot remove %s: %s", n, e.strerror)
        if gone:
            log.info("state: removed %d temp file%s left by a server killed during a save",
                     len(gone), "" if len(gone) == 1 else "s")
        return gone

    def restore(self) -> list[str]:
        """Load saved state; returns the problems found (each also logged)."""
        path = self._path()
        problems: list[str] = []
        if path is None or not os.path.exists(path):
            return problems
        try:
            with open(path, "rb") as f:
                data = json.loads(f.read())
            entries = data["sessions"]
            assert isinstance(entries, list)
        except (OSError, ValueError, KeyError, TypeError, AssertionError) as e:
            aside = f"{path}.corrupt-{int(time.time())}"
            os.replace(path, aside)
            msg = f"state: {path} is corrupt ({type(e).__name__}: {e}); moved aside to {aside}"
            log.error("%s", msg)
            return [msg]
        for ent in entries:
            try:
                self._restore_session(ent)
            except Exception as e:
                msg = f"state: session entry {str(ent)[:80]!r} skipped: {e}"
                log.error("%s", msg)
                problems.append(msg)
        return problems

    def _restore_session(self, ent: dict) -> None:
        name = ent["name"]
        if not valid_name(name) or name in self.sessions:
            raise ValueError(f"bad or duplicate session name {name!r}")
        cwd, private = ent["cwd"], bool(ent.get("private_cwd"))
        if private and not os.path.isdir(cwd):
            cwd = self._make_private_cwd(name)
        s = Session(name, cwd, str(ent.get("sandbox", "default")), private)
        for a in ent.get("agents", []):
            if valid_name(a["name"]):
                loaded = [str(t) for t in a.get("loaded", [])]
                s.agents[a["name"]] = Agent(a["name"], s, loaded=loaded)
        self.sessions[name] = s

