"""What the shell user's tests share: a `toolsrv serve` of its own, a real 9pfuse mount
(plan9port), and shell commands that cannot hang the suite.

9pfuse is looked for as `toolsrv mount` looks for it: on $PATH, else in $PLAN9/bin
($PLAN9 defaulting to /usr/local/plan9).  `fuse_missing()` names what is missing, for
the skip.  A mount is always undone, by `fusermount3 -u`, else `umount -l`.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from typing import Any, Iterator

from apphelpers import add_tool
from outside import OUTSIDE

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOLSRV = [sys.executable, "-m", "toolsrv"]


def fuse_missing() -> str | None:
    """Why a 9pfuse mount cannot be made here, or None."""
    from toolsrv.cli.mount import find_9pfuse
    if find_9pfuse() is None:
        return ("9pfuse not found (on PATH, or in $PLAN9/bin, PLAN9 defaulting to "
                "/usr/local/plan9): build plan9port to run the tests through a real mount")
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse: FUSE is not available here"
    if not os.access("/dev/fuse", os.R_OK | os.W_OK):
        return (f"uid {os.getuid()} may not open /dev/fuse (mode "
                f"{oct(os.stat('/dev/fuse').st_mode & 0o777)}): mount as root, or get access")
    if not (shutil.which("fusermount3") or shutil.which("fusermount")):
        return "no fusermount3: install fuse3 to run the tests through a real mount"
    return None


@contextlib.contextmanager
def serving(*args: str, tools: dict[str, tuple[str | None, dict]] | None = None,
            **env_extra: str) -> Iterator[tuple[dict, str, subprocess.Popen]]:
    """`toolsrv serve ARGS` with a home of its own, until its banner has been printed:
    (env, banner, process).  `tools` are put in the home's ~/.config/ollie/tools (name:
    (script, meta)), reachable by the uid tools run as.  Stopped with SIGTERM afterwards;
    its exit status is then in process.returncode."""
    home = tempfile.mkdtemp(prefix="home.", dir="/tmp")
    env = {k: v for k, v in os.environ.items() if k not in ("OLLIE_TOOLS_PATH", "TOOLSRV_ADDR")}
    env.update(HOME=home, NAMESPACE=os.path.join(home, "ns"),
               XDG_STATE_HOME=os.path.join(home, "state"), **env_extra)
    if tools:
        d = os.path.join(home, ".config", "ollie", "tools")
        os.makedirs(d)
        for p in (home, os.path.dirname(os.path.dirname(d)), os.path.dirname(d), d):
            os.chmod(p, 0o755)
        for name, (script, meta) in tools.items():
            add_tool(d, name, script, meta)
    p = subprocess.Popen(TOOLSRV + ["serve", *args], env=env, cwd=OUTSIDE,
                         stderr=subprocess.PIPE, text=True)
    try:
        banner = []
        assert p.stderr is not None
        for line in p.stderr:                 # the banner ends with the log example
            banner.append(line)
            if "agent/me/log" in line:
                break
        yield env, "".join(banner), p
    finally:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
        try:
            p.wait(20)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        shutil.rmtree(home, ignore_errors=True)


def toolsrv_on_path(env: dict, where: str) -> dict:
    """env with a `toolsrv` command first on PATH: this checkout's, run by this python."""
    os.makedirs(where, exist_ok=True)
    exe = os.path.join(where, "toolsrv")
    with open(exe, "w") as f:
        f.write(f"#!/bin/sh\nexec {sys.executable} -m toolsrv \"$@\"\n")
    os.chmod(exe, 0o755)
    return dict(env, PATH=f"{where}:{env.get('PATH', '/usr/bin:/bin')}")


def unmount(mountpoint: str) -> None:
    """Undo a FUSE mount, whatever state it is in (busy, or its 9pfuse gone)."""
    for cmd in (["fusermount3", "-u"], ["fusermount", "-u"], ["umount", "-l"]):
        if not os.path.ismount(mountpoint):
            return
        if shutil.which(cmd[0]):
            subprocess.run(cmd + [mountpoint], capture_output=True, timeout=30)


@contextlib.contextmanager
def mounted(env: dict, mountpoint: str | None = None) -> Iterator[str]:
    """The server of env mounted with `toolsrv mount` (real 9pfuse); unmounted after."""
    mp = mountpoint or os.path.join(env["HOME"], "mnt", "toolsrv")
    r = subprocess.run(TOOLSRV + ["mount", mp], env=env, cwd=REPO, capture_output=True,
                       text=True, timeout=60)
    try:
        assert r.returncode == 0, r.stderr
        assert os.path.ismount(mp)
        yield mp
    finally:
        unmount(mp)


@contextlib.contextmanager
def mounted_or_skip(env: dict) -> Iterator[str]:
    """mounted(env), or the test skipped where there is no FUSE (fuse_missing says why)."""
    why = fuse_missing()
    if why:
        import pytest
        pytest.skip(why)
    with mounted(env) as m:
        yield m


def sh(script: str, env: dict, cwd: str = REPO, timeout: float = 60,
       check: bool = False) -> subprocess.CompletedProcess:
    """Run script with bash in a process group of its own.  Past `timeout` the whole group
    is killed and the test fails, saying so: a spinning or hanging program never hangs the
    suite (a reader stuck in a FUSE request dies when its request is answered)."""
    p = subprocess.Popen(["bash", "-c", script], env=env, cwd=cwd, stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        raise AssertionError(f"still running after {timeout:g}s, killed:\n{script}\n"
                             f"stdout: {out[-2000:]}\nstderr: {err[-2000:]}") from None
    r = subprocess.CompletedProcess(p.args, p.returncode, out, err)
    if check:
        assert r.returncode == 0, f"{script}\nexit {r.returncode}\nstdout: {out}\nstderr: {err}"
    return r


def wait_until(pred: Any, limit: float = 15.0) -> bool:
    import time
    end = time.monotonic() + limit
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.05)
    return False
