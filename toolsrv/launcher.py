# toolsrv/launcher.py — the server's side of the zygote (toolsrv/zygote.py).
#
# Theory of operation.  Launcher starts the zygote with subprocess.Popen (vfork + exec of
# `python -I -S`: flat cost whatever the server's size, and no preexec_fn), keeps one end of a
# SOCK_SEQPACKET socketpair, and watches it from the event loop with add_reader; a pidfd on the
# zygote tells when it is gone so it can be reaped.  spawn() is synchronous: it creates the
# three pipes, sends the request with the child ends as SCM_RIGHTS, closes those ends and
# returns a LaunchHandle whose one future the zygote's reply resolves:
#   exited -> (wait status, None) when the run has ended and its namespace is gone, or
#             (None, reason) when it could not be launched (or the zygote died)
# The zygote reports ended runs in batches ({"op": "exits", "runs": [[id, status], ...]}, one
# packet per reaping pass) and failed launches one by one ({"op": "error"}).  There is no
# "started" reply: a kill may be sent at any time after the spawn, because the zygote reads
# requests in order.  The future carries values, never exceptions, so a cancelled caller
# leaves nothing unretrieved.
# If the zygote dies, every pending handle ends with "launcher died" (the tools die with it:
# see zygote.py) and the next ensure() starts a new zygote.  Collector and Feeder pump a
# run's pipes from the event loop in CHUNK-sized steps, so memory per stream stays bounded.
from __future__ import annotations

import asyncio
import itertools
import json
import mmap
import os
import select
import socket
import subprocess
import sys

MAX_PACKET = 1 << 20
CHUNK = 65536  # pipe read/write size: bounds what one callback holds
MAX_FIXED = 32  # fixed path lists sent once and then named by reference
_ROOT = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
_BOOT = "import sys; sys.path.insert(0, sys.argv[4]); from toolsrv.zygote import main; " \
        "main(sys.argv[1:4])"


class LauncherDied(Exception):
    """The zygote is gone (or could not start)."""


class LaunchHandle:
    """One spawned run: our ends of its pipes and the zygote's answers."""

    def __init__(self, run_id: int, fds: tuple[int, int, int]) -> None:
        loop = asyncio.get_running_loop()
        self.id = run_id
        self.stdin, self.stdout, self.stderr = fds
        self.killed = False
        self.exited: asyncio.Future[tuple[int | None, str | None]] = loop.create_future()
        self._owned = True

    def taken(self) -> None:
        """The pumps own the pipe fds now; close_fds() leaves them alone."""
        self._owned = False

    def close_fds(self) -> None:
        if self._owned:
            for fd in (self.stdin, self.stdout, self.stderr):
                os.close(fd)
            self._owned = False

    def _set(self, fut: asyncio.Future, value: object) -> None:
        if not fut.done():
            fut.set_result(value)


class Launcher:
    """Client of one zygote process; restarts it on demand after it dies."""

    def __init__(self, rlimits: dict[str, int] | None = None, namespaces: bool = True,
                 python: str | None = None) -> None:
        self.python = python or sys.executable
        self.options = {"rlimits": {k: [v, v] for k, v in (rlimits or {}).items()},
                        "namespaces": namespaces}
        self.pidns = False
        self.netns = False
        self.zygote_pid: int | None = None
        self._sock: socket.socket | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._handles: dict[int, LaunchHandle] = {}
        self._ids = itertools.count(1)
        self._lock = asyncio.Lock()
        self._gone: asyncio.Future[None] | None = None
        self._fixed: list[list] = []  # fixed path lists this zygote has, by reference
        self._rbuf = mmap.mmap(-1, MAX_PACKET)  # replies land here (pages used on write)

    @property
    def alive(self) -> bool:
        return self._sock is not None

    async def ensure(self) -> None:
        """Start the zygote unless it runs."""
        if self._sock is not None:
            return
        async with self._lock:
            if self._sock is None:
                await self._start()

    async def _start(self) -> None:
        loop = asyncio.get_running_loop()
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            proc = subprocess.Popen(
                [self.python, "-I", "-S", "-c", _BOOT, str(child.fileno()), str(os.getpid()),
                 json.dumps(self.options), _ROOT], pass_fds=(child.fileno(),),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, start_new_session=True)
        finally:
            child.close()
        parent.setblocking(False)
        try:
            hello = json.loads(await asyncio.wait_for(loop.sock_recv(parent, MAX_PACKET), 20))
        except (TimeoutError, ValueError, OSError) as e:
            proc.kill()
            proc.wait()
            parent.close()
            raise LauncherDied(f"launcher did not start: {e!r}") from None
        self.pidns, self.netns = hello["pidns"], hello["netns"]
        self.zygote_pid = proc.pid
        self._sock, self._proc = parent, proc
        self._fixed = []
        self._gone = loop.create_future()
        pidfd = os.pidfd_open(proc.pid)
        loop.add_reader(pidfd, self._on_exit, pidfd, proc, self._gone)
        loop.add_reader(parent.fileno(), self._on_readable)

    def spawn(self, msg: dict, extra_fds: tuple[int, ...] = ()) -> LaunchHandle:
        """Send one spawn request; the handle's futures report its start and its end.

        `extra_fds` reach the tool as fds 3, 4, ...; the caller keeps and closes them."""
        if self._sock is None:
            raise LauncherDied("launcher not running")
        stdin_r, stdin_w = os.pipe2(os.O_CLOEXEC)
        stdout_r, stdout_w = os.pipe2(os.O_CLOEXEC)
        stderr_r, stderr_w = os.pipe2(os.O_CLOEXEC)
        child_ends = [stdin_r, stdout_w, stderr_w]
        handle = LaunchHandle(next(self._ids), (stdin_w, stdout_r, stderr_r))
        try:
            self._send({**self._by_ref(msg), "id": handle.id}, child_ends + list(extra_fds))
        except BaseException:
            handle.close_fds()
            raise
        finally:
            for fd in child_ends:
                os.close(fd)
        self._handles[handle.id] = handle
        return handle

    def _by_ref(self, msg: dict) -> dict:
        """The request with its Landlock rules' fixed paths (the first `cached`, the same in
        every call of a profile) replaced by a reference to a list sent once before."""
        rules = msg.get("landlock")
        if not rules or not rules.get("cached"):
            return msg
        n, paths = rules["cached"], rules["paths"]
        fixed = paths[:n]
        try:
            ref = self._fixed.index(fixed)
        except ValueError:
            if len(self._fixed) >= MAX_FIXED:
                return msg  # many profiles: send the paths inline
            ref = len(self._fixed)
            self._send({"op": "paths", "ref": ref, "paths": fixed}, [])
            self._fixed.append(fixed)
        return {**msg, "landlock": {**rules, "paths": paths[n:], "fixed": ref}}

    def kill(self, handle: LaunchHandle) -> None:
        """SIGKILL the run's whole tree (the zygote handles requests in order)."""
        handle.killed = True
        if not handle.exited.done() and self._sock is not None:
            try:
                self._send({"op": "kill", "id": handle.id}, [])
            except (OSError, LauncherDied):
                pass

    def _send(self, msg: dict, fds: list[int]) -> None:
        assert self._sock is not None
        data = json.dumps(msg).encode()
        while True:
            try:
                socket.send_fds(self._sock, [data], fds)
                return
            except BlockingIOError:  # the zygote is behind: wait for room, briefly
                if not select.select([], [self._sock], [], 5)[1]:
                    raise LauncherDied("launcher not accepting requests") from None
            except OSError as e:
                if e.errno == 90:  # EMSGSIZE
                    raise OSError(f"request too large ({len(data)} bytes)") from None
                self._died()
                raise LauncherDied(f"launcher died: {e}") from None

    def _on_readable(self) -> None:
        while self._sock is not None:
            try:  # into one buffer: recv(MAX_PACKET) would map 1 MiB and shrink it each time
                size = self._sock.recv_into(self._rbuf)
            except BlockingIOError:
                return
            except OSError:
                size = 0
            if not size:
                self._died()
                return
            self._dispatch(json.loads(self._rbuf[:size]))

    def _dispatch(self, msg: dict) -> None:
        if msg["op"] == "exits":  # [[run id, wait status], ...]: runs that have ended
            for run_id, status in msg["runs"]:
                handle = self._handles.pop(run_id, None)
                if handle is not None:
                    handle._set(handle.exited, (status, None))
            return
        if msg["op"] == "error":  # the run could not be launched
            handle = self._handles.pop(msg["id"], None)
            if handle is not None:
                handle._set(handle.exited, (None, msg["error"]))

    def _died(self) -> None:
        if self._sock is None:
            return
        asyncio.get_running_loop().remove_reader(self._sock.fileno())
        self._sock.close()
        self._sock = None
        handles, self._handles = self._handles, {}
        for h in handles.values():
            h._set(h.exited, (None, "launcher died"))
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()  # a zygote that broke the protocol must not linger

    def _on_exit(self, pidfd: int, proc: subprocess.Popen[bytes],
                 gone: asyncio.Future[None]) -> None:
        loop = asyncio.get_running_loop()
        loop.remove_reader(pidfd)
        os.close(pidfd)
        proc.wait()
        if proc is self._proc:
            self._died()
        if not gone.done():
            gone.set_result(None)

    async def close(self) -> None:
        """Kill all runs, wait for their ends (bounded), stop the zygote."""
        if self._sock is None:
            return
        handles = list(self._handles.values())
        for h in handles:
            self.kill(h)
        if handles:
            await asyncio.wait([h.exited for h in handles], timeout=5)
        gone = self._gone
        self._died()
        if gone is not None:
            await asyncio.wait({gone}, timeout=5)


class Collector:
    """Reads one pipe in bounded chunks; on overflow keeps cap bytes, calls on_overflow (which
    kills the run) and discards the rest until EOF."""

    def __init__(self, fd: int, cap: int, on_overflow: object) -> None:
        self.fd, self.cap, self.on_overflow = fd, cap, on_overflow
        self.chunks: list[bytes] = []
        self.size = 0
        self.overflow = False
        loop = asyncio.get_running_loop()
        self.done: asyncio.Future[None] = loop.create_future()
        os.set_blocking(fd, False)
        loop.add_reader(fd, self._readable)

    def _readable(self) -> None:
        try:
            data = os.read(self.fd, CHUNK)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self.stop()
            return
        if self.overflow:
            return  # discard until the kill lands, so the tool dies by it, not by SIGPIPE
        room = self.cap - self.size
        if len(data) > room:
            self.chunks.append(data[:room])
            self.size = self.cap
            self.overflow = True
            self.on_overflow()  # type: ignore[operator]
            return
        self.chunks.append(data)
        self.size += len(data)

    def stop(self) -> None:
        if self.fd >= 0:
            asyncio.get_running_loop().remove_reader(self.fd)
            os.close(self.fd)
            self.fd = -1
        if not self.done.done():
            self.done.set_result(None)

    def value(self) -> bytes:
        return b"".join(self.chunks)


class Feeder:
    """Writes stdin without blocking the loop; gives up quietly when the tool closes it."""

    def __init__(self, fd: int, data: bytes) -> None:
        self.fd, self.data = fd, memoryview(data)
        os.set_blocking(fd, False)
        self._write()
        if self.fd >= 0:
            asyncio.get_running_loop().add_writer(fd, self._write)

    def _write(self) -> None:
        try:
            while self.data:
                self.data = self.data[os.write(self.fd, self.data[:CHUNK]):]
        except BlockingIOError:
            return
        except OSError:
            pass
        self.stop()

    def stop(self) -> None:
        if self.fd >= 0:
            asyncio.get_running_loop().remove_writer(self.fd)
            os.close(self.fd)
            self.fd = -1
