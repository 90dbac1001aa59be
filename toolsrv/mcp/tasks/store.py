"""The face's record of its tasks: which call of the tree each task is, whose it is, and a
finished task's result, a file each, kept for the task's time to live.

Theory of operation.  A task is a call in the tree (serve.py): the face keeps, per task,
only what the tree does not:

  id         a random 128-bit id (uuid4), the client's handle.
  owner      the principal that made it (serve.py `owner`): another principal's lookup
             is "not found", exactly as an id that never was.
  call       the tree's path of the call it is (`session/S/agent/A/tools/T/call`), and
             the process that holds it (`pid`, and the process's start time, so a reused
             pid is not taken for it).
  status     `working` while the call runs (its state then is the call's `status` file,
             read by serve.py), then `completed` with the MCP result, `cancelled`, or
             `failed` with a JSON-RPC error.
  ttlMs      how long from creation the record is kept (TTL_MS, or TOOLSRV_MCP_TASK_TTL
             seconds, at most MAX_TTL_MS): a finished task past it is deleted, at the next
             lookup or sweep; a running one is kept until it ends.

Files.  `<state home>/mcp-tasks/<id>.json` (the directory mode 700, each file 600),
written whole and renamed into place at creation (before the client gets the handle:
the spec's "durably created") and at the end, so a face that restarts finds every
finished task's result.  A record still `working` whose process is gone (the face
stopped or was killed while the call ran: its 9P connection hung up, so toolsrv killed
the run) reads `cancelled`, saying so.  At most MAX_RECORDS are kept (a result is at
most the server's output cap): past it the expired go first, and a new task is refused
naming the bound, so no client's tasks fill the disk.

Every method here touches the disk (a sweep reads up to MAX_RECORDS files of up to the
output cap each): serve.py calls them in one worker thread of its own, never on the
face's event loop, and hands `save` a copy of a record the loop may still read.

This is a second store for one thing only, a finished call's result: the tree keeps a
call's `out`, `err` and `status` only until the agent's next call of that tool, and none
of them across a restart of the server (toolsrv(4), State).
"""
from __future__ import annotations

import json
import os
import time
import uuid
from datetime import datetime, timezone
from typing import Any

TTL_MS = 3_600_000              # a task's record is kept an hour from its creation
MAX_TTL_MS = 7 * 86_400_000     # TOOLSRV_MCP_TASK_TTL may ask for a week at most
POLL_MS = 1000                  # the pollIntervalMs a task suggests
SWEEP_EVERY = 60.0              # seconds between sweeps of expired records
TERMINAL = ("completed", "failed", "cancelled")
MAX_RECORDS = 1024              # records kept in one state home: the disk tasks may hold
WIRE = ("taskId", "status", "statusMessage", "createdAt", "lastUpdatedAt", "ttlMs",
        "pollIntervalMs", "result", "error")


def ttl_ms() -> int:
    """The time to live of a new task: TOOLSRV_MCP_TASK_TTL (seconds) bounded by
    MAX_TTL_MS, else TTL_MS."""
    said = os.environ.get("TOOLSRV_MCP_TASK_TTL", "")
    try:
        ms = int(float(said) * 1000) if said else TTL_MS
    except ValueError:
        ms = TTL_MS
    return max(1, min(ms, MAX_TTL_MS))


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00",
                                                                                 "Z")


def _epoch(iso: str) -> float:
    try:
        return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


def started(pid: int) -> str | None:
    """The start time of process `pid` (/proc/PID/stat's 22nd field), None when gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    return stat.rsplit(")", 1)[-1].split()[19]


def wire(rec: dict[str, Any]) -> dict[str, Any]:
    """The record as the extension's DetailedTask (the face's own keys left out)."""
    return {k: rec[k] for k in WIRE if k in rec}


def mark(rec: dict[str, Any], status: str, message: str | None = None,
         **payload: Any) -> None:
    """Mark `rec` ended (`status`, TERMINAL), in memory: Store.save writes it."""
    rec.update(status=status, lastUpdatedAt=now_iso(), **payload)
    if message:
        rec["statusMessage"] = message


class TooMany(Exception):
    """MAX_RECORDS are kept and none has expired: str(e) says what to do."""


class Store:
    """The records of one state home (module comment)."""

    def __init__(self, home: str) -> None:
        self.dir = os.path.join(home, "mcp-tasks")
        self.pid = os.getpid()
        self.boot = started(self.pid) or ""
        self._swept = 0.0

    def new(self, owner: str, tool: str) -> dict[str, Any]:
        """A new working task of `owner`, a call of `tool`, written before it is given
        (the call's path in the tree is added when its seat is known)."""
        self.sweep()
        if self._count() >= MAX_RECORDS:
            self._swept = 0.0               # full: expired records go first, now
            self.sweep()
            if self._count() >= MAX_RECORDS:
                raise TooMany(f"too many tasks kept ({MAX_RECORDS} in {self.dir}): wait for "
                              "some to expire (an hour from their start, or "
                              "TOOLSRV_MCP_TASK_TTL), or call without the tasks extension")
        at = now_iso()
        rec = {"taskId": str(uuid.uuid4()), "status": "working", "createdAt": at,
               "lastUpdatedAt": at, "ttlMs": ttl_ms(), "pollIntervalMs": POLL_MS,
               "owner": owner, "tool": tool, "call": None, "pid": self.pid, "boot": self.boot}
        self.save(rec)
        return rec

    def end(self, rec: dict[str, Any], status: str, message: str | None = None,
            **payload: Any) -> None:
        """The task ended: `status` (TERMINAL), with its `result` or `error`."""
        mark(rec, status, message, **payload)
        self.save(rec)

    def save(self, rec: dict[str, Any]) -> None:
        os.makedirs(self.dir, mode=0o700, exist_ok=True)
        path = self._path(rec["taskId"])
        tmp = f"{path}.{self.pid}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(rec, f, ensure_ascii=False)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)

    def find(self, task_id: str, owner: str) -> dict[str, Any] | None:
        """The record of `task_id` if `owner` made it and it has not expired, else None."""
        if not isinstance(task_id, str) or not task_id or "/" in task_id \
                or task_id.startswith("."):
            return None
        rec = self._read(self._path(task_id))
        if rec is None or rec.get("owner") != owner:
            return None
        if self._expired(rec):
            self._drop(rec["taskId"])
            return None
        if rec["status"] == "working" and not self.holds(rec) and not self._alive(rec):
            self.end(rec, "cancelled", f"toolsrv mcp (pid {rec.get('pid')}) stopped while "
                     "the call ran: its connection to toolsrv hung up, and toolsrv killed "
                     "the run")
        return rec

    def holds(self, rec: dict[str, Any]) -> bool:
        """Whether this process runs the task."""
        return rec.get("pid") == self.pid and rec.get("boot") == self.boot

    def sweep(self) -> None:
        """Delete the expired records (at most every SWEEP_EVERY seconds)."""
        if time.monotonic() - self._swept < SWEEP_EVERY:
            return
        self._swept = time.monotonic()
        try:
            names = os.listdir(self.dir)
        except OSError:
            return
        for name in names:
            if name.endswith(".json"):
                rec = self._read(os.path.join(self.dir, name))
                if rec is not None and self._expired(rec):
                    self._drop(rec["taskId"])

    def _expired(self, rec: dict[str, Any]) -> bool:
        if rec.get("status") not in TERMINAL and (self.holds(rec) or self._alive(rec)):
            return False            # kept while it runs: its time limit bounds it
        ttl = rec.get("ttlMs")
        return isinstance(ttl, int) and time.time() > _epoch(rec["createdAt"]) + ttl / 1000

    @staticmethod
    def _alive(rec: dict[str, Any]) -> bool:
        pid = rec.get("pid")
        return isinstance(pid, int) and started(pid) == rec.get("boot")

    def _count(self) -> int:
        try:
            return sum(1 for n in os.listdir(self.dir) if n.endswith(".json"))
        except OSError:
            return 0

    def _path(self, task_id: str) -> str:
        return os.path.join(self.dir, f"{task_id}.json")

    def _read(self, path: str) -> dict[str, Any] | None:
        try:
            with open(path) as f:
                rec = json.load(f)
        except (OSError, ValueError):
            return None
        ok = isinstance(rec, dict) and isinstance(rec.get("taskId"), str) and \
            isinstance(rec.get("createdAt"), str)
        return rec if ok else None

    def _drop(self, task_id: str) -> None:
        try:
            os.unlink(self._path(task_id))
        except OSError:
            pass
