# toolsrv/run/handle.py — one init as the server holds it, and one run's handle.
#
# Theory of operation.  The launcher (toolsrv/run/launcher.py) keeps idle inits as Spare:
# the init's socket and a pidfd on it (and, for a warm init, its kind).  A run given to an
# init is a LaunchHandle: our ends of its pipes and one future that the init's report
# resolves — b"S<status>" (ended, nothing of it left), b"E<reason>" (a launch step failed);
# a warm init also says b"W" once it is up, or b"F<reason>" when it could not become warm.
# No report and the pidfd readable means the init died: a kill of ours, or not.
from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from toolsrv.run.warmplan import WarmKind

PAGE = os.sysconf("SC_PAGE_SIZE")


def _pss_kib(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
            for line in f:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def _rss(pid: int | None) -> int:
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:
            return int(f.read().split()[1]) * PAGE
    except (OSError, ValueError, IndexError):
        return 0


class Spare:
    """An init waiting for a run: its socket and a pidfd on it; `kind` is the warm key of
    a warm init (toolsrv/run/init/warm.py), None for a cold one."""

    __slots__ = ("sock", "pidfd", "known", "kind", "rss", "measured", "_pid")

    def __init__(self, sock: socket.socket, pidfd: int) -> None:
        self.sock, self.pidfd = sock, pidfd
        self.known: set[tuple[int, int]] = set()  # the fixed path lists it has been sent
        self.kind: WarmKind | None = None
        self.rss = 0  # bytes it holds (measure(): PSS, standby included), as it went idle
        self.measured = float("-inf")  # when it was read (the loop's clock)
        self._pid: int | None = None

    def measure(self, now: float, every: float) -> int:
        """The memory it holds, in bytes: the proportional set size (PSS: each page shared
        with other processes counted as a share) of the init and of its children (a warm
        init's standby, forked ahead for its next call), read again if `every` seconds have
        passed since the last reading.  A warm init does not grow between calls (each runs
        in a child), so a reading a second bounds it as well as one per call.  Its RSS
        when PSS cannot be read; 0 when neither can."""
        if now - self.measured < every:
            return self.rss
        self.measured = now
        if self._pid is None:
            self._pid = self.pid()  # a pidfd's process keeps its pid while it lives
        pid = self._pid
        if pid is None:     # gone: neither can be read (int(None) below raised TypeError)
            return 0
        try:
            with open(f"/proc/{pid}/task/{pid}/children", "rb") as f:
                kids = f.read().split()
        except OSError:
            kids = []
        total = 0
        for p in (pid, *[int(k) for k in kids]):
            kib = _pss_kib(p)
            if kib is None:
                return _rss(pid)
            total += kib << 10
        return total

    def pid(self) -> int | None:
        """The init's pid (in our namespace), from its pidfd."""
        try:
            with open(f"/proc/self/fdinfo/{self.pidfd}") as f:
                for line in f:
                    if line.startswith("Pid:"):
                        pid = int(line.split()[1])
                        return pid if pid > 0 else None
        except (OSError, ValueError):
            pass
        return None

    def close(self) -> None:
        self.sock.close()
        os.close(self.pidfd)


class LaunchHandle:
    """One spawned run: our ends of its pipes, its init, and the init's answer."""

    def __init__(self, run_id: int, fds: tuple[int, int, int]) -> None:
        loop = asyncio.get_running_loop()
        self.id = run_id
        self.stdin, self.stdout, self.stderr = fds
        self.killed = False
        self.exited: asyncio.Future[tuple[int | None, str | None]] = loop.create_future()
        self._owned = True
        self.knows: tuple[int, int] | None = None  # the fixed path list sent with it, if any
        self._init: Spare | None = None
        self._release: Callable[[Spare], None] | None = None
        self.warm: WarmKind | None = None  # the warm kind it runs in, if any
        self.warming = False  # its init was turned warm for it: its first warm run
        self.resident = False  # a resident tool's process (Runner.open_resident), not a call
        self.warm_failed: str | None = None  # why that init could not become warm
        self.magic: str | None = None  # the bytecode magic its interpreter said it runs

    def attach(self, init: Spare, release: Callable[[Spare], None]) -> None:
        """The init has the run: wait for its report (and kill it if a kill came first);
        `release` takes the init back once it has reported (its namespace is empty)."""
        self._init, self._release = init, release
        asyncio.get_running_loop().add_reader(init.sock.fileno(), self._on_report)
        if self.killed:
            self._kill()

    def _on_report(self) -> None:
        assert self._init is not None
        try:
            data = self._init.sock.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if data.startswith(b"S"):
            self._set((int(data[1:]), None), reusable=True)
        elif data.startswith(b"E"):
            self._set((None, json.loads(data[1:])), reusable=True)
        elif data.startswith(b"F"):  # it could not become warm; it ends now
            self.warm_failed = str(json.loads(data[1:]))
        elif data.startswith(b"W"):  # it became warm: it takes the run now
            self.warming = False
            self.magic = data[1:].decode("ascii", "replace")
        else:  # it ended without a word (killed): done once its namespace is empty
            loop = asyncio.get_running_loop()
            loop.remove_reader(self._init.sock.fileno())
            loop.add_reader(self._init.pidfd, self._on_gone)

    def _on_gone(self) -> None:
        if self.killed:
            self._set((signal.SIGKILL, None))
        elif self.warming and self.warm_failed is None:
            self.warm_failed = "the warm interpreter ended before its first run"
            self._set((None, self.warm_failed))
        elif self.warm_failed is not None:
            self._set((None, self.warm_failed))
        elif self.warm is not None:
            self._set((None, "the run's warm interpreter ended before it reported"))
        else:
            self._set((None, "the run's init ended before it reported"))

    def _kill(self) -> None:
        if self._init is not None and not self.exited.done():
            try:
                signal.pidfd_send_signal(self._init.pidfd, signal.SIGKILL)
            except OSError:
                pass

    def taken(self) -> None:
        """The pumps own the pipe fds now; close_fds() leaves them alone."""
        self._owned = False

    def close_fds(self) -> None:
        if self._owned:
            for fd in (self.stdin, self.stdout, self.stderr):
                os.close(fd)
            self._owned = False

    def _set(self, value: tuple[int | None, str | None], reusable: bool = False) -> None:
        if not self.exited.done():
            self.exited.set_result(value)
        init, self._init = self._init, None
        if init is not None:
            loop = asyncio.get_running_loop()
            loop.remove_reader(init.sock.fileno())
            loop.remove_reader(init.pidfd)
            if reusable and not self.killed and self._release is not None:
                self._release(init)  # its namespace is empty: ready for another run
            else:
                init.close()
