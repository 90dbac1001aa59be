"""An agent's files: ctl, log, schemas, tools.py, search and tools/<tool>/{call,out,err,status}.

Errors on the write.  Everything that can fail does so on the Twrite (9pfuse drops clunk
errors): a ctl line runs on the write that completes it, and a call's JSON is validated
and started on the write that completes it.  JSON still incomplete after a Twrite that
ends a line and is shorter than CHUNK_WAIT (a whole write(2): 9pfuse sends longer ones
in 4 KiB pieces) fails on that Twrite: `echo '{"a": ' > call` is an error the shell
sees; only a value left incomplete without a newline is reported at close, in status
and log.  Every error is in the agent's log whole (P9Error.full), the Rerror's cut aside.

Reading call.  A read of `call` on the fid that wrote waits for the end of that call (a
Pending the server can flush: flushing it kills the run); a fid that wrote nothing reads
end of file at once, as plan9port's `9p rdwr` needs.  A read on a fid whose writes hold
JSON still incomplete (or nothing: an empty Twrite) fails with `invalid args: incomplete
JSON: …`, in log too, never an empty success; the bytes stay, so a next write may still
complete them (`9p rdwr` reads after each line).  Reads of ctl and call slice a per-fid
snapshot of the answer by offset (node.answer_read: it starts at 0, or where the fid's
writes ended, as a descriptor's reads after its writes come).  The call file keeps what
it knows of a fid in a CallFid.

out and err.  They are the latest call's streams.  Each call hands them to one reader:
the first read at offset 0 of either from the connection that wrote the call while the
writing fid is open (a front reads a remote's `err` beside its `call`), or from any
connection once that fid was clunked without reading `call` (`echo … > call`, `9p
write`); that read waits for the end of the call.  Every other read of `out` or `err`
answers at once with what the stream holds (nothing while the call runs), so a program
that reads the whole tree (`grep -r`, `find -exec cat`, a backup) never waits on a call
it was not handed.  A waiting reader ends with the call: `cancel TOOL` on ctl, or its
time limit.  `status` never waits.
"""
from __future__ import annotations

import inspect

import json
from typing import Any, Callable, NoReturn

from .calls.apply import Calls
from .calls.scheduler import Call, invalid_call
from ..errors import P9Error, too_long
from .root import json_text
from .sessiondirs import AgentDir, after_save
from ..errors import fit
from ..record import Plain
from .calls.jsonargs import json_state
from .policy.consent import broker_of
from .policy.who import name_of
from .state.audit import principal
from .state.sessions import Agent
from .node import (Dir_, FixedDir, Node, Pending, TextFile, answer_read, answered,
                   changes, snapshot_read)

CHUNK_WAIT = 4096   # a Twrite this long may be one piece of a longer write(2) (9pfuse's
                    # pieces are 4 KiB): its line, or its JSON, may continue in the next
MAX_CTL_LINE = 1 << 16  # bytes of one ctl line


class AgentFiles:
    """The agent directory's files (the root's agent_files hook): NAMES, and entry to
    build one; what they do is asked of Calls."""

    NAMES: tuple[str, ...] = ("ctl", "log", "schemas", "tools", "tools.py")   # its files

    def __init__(self, calls: Calls, searcher: Any = None) -> None:
        self.calls = calls
        self.searcher = searcher      # searchfile.Searcher: an agent's search file
        if searcher is not None:
            self.NAMES = self.NAMES + ("search",)

    def entry(self, d: AgentDir, name: str, q: int) -> Node:
        """The agent file `name`, with qid path q."""
        a = d.a
        if name == "tools":
            td = AgentToolsDir("tools", q, d, lambda td: self._tool_dirs(td, d),
                               lambda td, n: self._tool_dir(td, d, n))
            td.known = lambda n: self.calls.registry.get(n) is not None
            return td
        if name == "ctl":
            return CtlFile("ctl", q, d, self.calls, a)
        if name == "log":
            return TextFile("log", q, d, lambda: bytes(a.log), append=True, quiet_remove=True,
                            changes=lambda: (len(a.log), bytes(a.log[-64:])))
        if name == "search":
            from .searchfile import AgentSearchFile
            return AgentSearchFile("search", q, d, self.searcher, a)

        def schemas() -> bytes:       # its own key: loads, a tool changed, the sandbox
            return json_text(self.calls.schemas(a))
        if name == "tools.py":
            def module() -> bytes:    # as schemas, from the same: its key moves with them
                return self.calls.module(a).encode()
            return TextFile("tools.py", q, d, module, quiet_remove=True, changes=schemas)
        return TextFile("schemas", q, d, schemas, quiet_remove=True, changes=schemas)

    def _tool_dirs(self, td: AgentToolsDir, d: AgentDir) -> list[Node]:
        return [n for n in (self._tool_dir(td, d, name) for name in d.a.loaded)
                if n is not None]

    def _tool_dir(self, td: AgentToolsDir, d: AgentDir, name: str) -> Node | None:
        if name not in d.a.loaded or self.calls.registry.get(name) is None:
            return None
        node = td.kept.get(name)                 # kept by the directory: see node.py
        if node is None:
            node = td.kept[name] = ToolCallDir(name, d.key("tool", name), td, self.calls, d.a, d)
        return node


TOOL_FILES = ("call", "out", "err", "status")


class CtlFile(Node):
    perm = 0o666

    def __init__(self, name: str, qpath: int, parent: Node, calls: Calls, a: Agent) -> None:
        super().__init__(name, qpath, parent)
        self.calls, self.a = calls, a

    def _text(self) -> bytes:
        return "".join(f"{n}\n" for n in self.a.loaded).encode()

    def length(self) -> int:
        return len(self._text())

    def version(self) -> int:       # qid.vers and mtime move with the tools loaded
        return changes(self)(self.qpath, tuple(self.a.loaded))[0]

    def mtime(self) -> int:
        return changes(self)(self.qpath, tuple(self.a.loaded))[1]

    def read(self, fid: Any, offset: int, count: int) -> bytes:
        return answer_read(fid, self._text, offset, count)

    def write(self, fid: Any, offset: int, data: bytes) -> int:
        buf = fid.aux.pop("ctlbuf", b"") + data
        if not buf.endswith(b"\n") and len(data) >= CHUNK_WAIT:
            cut = buf.rfind(b"\n") + 1          # run whole lines, keep the rest for later
            fid.aux["ctlbuf"], buf = buf[cut:], buf[:cut]
            if len(fid.aux["ctlbuf"]) > MAX_CTL_LINE:
                del fid.aux["ctlbuf"]
                self._refuse(P9Error(too_long("ctl", MAX_CTL_LINE, "line")))
        try:
            text = buf.decode()
        except UnicodeDecodeError:
            self._refuse(P9Error("ctl: illegal UTF-8"))
        audit = self.calls.sched.audit
        if audit is not None and text.strip():
            audit.check()
        who = name_of(fid) if self.calls.policy is not None else None
        saved = self.calls.apply(self.a, text, who) if text.strip() else None   # or raise
        answered(fid, offset + len(data))        # applied: the next read answers afresh
        if audit is None or not text.strip():
            return after_save(saved, lambda _: len(data))
        a = self.a
        return after_save(saved, lambda _: audit.change(
            "ctl", "applied", principal(fid), a.session.name, a.name,
            command=text.strip()) or len(data))

    def _refuse(self, e: P9Error) -> NoReturn:
        self.a.note(f"ctl -> error: {e.full}")
        raise e

    def truncate(self, fid: Any) -> None:
        fid.aux.pop("ctlbuf", None)

    def remove(self) -> None:
        return None


class ToolCallDir(FixedDir):
    """agent/<name>/tools/<tool>/: present while the tool is loaded and in the registry."""

    NAMES = TOOL_FILES

    def __init__(self, name: str, qpath: int, parent: Node, calls: Calls, a: Agent,
                 d: AgentDir) -> None:
        super().__init__(name, qpath, parent)
        self.calls, self.a = calls, a
        self.tool = name
        self._q = [d.key("tool", name, n) for n in TOOL_FILES]

    def alive(self) -> bool:
        return (self.a.alive and self.tool in self.a.loaded
                and self.calls.registry.get(self.tool) is not None)

    def paths(self) -> list[int]:
        return self._q

    def make(self, name: str, q: int) -> Node:
        if name == "call":
            return CallFile("call", q, self)
        if name == "status":
            return TextFile("status", q, self, self._status, quiet_remove=True,
                            changes=self._status)
        return StreamFile(name, q, self, "stdout" if name == "out" else "stderr")

    def latest(self) -> Call | None:
        return self.calls.latest(self.a).get(self.tool)

    def _status(self) -> bytes:
        c = self.latest()
        line = c.status_line() if c else "idle\n"
        more = self.calls.sched.residents.status_line(self.a, self.calls.registry.get(self.tool))
        return (line + (more + "\n" if more else "")).encode()

    def remove(self) -> None:
        return None


class CallFile(Node):
    """Write JSON args; read the result of that call on the same fid."""

    perm = 0o666
    parent: ToolCallDir

    def write(self, fid: Any, offset: int, data: bytes) -> int:
        try:
            n = self._take(fid, data)
        except P9Error as e:
            self._audit(fid, e)
            raise
        if not isinstance(n, int):          # the args are checked off the loop: answered
            async def later() -> int:       # once the call is made (or refused)
                try:
                    got = await n
                except P9Error as e:
                    self._audit(fid, e)
                    raise
                answered(fid, offset + got)
                return got
            return later()
        answered(fid, offset + n)
        return n

    def _take(self, fid: Any, data: bytes) -> int:
        d = self.parent
        if _kept(fid).call is not None:   # the call made stays the latest: only the log hears
            self._refuse(P9Error("call: already made on this open file; open call again "
                                 "(in use)"), latest=False)
        buf = fid.aux.setdefault("argbuf", bytearray())
        buf += data
        if len(buf) > d.calls.max_args:
            del fid.aux["argbuf"]
            self._refuse(P9Error(too_long("invalid args", d.calls.max_args)))
        try:
            text = buf.decode()
        except UnicodeDecodeError as e:
            if e.reason == "unexpected end of data":   # a character cut between Twrites
                return len(data)
            del fid.aux["argbuf"]
            self._refuse(P9Error(fit("invalid args: ", "not UTF-8")))
        state, val = json_state(text)
        if state == "incomplete":
            if not (data.endswith(b"\n") and len(data) < CHUNK_WAIT):
                return len(data)     # more may come; a line ended means the writer is done
            state, val = "invalid", f"incomplete JSON at end of line: {text[-60:]!r}"
        del fid.aux["argbuf"]
        if state == "invalid":
            self._refuse(P9Error(fit("invalid args: ", val)))
        scope = getattr(getattr(fid.conn, "config", None), "guard", None)
        who = name_of(fid, val) if d.calls.policy is not None else None   # tree/policy
        got = d.calls.begin(d.a, d.tool, val, getattr(scope, "parent", None), who,
                            broker_of(fid))        # tree/policy/consent.py
        if not inspect.isawaitable(got):
            _made(fid, got)
            return len(data)

        # its schema's regexes are checked in a thread: a Tread sent behind this Twrite
        # (the pipelined rdwr) waits for the call, as it would had the Twrite made it
        waiting: list[Callable[[], None]] = []
        kept = _kept(fid)
        kept.checking = waiting

        async def checked() -> int:
            try:
                _made(fid, await got)
            finally:
                kept.checking = None
                for ready in waiting:
                    ready()
            return len(data)
        return checked()  # type: ignore[return-value]

    def _audit(self, fid: Any, e: P9Error) -> None:
        """A refused call's record in the audit trail, before its Rerror."""
        d = self.parent
        audit = d.calls.sched.audit
        if audit is not None:
            audit.refused(principal(fid), d.a, d.tool, e.full)

    def _refuse(self, e: P9Error, latest: bool = True) -> NoReturn:
        """Fail this Twrite: the latest call of the tool becomes this invalid one (unless
        `latest` is False) and the log gets the whole reason."""
        d = self.parent
        if latest:
            d.calls.latest(d.a)[d.tool] = invalid_call(d.tool, d.a, e.ename)
        d.a.note(f"call {d.tool} -> {e.full}")
        raise e

    def truncate(self, fid: Any) -> None:
        fid.aux.pop("argbuf", None)

    def clunk(self, fid: Any) -> None:
        """JSON left incomplete when the writer closes is reported, not lost; a call made
        here and never read here is handed over to the next reader of out or err."""
        kept = _kept(fid)
        kept.clunked = True         # (a call still being checked is made after this)
        call = kept.call
        if call is not None:        # read here: nobody else waits; unread: anyone may
            if kept.read:
                call.handed = False
            call.heir = None
        buf = fid.aux.get("argbuf")
        if buf and call is None and kept.told != len(buf):  # not yet said
            d = self.parent
            why = fit("invalid args: ", f"incomplete JSON discarded at close: {bytes(buf)[:60]!r}")
            d.calls.latest(d.a)[d.tool] = invalid_call(d.tool, d.a, why)
            d.a.note(f"call {d.tool} -> {why}")

    def read(self, fid: Any, offset: int, count: int) -> Any:
        kept = _kept(fid)
        if kept.checking is not None:       # the Twrite's call is still being checked
            return self._after(kept.checking, fid, offset, count)
        call = kept.call
        if call is not None:
            kept.read = True                # this fid waits for the result: no hand-over
        else:
            buf = fid.aux.get("argbuf")
            if buf is not None:           # written, but no call made of it: never a success
                kept.told = len(buf)        # kept: a next write may still complete it
                self._refuse(P9Error(fit("invalid args: incomplete JSON: ", _incomplete(buf))))
            return b""
        if call.done.is_set():
            return _result(fid, call, offset, count)
        sched = self.parent.calls.sched
        p = Pending(lambda: sched.stop(call))    # a flush of this read kills the run

        def ended() -> None:
            try:
                p.give(_result(fid, call, offset, count))
            except P9Error as e:
                p.fail(e)
        call.waiters.append(ended)
        return p

    def _after(self, checking: list[Callable[[], None]], fid: Any, offset: int,
               count: int) -> Pending:
        """This read, once the call its fid's Twrite is checking is made (or refused)."""
        p = Pending(lambda: inner[0].cancel() if inner else None)
        inner: list[Pending] = []

        def ready() -> None:
            if p.done:
                return
            try:
                r = self.read(fid, offset, count)
            except P9Error as e:
                return p.fail(e)
            if type(r) is not Pending:
                return p.give(r)
            inner.append(r)
            r.then(lambda v, e: p.fail(e) if e is not None else p.give(v))
        checking.append(ready)
        return p

    def remove(self) -> None:
        return None


def _made(fid: Any, call: Call) -> None:
    """The call this fid wrote: its out and err go to their first reader on this
    connection, while the fid is open (CallFile.clunk widens or ends that)."""
    kept = _kept(fid)
    kept.call = call
    call.handed, call.heir = True, None if kept.clunked else fid.conn
    call.principal = principal(fid)      # who, in its audit record (state/audit.py)


class CallFid(Plain):
    """What the call file keeps for one fid, in its aux under "callfid" (_kept).  The
    args written and not yet a call stay aux["argbuf"], as bytes: the server counts those
    against the connection's max_held (tree/node.py)."""

    FIELDS = ("call", "checking", "clunked", "read", "told")
    call: Call | None                           # the call its writes made
    checking: list[Callable[[], None]] | None   # while that call's args are checked: what
                                                # runs once it is made (a read behind it)
    clunked: bool                               # the fid is clunked (its call handed over)
    read: bool                                  # it read `call`: it waits for the result
    told: int | None                            # the bytes of argbuf a read refused

    def __init__(self, call: Call | None = None,
                 checking: list[Callable[[], None]] | None = None, clunked: bool = False,
                 read: bool = False, told: int | None = None) -> None:
        self.call, self.checking, self.clunked, self.read, self.told = \
            call, checking, clunked, read, told


def _kept(fid: Any) -> CallFid:
    """The call file's record of this fid, made on first use."""
    kept = fid.aux.get("callfid")
    if kept is None:
        kept = fid.aux["callfid"] = CallFid()
    return kept


def _incomplete(buf: bytearray) -> str:
    """Why the bytes a fid wrote are no call: json's own error and where, or nothing."""
    try:
        text = bytes(buf).decode()
    except UnicodeDecodeError:
        return "ends inside a UTF-8 character"
    if not text.strip():
        return "nothing written; write one JSON object, such as {}"
    try:
        json.loads(text)
    except json.JSONDecodeError as e:
        return f"{e.msg}: line {e.lineno} column {e.colno} (char {e.pos}), after {text[-40:]!r}"
    return f"{text[-40:]!r}"


def _result(fid: Any, call: Call, offset: int, count: int) -> bytes:
    if call.reason is not None:
        raise P9Error(call.reason)
    return answer_read(fid, lambda: call.stdout, offset, count)


class QuietDir(Dir_):
    """A directory inside an agent: Tremove succeeds and does nothing (rm -r)."""

    def remove(self) -> None:
        return None


class AgentToolsDir(QuietDir):
    """agent/<name>/tools/: a walk builds only the tool directory it names."""

    def __init__(self, name: str, qpath: int, parent: Node, entries: Any, one: Any) -> None:
        super().__init__(name, qpath, parent, entries)
        self._one = one
        self.kept: dict[str, Node] = {}     # the tool directories built, by name
        self.known: Any = lambda name: True    # whether the registry serves a tool `name`

    def lookup(self, name: str) -> Node | None:
        return self._one(self, name)

    def missing(self, name: str) -> str:
        """The Rerror of a walk to a tool directory that is not here (server._walk)."""
        a = getattr(self.parent, "a", None)
        if (a is None or (a.alive and name not in a.loaded)) and not self.known(name):
            return fit("", f"{name}: no such tool (tools/index lists them; tools/errors, "
                       "the .meta files not served)", " (file not found)")
        if a is None or (a.alive and name not in a.loaded):
            return fit("", f'{name} is not loaded for this agent: write "tool_load {name}" '
                       "to its ctl", " (file not found)")
        return fit("", f"{name}: no such tool now", " (file not found)")


class StreamFile(Node):
    """out or err: the latest call's stream.  Only the read it was handed over to waits
    for a running call (the module's doc); any other answers at once."""

    parent: ToolCallDir

    def __init__(self, name: str, qpath: int, parent: ToolCallDir, stream: str) -> None:
        super().__init__(name, qpath, parent)
        self.stream = stream

    def _data(self, call: Call | None) -> bytes:
        return getattr(call, self.stream) if call is not None else b""

    def length(self) -> int:
        return len(self._data(self.parent.latest()))

    def _key(self) -> Any:
        call = self.parent.latest()       # a Call compares by identity
        return call, len(self._data(call)), call is not None and call.done.is_set()

    def version(self) -> int:
        return changes(self)(self.qpath, self._key())[0]

    def mtime(self) -> int:
        return changes(self)(self.qpath, self._key())[1]

    def read(self, fid: Any, offset: int, count: int) -> Any:
        if offset and "snapshot" in fid.aux:
            return fid.aux["snapshot"][offset:offset + count]
        call = self.parent.latest()
        if (call is None or call.done.is_set() or offset or not call.handed
                or call.heir not in (None, fid.conn)):
            return snapshot_read(fid, lambda: self._data(call), offset, count)
        call.handed = False        # this read is the one the call was handed to

        def ended() -> None:       # the call's end answers the read (no task per reader)
            fid.aux["snapshot"] = data = self._data(call)
            p.give(data[offset:offset + count])

        def flushed() -> None:     # a flushed read leaves the run alone, and no waiter behind;
            if ended in call.waiters:      # the next reader is handed the wait
                call.waiters.remove(ended)
                call.handed = True
        p = Pending(flushed)
        call.waiters.append(ended)
        return p

    def remove(self) -> None:
        return None
