# toolsrv/tree/resident/process.py — a resident tool process, and the lines protocol it speaks.
#
# Theory of operation.  A resident run is started exactly as a cold run is (Runner.
# open_resident: the same launcher, an init that is pid 1 of a PID namespace of its own, its
# cgroup, Landlock ruleset, uid, netns and seccomp filter); it differs only in that its
# stdin and stdout stay open and its init is not given another run until the process has
# ended (the init reports, and is reused, only once its namespace is empty).  `Process`
# owns our ends of the three pipes, from the event loop:
#   stdin   written without blocking (a queue of bytes; add_writer while it is not drained)
#   stdout  read in CHUNK reads into a buffer; `line()` hands out one complete line at a
#           time, and fails once a line grows past the output cap, at EOF, or once the
#           process has ended
#   stderr  read in CHUNK reads into the sink of the call that runs (capped), and a short
#           tail kept for the reason of a process that dies at start
# Ending: `kill()` is SIGKILL to the init through its pidfd (the kernel ends the namespace);
# `terminate(grace)` closes stdin, sends SIGTERM to the init's children (each through a
# pidfd opened and then checked to be a child of that init, so never a reused pid) and
# kills after `grace` seconds.
#
# The lines protocol (`lines_call`): the args as one line of compact JSON, then one line of
# JSON back: {"output": STRING} or {"error": STRING}.  Anything else (not JSON, not such an
# object, EOF, the process ending, a reply over the cap, the timeout, a kill) is a failure:
# the caller kills the process, and its next call gets a fresh one.
# The python protocol (`python_call`, tree/resident/pyhost.py on the other end) sends the
# script, its argv and the bytes a cold run reads on stdin, as one line of JSON, and reads
# back the run a cold start would have made: {"exit": N, "stdout": S, "stderr": S[, "truncated": "stdout"|"stderr"]}.
from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from typing import Any

from toolsrv.record import Record
from toolsrv.run.pumps import CHUNK, last_line, read_chunk

TAIL = 2048  # bytes of stderr kept for the reason of a process that ends


class Ended(Exception):
    """The process cannot answer: its reason names what happened."""


class Reply(Record):
    """One call's answer: `output` or `error` (the tool's own), or `failure` (the process
    broke the protocol or ended: it must go); `stderr` what it wrote meanwhile."""
    FIELDS = ("output", "error", "failure", "stderr", "timed_out", "cancelled", "truncated",
              "exit")

    def __init__(self, output: str | None = None, error: str | None = None,
                 failure: str | None = None, stderr: bytes = b"", timed_out: bool = False,
                 cancelled: bool = False, truncated: str | None = None,
                 exit: int | None = None) -> None:
        self.exit = exit                # protocol python: the run's status (output: stdout)
        self.output = output
        self.error = error
        self.failure = failure
        self.stderr = stderr
        self.timed_out = timed_out
        self.cancelled = cancelled
        self.truncated = truncated


class Process:
    """One resident process: our ends of its pipes, its lines, its end."""

    def __init__(self, launcher: Any, handle: Any, stdout_cap: int, stderr_cap: int) -> None:
        self.launcher, self.handle = launcher, handle
        self.stdout_cap, self.stderr_cap = stdout_cap, stderr_cap
        self.started = time.monotonic()
        self.calls = 0
        self._out = bytearray()
        self._scan = 0                  # bytes of _out known to hold no newline
        self._wake: asyncio.Future[None] | None = None
        self.eof = False
        self.overflow = False
        self.sink: bytearray | None = None   # the running call's stderr
        self.sink_cut = False
        self.tail = bytearray()
        self.why = ""                   # why toolsrv ended it (end), for exit_reason
        self._pending = bytearray()     # stdin not yet written
        self._writing = False
        loop = asyncio.get_running_loop()
        for fd in (handle.stdin, handle.stdout, handle.stderr):
            os.set_blocking(fd, False)
        loop.add_reader(handle.stdout, self._read_out)
        loop.add_reader(handle.stderr, self._read_err)
        self._timer: asyncio.TimerHandle | None = None
        handle.exited.add_done_callback(self._exited)

    # -- state --
    @property
    def alive(self) -> bool:
        return not self.handle.exited.done()

    def exit_reason(self) -> str:
        """Why the process is gone, in words: its exit status or signal, its last stderr."""
        if self.why:
            return f"ended by toolsrv: {self.why}"
        if not self.handle.exited.done():
            return "the process closed it" if self.eof else "process running"
        status, error = self.handle.exited.result()
        if error:
            return f"could not start: {error}"
        code = os.waitstatus_to_exitcode(status) if status is not None else 0
        why = f"process exited with status {code}" if code >= 0 else \
            f"process killed by signal {-code}"
        last = last_line(bytes(self.tail))
        return f"{why}: {last}" if last else why

    # -- stdin --
    @property
    def queued(self) -> int:
        """Bytes sent and not yet taken by the process."""
        return len(self._pending)

    def send(self, data: bytes) -> None:
        """Queue `data` for stdin; writes now what the pipe takes, the rest from the loop."""
        if self.handle.stdin < 0:
            raise Ended("stdin closed")
        self._pending += data
        self._write()

    def _write(self) -> None:
        fd = self.handle.stdin
        try:
            while self._pending and fd >= 0:
                n = os.write(fd, self._pending[:CHUNK])
                del self._pending[:n]
        except BlockingIOError:
            pass
        except OSError:           # the process closed its stdin, or is gone
            self._pending.clear()
        want = bool(self._pending) and fd >= 0
        if want != self._writing:
            loop = asyncio.get_running_loop()
            if want:
                loop.add_writer(fd, self._write)
            else:
                loop.remove_writer(fd)
            self._writing = want

    # -- stdout --
    def _read_out(self) -> None:
        data = read_chunk(self.handle.stdout)
        if data is None:
            return
        if not data:
            self.eof = True
            asyncio.get_running_loop().remove_reader(self.handle.stdout)
        elif not self.overflow:
            self._out += data
            if len(self._out) > self.stdout_cap and self._out.find(b"\n", self._scan) < 0:
                self.overflow = True
                self._out.clear()
        self._poke()

    def _poke(self) -> None:
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)

    async def line(self) -> bytes:
        """The next line of stdout (without its newline); raises Ended."""
        while True:
            i = self._out.find(b"\n", self._scan)
            if i >= 0:
                line = bytes(self._out[:i])
                del self._out[:i + 1]
                self._scan = 0
                if len(line) > self.stdout_cap:
                    self.overflow = True
                    raise Ended(f"reply over the output cap ({len(line)} bytes, cap "
                                f"{self.stdout_cap})")
                return line
            self._scan = len(self._out)
            if self.overflow:
                raise Ended(f"reply over the output cap ({self.stdout_cap} bytes)")
            if self.eof or not self.alive:
                if self.alive:
                    await asyncio.wait({self.handle.exited}, timeout=1.0)
                raise self._ended()
            await self._more()

    async def chunk(self) -> bytes:
        """Whatever stdout holds now (waiting for some), for a framed protocol (lsp);
        raises Ended at EOF or once the process has ended."""
        while not self._out:
            if self.eof or not self.alive:
                raise self._ended()
            await self._more()
        return self.leftover()

    def _ended(self) -> Ended:
        return Ended(f"EOF on stdout: {self.exit_reason()}" if self.eof else
                     self.exit_reason())

    async def _more(self) -> None:
        """Until _read_out has read more of stdout (or its end)."""
        self._wake = asyncio.get_running_loop().create_future()
        try:
            await self._wake
        finally:
            self._wake = None

    def leftover(self) -> bytes:
        """Output not asked for (written between calls); taken away."""
        out = bytes(self._out)
        self._out.clear()
        self._scan = 0
        return out

    # -- stderr --
    def _read_err(self) -> None:
        data = read_chunk(self.handle.stderr)
        if data is None:
            return
        if not data:
            asyncio.get_running_loop().remove_reader(self.handle.stderr)
            return
        self.tail += data
        del self.tail[:-TAIL]
        if self.sink is not None:
            room = self.stderr_cap - len(self.sink)
            if len(data) > room:
                self.sink_cut = True
            self.sink += data[:max(0, room)]

    def drain_err(self) -> None:
        """Read whatever stderr holds now (the call's last lines before its reply)."""
        for _ in range(64):
            if self.handle.stderr < 0:
                return
            before = len(self.tail)
            self._read_err()
            if len(self.tail) == before:
                return

    # -- ending --
    def kill(self) -> None:
        """SIGKILL the whole namespace (through the init's pidfd)."""
        if self.alive:
            self.launcher.kill(self.handle)

    def end(self, why: str) -> None:
        """Kill it for a reason of toolsrv's (a language server past its budget), which
        exit_reason then gives."""
        self.why = why
        self.kill()

    def terminate(self, grace: float) -> None:
        """EOF on stdin and SIGTERM now, SIGKILL after `grace` seconds."""
        if not self.alive:
            return
        self._close_stdin()
        for pidfd in _children_pidfds(self.handle):
            try:
                signal.pidfd_send_signal(pidfd, signal.SIGTERM)
            except OSError:
                pass
            finally:
                os.close(pidfd)
        self._timer = asyncio.get_running_loop().call_later(grace, self.kill)

    def _close_stdin(self) -> None:
        fd = self.handle.stdin
        if fd >= 0:
            if self._writing:
                asyncio.get_running_loop().remove_writer(fd)
                self._writing = False
            os.close(fd)
            self.handle.stdin = -1

    def _exited(self, _: Any) -> None:
        """The init reported the end (its namespace is empty): close our ends."""
        loop = asyncio.get_running_loop()
        if self._timer is not None:
            self._timer.cancel()
        self._close_stdin()
        for attr in ("stdout", "stderr"):
            fd = getattr(self.handle, attr)
            if fd >= 0:
                if attr == "stderr":
                    self.drain_err()
                else:
                    for _ in range(64):     # a reply written just before the end
                        if self.eof or self.overflow:
                            break
                        before = len(self._out)
                        self._read_out()
                        if len(self._out) == before:
                            break
                loop.remove_reader(fd)
                os.close(fd)
                setattr(self.handle, attr, -1)
        self._poke()


def _children_pidfds(handle: Any) -> list[int]:
    """pidfds on the init's children, each checked to be its child after it was opened."""
    init = getattr(handle, "_init", None)
    if init is None:
        return []
    try:
        with open(f"/proc/self/fdinfo/{init.pidfd}") as f:
            pid = next(int(ln.split()[1]) for ln in f if ln.startswith("Pid:"))
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            kids = [int(k) for k in f.read().split()]
    except (OSError, StopIteration, ValueError):
        return []
    out = []
    for kid in kids:
        try:
            fd = os.pidfd_open(kid)
        except OSError:
            continue
        try:
            with open(f"/proc/{kid}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            ppid = -1
        if ppid == pid:
            out.append(fd)
        else:
            os.close(fd)
    return out


def quote(data: bytes, n: int = 40) -> str:
    """The first bytes of a reply, quoted, for a reason."""
    text = repr(data[:n])[1:]
    return text + ("..." if len(data) > n else "")


async def answer(proc: Process, timeout: float, kill: asyncio.Event | None,
                 read: Any) -> tuple[Any, Reply]:
    """Run `read()` (a coroutine reading the reply) under the call's timeout and kill;
    (its value or None, the Reply with stderr and how it ended)."""
    rep = Reply()
    proc.sink, proc.sink_cut = bytearray(), False
    task = asyncio.ensure_future(read())
    waits: set[asyncio.Future[Any]] = {task}
    killer = asyncio.ensure_future(kill.wait()) if kill is not None else None
    if killer is not None:
        waits.add(killer)
    value = None
    try:
        done, _ = await asyncio.wait(waits, timeout=timeout,
                                     return_when=asyncio.FIRST_COMPLETED)
        if task in done:
            try:
                value = task.result()
            except Ended as e:
                rep.failure = str(e)
                rep.truncated = "stdout" if proc.overflow else None
        elif killer is not None and killer in done:
            rep.cancelled = True
        else:
            rep.timed_out = True
            rep.failure = f"timeout after {timeout:g}s"
    finally:
        if not task.done():
            task.cancel()
        if killer is not None:
            killer.cancel()
        proc.drain_err()
        rep.stderr = bytes(proc.sink or b"")
        if proc.sink_cut and rep.truncated is None:
            rep.truncated = "stderr"
        proc.sink = None
    return value, rep


async def exchange(proc: Process, line: bytes, timeout: float,
                   kill: asyncio.Event | None) -> tuple[Any, bytes | None, Reply]:
    """Send one request line and read the reply line: (its JSON or None when it is not
    JSON, the raw line or None when the call failed or ended, the Reply so far)."""
    extra = proc.leftover()
    if extra:
        return None, None, Reply(failure=f"output between calls: {quote(extra)}")
    try:
        proc.send(line)
    except Ended as e:
        return None, None, Reply(failure=str(e))
    raw, rep = await answer(proc, timeout, kill, proc.line)
    if raw is None:
        return None, None, rep
    try:
        return json.loads(raw), raw, rep
    except ValueError:
        return None, raw, rep


async def lines_call(proc: Process, line: bytes, timeout: float,
                     kill: asyncio.Event | None = None) -> Reply:
    """One call of the lines protocol; see the module's header."""
    msg, raw, rep = await exchange(proc, line + b"\n", timeout, kill)
    if raw is None:
        return rep
    if isinstance(msg, dict) and len(msg) == 1 and isinstance(msg.get("output"), str):
        rep.output = msg["output"]
    elif isinstance(msg, dict) and len(msg) == 1 and isinstance(msg.get("error"), str):
        rep.error = msg["error"]
    else:
        rep.failure = ('reply is not {"output": STRING} or {"error": STRING}: '
                       f"{quote(raw)}")
        return rep
    proc.calls += 1
    return rep


SE = "surrogateescape"    # pyhost.py's strings carry bytes that are not UTF-8 this way


async def python_call(proc: Process, line: bytes, timeout: float,
                      kill: asyncio.Event | None = None) -> Reply:
    """One call of the python protocol (`line`: pyrun.call_line's); see the header."""
    msg, raw, rep = await exchange(proc, line, timeout, kill)
    if raw is None:
        return rep
    if not (isinstance(msg, dict) and type(msg.get("exit")) is int
            and isinstance(msg.get("stdout"), str) and isinstance(msg.get("stderr"), str)
            and msg.get("truncated") in (None, "stdout", "stderr")):
        rep.failure = ('reply is not {"exit": N, "stdout": STRING, "stderr": STRING}: '
                       f"{quote(raw)}")
        return rep
    rep.exit, rep.output, rep.truncated = msg["exit"], msg["stdout"], msg.get("truncated")
    rep.stderr = msg["stderr"].encode("utf-8", SE) + rep.stderr
    proc.calls += 1
    return rep
