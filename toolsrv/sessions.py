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
the private directory is chowned to that uid so the tool can use it.

The store saves itself to `<state_dir>/state.json` after every change, with
an atomic write (temp file, fsync, rename): a crash or a full disk leaves
the previous state intact.  A session or agent whose creation cannot be
saved (disk full) is not created: the mkdir fails with the reason, so what
the client sees is what a restart will restore.  A removal that cannot be
saved still happens (its runs are already killed); the error is logged and
the next successful save catches up.  On start a corrupt file is moved aside
to `state.json.corrupt-<time>` and reported, never silently dropped.
"""
from __future__ import annotations

import errno
import itertools
import json
import logging
import os
import shutil
import time
from typing import Any, Callable

from . import errors as E
from .errors import P9Error
from .names import valid_name
from .record import Plain

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
        self.alive = alive                                             # (toolfile.py)
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
    FIELDS = ("name", "cwd", "sandbox", "private_cwd", "serial", "agents", "alive")

    def __init__(self, name: str, cwd: str, sandbox: str = "default", private_cwd: bool = True,
                 serial: int | None = None, agents: dict[str, Agent] | None = None,
                 alive: bool = True) -> None:
        self.name = name
        self.cwd = cwd
        self.sandbox = sandbox
        self.private_cwd = private_cwd
        self.serial = next(_serials) if serial is None else serial
        self.agents: dict[str, Agent] = {} if agents is None else agents
        self.alive = alive
        self.node: Any = None     # its directory in the tree, kept by fs.py (not state)


_dumps = json.JSONEncoder().encode    # ASCII: a path with undecodable bytes (\udcxx) too


def _entry(s: Session) -> dict:
    """A session's entry in state.json."""
    return {"name": s.name, "cwd": s.cwd, "private_cwd": s.private_cwd, "sandbox": s.sandbox,
            "agents": [{"name": a.name, "loaded": list(a.loaded)} for a in s.agents.values()]}


class SessionStore:
    """All sessions of the server, saved to disk after every change."""

    def __init__(self, state_dir: str | None, work_dir: str,
                 tool_uid: tuple[int, int] | None = None,
                 check_profile: Callable[[str], None] | None = None,
                 max_sessions: int = 10000, max_agents: int = 256) -> None:
        self.state_dir = state_dir
        self.work_dir = work_dir
        self.tool_uid = tool_uid
        self.check_profile = check_profile
        self.max_sessions = max_sessions
        self.max_agents = max_agents
        self.sessions: dict[str, Session] = {}
        self.save_error: str | None = None
        self.on_remove_agent: list[Callable[[Agent], None]] = []
        self.mtime = int(time.time())
        self._encoded: dict[str, tuple[Session, bytes]] = {}   # see _encode

    # -- sessions --
    def create(self, name: str) -> Session:
        if not valid_name(name):
            raise P9Error(E.EBADNAME)
        if name in self.sessions:
            raise P9Error(E.EEXIST)
        if len(self.sessions) >= self.max_sessions:
            raise P9Error(f"resource busy: too many sessions (limit {self.max_sessions})")
        s = Session(name, self._make_private_cwd(name))
        self.sessions[name] = s
        if not self.save(s):
            del self.sessions[name]
            s.alive = False
            shutil.rmtree(s.cwd, ignore_errors=True)
            raise self._save_failed()
        return s

    def remove(self, name: str) -> None:
        s = self.sessions.pop(name, None)
        if s is None:
            raise P9Error(E.ENOTFOUND)
        for a in list(s.agents.values()):
            self._drop_agent(a)
        s.alive = False
        if s.private_cwd:
            shutil.rmtree(s.cwd, ignore_errors=True)
        self.save(s)

    def set_cwd(self, s: Session, path: str) -> None:
        if not os.path.isabs(path) or not os.path.isdir(path):
            raise P9Error(f"cwd: no such directory: {path}"[:120])
        path = os.path.realpath(path)
        old = s.cwd, s.private_cwd
        drop = s.private_cwd and os.path.realpath(s.cwd) != path
        s.cwd, s.private_cwd = path, s.private_cwd and not drop
        if not self.save(s):
            s.cwd, s.private_cwd = old
            raise self._save_failed()
        if drop:
            shutil.rmtree(old[0], ignore_errors=True)

    def set_sandbox(self, s: Session, name: str) -> None:
        if not valid_name(name):
            raise P9Error(f"sandbox: illegal profile name: {name!r}"[:120])
        if self.check_profile:
            try:
                self.check_profile(name)
            except Exception as e:   # the profile's own error names what is wrong
                raise P9Error(f"sandbox: {e} (invalid argument)") from None
        old, s.sandbox = s.sandbox, name
        if not self.save(s):
            s.sandbox = old
            raise self._save_failed()

    # -- agents --
    def create_agent(self, s: Session, name: str) -> Agent:
        if not valid_name(name):
            raise P9Error(E.EBADNAME)
        if name in s.agents:
            raise P9Error(E.EEXIST)
        if len(s.agents) >= self.max_agents:
            raise P9Error(f"resource busy: too many agents in session {s.name} "
                          f"(limit {self.max_agents})")
        a = Agent(name, s)
        s.agents[name] = a
        if not self.save(s):
            del s.agents[name]
            a.alive = False
            raise self._save_failed()
        return a

    def remove_agent(self, s: Session, name: str) -> None:
        a = s.agents.pop(name, None)
        if a is None:
            raise P9Error(E.ENOTFOUND)
        self._drop_agent(a)
        self.save(s)

    def _drop_agent(self, a: Agent) -> None:
        a.alive = False
        for fn in self.on_remove_agent:
            try:
                fn(a)
            except Exception:
                log.exception("agent removal hook failed")

    # -- private working directories --
    def _make_private_cwd(self, name: str) -> str:
        try:
            os.makedirs(self.work_dir, mode=0o711, exist_ok=True)
            for _ in range(100):   # a directory of an earlier server with our pid: next name
                path = os.path.join(self.work_dir, f"{name}.{os.getpid()}.{next(_serials)}")
                try:
                    os.mkdir(path, 0o700)
                    break
                except FileExistsError:
                    continue
            else:
                raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST))
            if self.tool_uid is not None:
                os.chown(path, *self.tool_uid)
        except OSError as e:
            log.error("session %s: cannot make its directory %s: %s", name, path, e)
            raise P9Error(f"input/output error: session directory: {e.strerror}") from None
        return path

    # -- persistence --
    def _path(self) -> str | None:
        return os.path.join(self.state_dir, "state.json") if self.state_dir else None

    def snapshot(self) -> dict:
        return {"version": 1, "sessions": [_entry(s) for s in self.sessions.values()]}

    def _encode(self) -> bytes:
        """snapshot() as JSON, re-encoding only the sessions changed since the last save.

        Each session's entry is kept encoded, with the Session it was made from; a save
        names the session it changed (save(s)) and only that entry is made again, so a
        change costs a join, not an encoding of every session (at 1,000 sessions x 4
        agents x 10 tools the whole encoding took 70 ms of the event loop)."""
        done, parts = self._encoded, []
        for s in self.sessions.values():
            got = done.get(s.name)
            if got is None or got[0] is not s:
                got = done[s.name] = (s, _dumps(_entry(s)).encode())
            parts.append(got[1])
        if len(done) > len(self.sessions):           # removed sessions
            for k in [k for k in done if k not in self.sessions]:
                del done[k]
        return b'{"version": 1, "sessions": [' + b", ".join(parts) + b"]}"

    def _save_failed(self) -> P9Error:
        return P9Error(f"input/output error: state not saved: {self.save_error}")

    def save(self, changed: Session | None = None) -> bool:
        """Write the state atomically; on failure keep the old file, log, return False.

        `changed` is the one session changed since the last save (its entry is encoded
        again); None re-encodes every session."""
        self.mtime = int(time.time())
        path = self._path()
        if path is None:
            return True
        if changed is None:
            self._encoded.clear()
        else:
            self._encoded.pop(changed.name, None)
        tmp = f"{path}.tmp.{os.getpid()}"
        try:
            os.makedirs(self.state_dir, mode=0o700, exist_ok=True)  # type: ignore[arg-type]
            data = self._encode()
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, path)
        except OSError as e:
            self._encoded.clear()        # the caller may now undo its change
            self.save_error = e.strerror or str(e)
            log.error("state: cannot save %s: %s (previous state kept)", path, e)
            try:
                os.unlink(tmp)
            except OSError:
                pass
            return False
        self.save_error = None
        return True

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

