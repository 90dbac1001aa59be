"""The server never opens, stats or follows, with its own credentials, a path a tool can
change (issue 25, section 1; shared/repro/round3/kmsg_hang.sh, root_read_race.sh).

A tool whose `cmd` is `python3 job.py` runs a script from the session's cwd, which the
model can replace.  Against a real server, warm and cold:
- job.py is a symlink to a file outside the sandbox's grants (root's own, 0600, when the
  server is root) watched with inotify: nothing opens it during the call, and its text
  reaches nobody;
- job.py is a regular file whose open waits (a write lease held by the test: as
  /proc/kmsg's read waits for a kernel message), or a FIFO: the call's own process waits on
  it, and meanwhile another client's read of `revision` and `status` answers at once.
"""
from __future__ import annotations

import ctypes
import fcntl
import os
import secrets
import signal
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
from sandbox_support import LANDLOCK, NO_LANDLOCK  # noqa: E402
from shellhelpers import REPO, TOOLSRV, serving  # noqa: E402

pytestmark = pytest.mark.skipif(LANDLOCK.abi < 1, reason=NO_LANDLOCK)

IN_ACCESS, IN_OPEN, IN_NONBLOCK = 0x1, 0x20, 0o4000
CWDPY = {"description": "run the project's job script", "cmd": "python3 job.py",
         "args": {"type": "object"}}


class Watch:
    """inotify on one file: did anything open or read it since the watch began?"""

    def __init__(self, path: str) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        self.fd = libc.inotify_init1(IN_NONBLOCK)
        assert self.fd >= 0, os.strerror(ctypes.get_errno())
        wd = libc.inotify_add_watch(self.fd, path.encode(), IN_OPEN | IN_ACCESS)
        assert wd >= 0, os.strerror(ctypes.get_errno())

    def events(self) -> list[int]:
        out = []
        try:
            data = os.read(self.fd, 65536)
        except BlockingIOError:
            return out
        while data:
            _wd, mask, _cookie, n = struct.unpack_from("iIII", data)
            out.append(mask)
            data = data[16 + n:]
        return out

    def close(self) -> None:
        os.close(self.fd)


@pytest.fixture(scope="module", params=["warm", "cold"])
def srv(request) -> Iterator[dict]:
    extra = ["--no-warm"] if request.param == "cold" else []
    with serving("--no-state", "--timeout", "60", *extra,
                 tools={"cwdpy": (None, CWDPY)}) as (env, _banner, _p):
        env["MODE"] = request.param
        yield env


@pytest.fixture
def cwd() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="cwd.", dir="/tmp"))
    d.chmod(0o777)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def ts(env: dict, *argv: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(TOOLSRV + list(argv), env=env, cwd=REPO, capture_output=True,
                          text=True, timeout=timeout)


def test_a_job_py_link_to_a_private_file_is_never_opened_by_the_server(srv, cwd):
    hidden = Path(tempfile.mkdtemp(prefix="private.", dir="/tmp"))
    try:
        mark = "PRIVATE-" + secrets.token_hex(6)
        secret = hidden / "secret.py"
        secret.write_text(f"print({mark[:8]!r} + {mark[8:]!r})\n")
        secret.chmod(0o600)
        (cwd / "ok.py").write_text("print('the model\\'s own script')\n")
        job = cwd / "job.py"
        job.symlink_to("ok.py")
        r = ts(srv, "call", "--cwd", str(cwd), "link", "a", "cwdpy", "{}")
        assert r.returncode == 0 and r.stdout == "the model's own script\n", r
        job.unlink()
        job.symlink_to(secret)
        watch = Watch(str(secret))
        try:
            for _ in range(3):          # a warm start's cache, were there one, is filled
                r = ts(srv, "call", "--cwd", str(cwd), "link", "a", "cwdpy", "{}")
                assert r.returncode != 0 and "can't open file" in r.stderr, r
                assert mark not in r.stdout + r.stderr, r
            assert watch.events() == [], f"{srv['MODE']}: something opened {secret}"
        finally:
            watch.close()
        assert secret.read_text().startswith("print(")   # still there, still readable
    finally:
        shutil.rmtree(hidden, ignore_errors=True)


def wait_for_reader(fifo: Path, limit: float = 60.0) -> int:
    """A writer's fd on fifo, once something has opened it to read (ENXIO until then)."""
    end = time.monotonic() + limit
    while True:
        try:
            return os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as e:
            if e.errno != 6 or time.monotonic() > end:   # ENXIO: no reader yet
                raise
        time.sleep(0.02)


def test_a_job_py_fifo_blocks_only_its_own_call(srv, cwd):
    fifo = cwd / "job.py"
    os.mkfifo(fifo)
    fifo.chmod(0o666)
    call = subprocess.Popen(TOOLSRV + ["call", "--cwd", str(cwd), "fifo", "a", "cwdpy", "{}"],
                            env=srv, cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    w = -1
    try:
        w = wait_for_reader(fifo)         # the call's reader is waiting on it now
        t0 = time.monotonic()
        r = ts(srv, "read", "revision", timeout=30)
        took = time.monotonic() - t0
        assert r.returncode == 0 and r.stdout.strip(), r
        assert call.poll() is None, "the call ended before the revision read"
        r = ts(srv, "read", "status", timeout=30)
        assert r.returncode == 0, r
        print(f"{srv['MODE']}: revision answered in {took * 1e3:.0f} ms during the call")
        os.write(w, b"print('from the fifo')\n")
        os.close(w)
        w = -1
        out, err = call.communicate(timeout=60)
        assert call.returncode == 0 and out == "from the fifo\n", (out, err)
    finally:
        if w >= 0:
            os.close(w)
        if call.poll() is None:
            call.kill()
            call.wait()


F_SETLEASE, F_GETLEASE = 1024, 1025


def test_a_job_py_whose_open_waits_blocks_only_its_own_call(srv, cwd):
    """The write lease makes any open of job.py wait until the test lets go (the kernel's
    lease break, up to /proc/sys/fs/lease-break-time); SIGIO says someone began to."""
    job = cwd / "job.py"
    job.write_text("print('after the lease')\n")
    job.chmod(0o644)
    opened = threading.Event()
    old = signal.signal(signal.SIGIO, lambda *_: opened.set())
    fd = os.open(job, os.O_RDWR)
    call = None
    try:
        fcntl.fcntl(fd, F_SETLEASE, fcntl.F_WRLCK)
        call = subprocess.Popen(TOOLSRV + ["call", "--cwd", str(cwd), "lease", "a", "cwdpy",
                                           "{}"], env=srv, cwd=REPO, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        assert opened.wait(60), "nothing opened job.py"
        r = ts(srv, "read", "revision", timeout=30)    # the server is not the one waiting
        assert r.returncode == 0 and r.stdout.strip(), r
        assert ts(srv, "read", "status", timeout=30).returncode == 0
        assert call.poll() is None, "the call ended while job.py could not be opened"
        fcntl.fcntl(fd, F_SETLEASE, fcntl.F_UNLCK)
        out, err = call.communicate(timeout=60)
        assert call.returncode == 0 and out == "after the lease\n", (out, err)
    finally:
        os.close(fd)
        signal.signal(signal.SIGIO, old)
        if call is not None and call.poll() is None:
            call.kill()
            call.wait()
