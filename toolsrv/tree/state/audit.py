"""The audit trail: one JSON line per call, session, agent, tool load and refused connection.

Rule 1.  A call's record is written before its reply goes out (the scheduler's `on_end`
hook runs before the call's readers are woken), and a refusal's before its Rerror.  When
the record cannot be written (a full disk), the call is refused instead: its result is
withheld and its readers get the error, and until a write succeeds again every new call
is refused before it runs (`check`).  What a client was answered is in the trail.

Rule 2.  The file is append-only (O_APPEND), written by this process alone (the state
directory's lock; an --audit FILE elsewhere is the operator's to keep to one server).
Each record is one write(2) of one line; a write cut short (ENOSPC midway) is cut back
to the last whole line, so a reader never meets half a record.

Durability.  A record is in the kernel once write(2) returns: it survives the server's
kill -9, not a power cut.  `fsync=True` (serve --audit-fsync) also syncs each record
before the reply, which survives that too and costs a disk flush per call
(doc/operations.md gives both figures).

Rotation.  Past `max_bytes`, audit.jsonl becomes audit.jsonl.1, .1 becomes .2, and so on;
the file past `keep` is removed.  The arguments are never written, only their SHA-256 and
size, unless `args=True` (serve --audit-args).
"""
from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import time
from typing import Any

from ...errors import P9Error, fit
from ..calls.states import State

log = logging.getLogger("toolsrv.audit")

FILE = "audit.jsonl"


_second: list[Any] = [-1, ""]      # the last second stamped, and its text


def stamp(t: float | None = None) -> str:
    """UTC time in ISO 8601 with microseconds and a Z."""
    t = time.time() if t is None else t
    sec = int(t)
    if sec != _second[0]:
        _second[:] = [sec, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(sec))]
    return f"{_second[1]}.{int((t - sec) * 1e6):06d}Z"


# one encoder, made once: json.dumps with options makes one per call (most of its cost)
_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=str).encode


class Audit:
    """The trail's writer.  `write` raises OSError; the hooks below turn that into a
    refusal (call_ended) or a log line (events whose change is already made)."""

    def __init__(self, path: str, max_bytes: int = 64 << 20, keep: int = 5,
                 args: bool = False, fsync: bool = False) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.keep = keep
        self.args = args
        self.fsync = fsync
        self.failing: str | None = None    # why the last write failed, until one succeeds
        self.approver = ""                 # who approves elevated runs (the broker)
        self.fd = -1
        self.size = 0
        self._serial = 0
        self._boot = f"{os.getpid():x}{int(time.time()) & 0xffffff:06x}"

    def open(self) -> "Audit":
        os.makedirs(os.path.dirname(self.path) or ".", mode=0o700, exist_ok=True)
        self.fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC,
                          0o600)
        self.size = os.fstat(self.fd).st_size
        return self

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    # -- writing --
    def write(self, rec: dict) -> None:
        """Append one record (its time set here); OSError when it is not in the file."""
        line = (_encode({"time": stamp(), **rec}) + "\n").encode("utf-8", "surrogatepass")
        if self.size and self.size + len(line) > self.max_bytes:
            self._rotate()
        try:
            n = os.write(self.fd, line)
            if n != len(line):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            if self.fsync:
                os.fsync(self.fd)
        except OSError as e:
            self.failing = e.strerror or str(e)
            try:
                os.ftruncate(self.fd, self.size)     # no half line left behind
            except OSError:
                pass
            raise
        self.size += n
        self.failing = None

    def _rotate(self) -> None:
        for i in range(self.keep, 0, -1):
            src = self.path if i == 1 else f"{self.path}.{i - 1}"
            try:
                os.replace(src, f"{self.path}.{i}")
            except FileNotFoundError:
                pass
        if self.keep <= 0:
            os.unlink(self.path)
        self.close()
        self.open()

    def check(self) -> None:
        """Raise the Rerror while the trail cannot take a record: after a failed write,
        room for one is tried (fallocate) before a call or a change is let happen."""
        if self.failing is None:
            return
        try:
            os.posix_fallocate(self.fd, self.size, 4096)
        except OSError:
            raise P9Error(fit("input/output error: audit trail not writable: ",
                              f"{self.failing} ({self.path}); nothing was done", "")) from None
        finally:
            try:
                os.ftruncate(self.fd, self.size)
            except OSError:
                pass
        self.failing = None

    def event(self, rec: dict) -> None:
        """A record whose change is made already: a failure is logged, not raised."""
        try:
            self.write(rec)
        except OSError as e:
            log.error("audit: %s: record lost: %s: %s", self.path, e.strerror or e, rec)

    # -- the hooks --
    def call_ended(self, call: Any, tool: Any) -> None:
        """The scheduler's, before the call's readers are woken: its record, or, when that
        cannot be written, the call refused and its result withheld (rule 1)."""
        try:
            self.write(self.call_record(call, tool))
        except OSError as e:
            log.error("audit: %s: %s: the call of %s is refused", self.path,
                      e.strerror or e, call.tool)
            call.state, call.result = State.REFUSED, None
            why = fit("input/output error: audit record not written: ",
                      f"{e.strerror or e}; the call ran, its result is withheld", "")
            call.reason, call.detail = why, why.full

    def refused(self, who: Any, agent: Any, tool: str, reason: str) -> None:
        """A call refused before it began (its args, its tool, the trail itself)."""
        self.event({"event": "call", "id": None, "principal": who,
                    "session": agent.session.name, "agent": agent.name, "tool": tool,
                    "outcome": State.INVALID, "reason": reason})

    def change(self, what: str, done: str, who: Any, session: str,
               agent: str | None = None, **more: Any) -> None:
        """A session or agent made or removed, a ctl command applied."""
        rec = {"event": what, "op": done, "principal": who, "session": session}
        if agent is not None:
            rec["agent"] = agent
        self.event({**rec, **more})

    def connection_refused(self, peer: Any, why: str) -> None:
        self.event({"event": "connection", "op": "refused", "principal": peer_fields(peer),
                    "reason": why})

    # -- calls --
    def call_id(self, call: Any) -> str:
        """A call's id in the trail, made on first use (a child is written before its
        parent, and names it)."""
        cid = getattr(call, "audit_id", None)
        if cid is None:
            self._serial += 1
            cid = call.audit_id = f"{self._boot}-{self._serial}"
        return cid

    def call_record(self, call: Any, tool: Any = None) -> dict:
        a = call.agent
        r = call.result
        out = {"event": "call", "id": self.call_id(call),
               "principal": getattr(call, "principal", None),
               "session": a.session.name, "agent": a.name, "tool": call.tool,
               "variant": getattr(tool, "variant", None),
               "profile": profile_of(tool, a.session.sandbox),
               "elevated": bool(call.elevated),
               "outcome": call.state, "duration": round(call.duration, 6)}
        if call.elevated and call.state not in (State.INVALID, State.REFUSED) and r is not None:
            out["approved_by"] = self.approver
        if r is not None:
            out.update(exit=r.exit_code, signal=r.signal, out_bytes=len(r.stdout),
                       err_bytes=len(r.stderr))
        if call.reason:
            out["reason"] = str(getattr(call, "detail", None) or call.reason)
        said = getattr(call, "meta", None) or {}     # what an MCP face passed on, if any
        if said.get("principal"):       # the HTTP client's token or OAuth subject it serves
            out["principal"] = {**(out["principal"] or {}), "on_behalf_of": said["principal"]}
        if said.get("traceparent"):
            out["traceparent"] = said["traceparent"]
        parent = getattr(call, "parent", None)
        if parent is not None:
            out["parent"] = self.call_id(parent)
        out.update(self.args_fields(call.stdin if call.stdin is not None else call.args))
        return out

    def args_fields(self, args: Any) -> dict:
        if isinstance(args, (bytes, bytearray)):
            raw = bytes(args)
        else:
            raw = json.dumps(args, ensure_ascii=False, separators=(",", ":")).encode(
                "utf-8", "surrogatepass")
        out: dict[str, Any] = {"args_sha256": hashlib.sha256(raw).hexdigest(),
                               "args_bytes": len(raw)}
        if self.args:
            out["args"] = raw.decode("utf-8", "replace")
        return out


def peer_fields(peer: Any) -> dict | None:
    """A serve/transport.py Peer as a record's principal."""
    if peer is None:
        return None
    return {k: getattr(peer, k) for k in ("kind", "uid", "pid", "host", "subject")
            if getattr(peer, k, None) is not None}


def principal(fid: Any) -> dict | None:
    """Who wrote through this fid: the connection's peer (uid and pid of a Unix socket,
    host of TCP, the certificate's subject over mutual TLS), the Tattach uname, and,
    for a tool's own connection, that it is one."""
    conn = getattr(fid, "conn", None)
    out = peer_fields(getattr(getattr(conn, "link", None), "peer", None)) or {}
    if getattr(getattr(conn, "config", None), "guard", None) is not None:
        out["via"] = "tool"
    if getattr(fid, "uname", None):
        out["uname"] = fid.uname
    return out or None


def profile_of(tool: Any, session_profile: str) -> str:
    """The profile a call runs under: the tool's declared one, else its session's."""
    declared = (getattr(tool, "extra", None) or {}).get("sandbox")
    return declared if isinstance(declared, str) else session_profile
