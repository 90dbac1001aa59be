"""The directories toolsrv trusts (issue 20, section 2), with real servers as processes.

Each directory the server keeps things in (the work base /var/tmp/toolsrv.<uid>, the
state directory, the scratch base, the namespace directory, the approval broker's socket
directory) must be provably ours, or the server refuses to start and says which path is
wrong and why.  Tests that touch /var/tmp/toolsrv.0 itself run the server in a mount
namespace of its own with a private tmpfs on /var/tmp (as repro/workdir-race/vartmp.sh
does), so the host's is never changed.  The sweep: a crashed server without state leaves
its sessions' directories behind; the next server removes them, and leaves a live
server's alone.
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile

import pytest

from outside import OUTSIDE

from toolsrv.serve import dial
from toolsrv.dirs import trusted
from toolsrv.cli.client import Client, ClientError

from serverhelpers import wait_for

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOLS = os.path.join(REPO, "data", "tools")
NOBODY = 65534
BASE = f"/var/tmp/toolsrv.{os.geteuid()}"

as_root = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"),
                             reason="needs root and unshare(1) for a private /var/tmp")


@pytest.fixture
def tmp():
    d = tempfile.mkdtemp(prefix="td.", dir="/tmp")
    yield d
    shutil.rmtree(d, ignore_errors=True)


def serve_argv(tmp: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "toolsrv", "serve", "-a", f"unix!{tmp}/ns/toolsrv",
            "--tools", TOOLS, *extra]


def in_private_var_tmp(setup: str, argv: list[str]) -> list[str]:
    """argv run in a mount namespace of its own, on a fresh /var/tmp prepared by `setup`."""
    script = f'mount -t tmpfs tmpfs /var/tmp && chmod 1777 /var/tmp && {setup} && exec "$@"'
    return ["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh", *argv]


def refusal(argv: list[str], env: dict | None = None, timeout: float = 20) -> str:
    """The server's stderr once it has refused to start (exit 1); fails if it serves."""
    p = subprocess.Popen(argv, cwd=OUTSIDE, env=env, stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        _, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
        pytest.fail(f"the server started instead of refusing: {argv}")
    assert p.returncode == 1, err
    return err


# ----------------------------------------------------------------- the work base

@as_root
def test_work_base_made_first_by_another_user_is_refused(tmp):
    """repro/workdir-race/vartmp.sh: another user makes /var/tmp/toolsrv.0 before the
    server's first start, and would own the parent of every session's directory."""
    err = refusal(in_private_var_tmp(f"mkdir {BASE} && chown {NOBODY}:{NOBODY} {BASE}",
                                     serve_argv(tmp, "--no-state")))
    assert f"toolsrv: {BASE}: owned by uid {NOBODY} (nobody), not uid 0 (root) " \
           "(permission denied); remove it and start again" in err


@as_root
def test_work_base_that_is_a_symlink_is_refused(tmp):
    err = refusal(in_private_var_tmp(f"mkdir /var/tmp/elsewhere && ln -s elsewhere {BASE}",
                                     serve_argv(tmp, "--no-state")))
    assert f"{BASE}: a symbolic link, not a directory (permission denied)" in err


@as_root
def test_a_symlink_below_the_work_base_is_never_followed(tmp):
    """A server with state running tools as nobody keeps its sessions in <base>/work;
    a `work` that is a symlink (planted while someone else owned the base) is refused,
    not followed to where it points."""
    err = refusal(in_private_var_tmp(
        f"mkdir -m 711 {BASE} /var/tmp/elsewhere && ln -s ../elsewhere {BASE}/work",
        serve_argv(tmp, "--state", f"{tmp}/state")))
    assert f"{BASE}/work: a symbolic link, not a directory (permission denied)" in err


# ------------------------------------------------- the state and scratch bases

ROOT = os.geteuid() == 0
BY_NOBODY = pytest.param("owned-by-nobody", marks=pytest.mark.skipif(
    not ROOT, reason="chown to another uid needs root"))
ROOT_ONLY = pytest.mark.skipif(not ROOT, reason="chown to another uid needs root")


@pytest.mark.parametrize("how", [BY_NOBODY, "parent-open-to-all"])
def test_state_dir_not_ours_is_refused(tmp, how):
    state = os.path.join(tmp, "st")
    if how == "owned-by-nobody":
        os.mkdir(state)
        os.chown(state, NOBODY, NOBODY)
        want = f"{state}: owned by uid {NOBODY} (nobody)"
    else:
        os.chmod(tmp, 0o777)    # anyone could rename st away and put their own there
        want = f"{state}: {tmp} above it is writable by others and not sticky"
    err = refusal(serve_argv(tmp, "--state", state))
    assert want in err and "(permission denied)" in err
    assert not os.path.exists(os.path.join(state, "state.json"))


@pytest.mark.parametrize("how", [BY_NOBODY, "symlink"])
def test_scratch_base_not_ours_is_refused(tmp, how):
    """The scratch base ($XDG_RUNTIME_DIR/toolsrv-<uid> when that is a tmpfs) is checked
    at start, not on the first call."""
    run = tempfile.mkdtemp(prefix="td.", dir="/dev/shm")
    try:
        base = os.path.join(run, f"toolsrv-{os.geteuid()}")
        if how == "symlink":
            os.mkdir(os.path.join(run, "elsewhere"))
            os.symlink("elsewhere", base)
            want = f"{base}: a symbolic link, not a directory"
        else:
            os.mkdir(base)
            os.chown(base, NOBODY, NOBODY)
            want = f"{base}: owned by uid {NOBODY} (nobody)"
        env = {**os.environ, "XDG_RUNTIME_DIR": run}
        err = refusal(serve_argv(tmp, "--state", f"{tmp}/state"), env)
        assert want in err
    finally:
        shutil.rmtree(run, ignore_errors=True)


@ROOT_ONLY
def test_namespace_dir_below_another_users_directory_is_refused(tmp):
    theirs = os.path.join(tmp, "theirs")
    os.mkdir(theirs)
    os.mkdir(os.path.join(theirs, "ns"), 0o700)     # ours, but they could swap it
    os.chown(theirs, NOBODY, NOBODY)
    with pytest.raises(trusted.Untrusted, match=f"{theirs} above it is owned by uid {NOBODY}"):
        dial.ensure_private_dir(os.path.join(theirs, "ns"))


@ROOT_ONLY
def test_approval_broker_refuses_a_socket_directory_not_ours(tmp):
    """Whoever can change the broker's socket directory could put their own socket there
    and approve elevated calls."""
    d = os.path.join(tmp, "d")
    os.mkdir(d)
    os.chown(d, NOBODY, NOBODY)
    err = refusal([sys.executable, "-m", "toolsrv", "approve", "--allow", "x",
                   "--socket", os.path.join(d, "approve.sock")], timeout=10)
    assert f"toolsrv approve: {d}: owned by uid {NOBODY} (nobody)" in err


def test_approval_broker_leaves_the_mode_of_a_directory_of_ours_alone(tmp):
    """--socket in a directory the user already has: its mode is theirs (an 0755 project
    directory stays 0755, the socket itself is 0600); one that others may write is
    refused, not chmodded; a missing one is made 0700."""
    mine, shared, new = (os.path.join(tmp, n) for n in ("mine", "shared", "new"))
    os.mkdir(mine, 0o755)
    os.mkdir(shared)
    os.chmod(shared, 0o777)
    sock = os.path.join(mine, "approve.sock")
    p = subprocess.Popen([sys.executable, "-m", "toolsrv", "approve", "--allow", "x",
                          "--socket", sock], cwd=OUTSIDE, stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        assert wait_for(lambda: os.path.exists(sock) or p.poll() is not None, 30)
        assert os.path.exists(sock), p.stderr.read()
        assert oct(os.stat(mine).st_mode & 0o7777) == oct(0o755)
        assert oct(os.stat(sock).st_mode & 0o777) == oct(0o600)
    finally:
        p.terminate()
        p.communicate(timeout=30)
    err = refusal([sys.executable, "-m", "toolsrv", "approve", "--allow", "x",
                   "--socket", os.path.join(shared, "approve.sock")], timeout=10)
    assert f"toolsrv approve: {shared}: writable by others (mode 0777; permission denied)" in err
    assert oct(os.stat(shared).st_mode & 0o7777) == oct(0o777)
    p = subprocess.Popen([sys.executable, "-m", "toolsrv", "approve", "--allow", "x",
                          "--socket", os.path.join(new, "approve.sock")], cwd=OUTSIDE,
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True)
    try:
        assert wait_for(lambda: os.path.exists(os.path.join(new, "approve.sock"))
                        or p.poll() is not None, 30)
        assert oct(os.stat(new).st_mode & 0o7777) == oct(0o700)
    finally:
        p.terminate()
        p.communicate(timeout=30)


# --------------------------------------------------------------------- the sweep

class Server:
    """`toolsrv serve --no-state` as a process of its own."""

    def __init__(self, tmp: str, name: str) -> None:
        self.addr = f"unix!{tmp}/{name}/toolsrv"
        self.log_path = os.path.join(tmp, f"{name}.log")
        self.log = open(self.log_path, "w")
        argv = [sys.executable, "-m", "toolsrv", "serve", "-a", self.addr, "--tools", TOOLS,
                "--no-state"]
        self.p = subprocess.Popen(argv, cwd=OUTSIDE, stdin=subprocess.DEVNULL,
                                  stdout=subprocess.DEVNULL, stderr=self.log)
        assert wait_for(self._up, 30), self.stderr()

    def _up(self) -> bool:
        assert self.p.poll() is None, self.stderr()
        try:
            Client.connect(self.addr).close()
            return True
        except (OSError, ClientError):
            return False

    def session_cwd(self, name: str) -> str:
        with Client.connect(self.addr) as c:
            c.mkdir(f"session/{name}")
            return c.read(f"session/{name}/cwd").decode().strip()

    def stderr(self) -> str:
        """Its log so far, read through a file of our own (a seek on the one it writes
        through would move its offset too)."""
        with open(self.log_path) as f:
            return f.read()

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.p.poll() is None:
            self.p.send_signal(sig)
        self.p.wait(30)
        self.log.close()


def servers() -> list[int]:
    """Pids of this uid's processes that may run a toolsrv (`toolsrv serve`, a suite's
    in-process servers)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.stat(f"/proc/{pid}").st_uid != os.geteuid():
                continue
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if (b"serve" in argv and any(a.endswith(b"toolsrv") for a in argv)) or \
                any(a.endswith(b"pytest") for a in argv) and int(pid) != os.getpid():
            found.append(int(pid))
    return found


def test_a_crashed_servers_session_directories_are_swept_and_a_live_ones_kept(tmp):
    """A server without state killed with SIGKILL cannot remove its sessions' directories;
    a sweep (at the start of any server after that) does, and leaves a live server's."""
    live = Server(tmp, "b")
    crashed = later = None
    try:
        kept = live.session_cwd("y")
        crashed = Server(tmp, "a")
        gone = crashed.session_cwd("x")
        with open(os.path.join(gone, "left.txt"), "w") as f:
            f.write("what a tool wrote\n")
        assert os.path.isdir(gone) and os.path.isdir(kept)
        crashed.stop(signal.SIGKILL)          # no clean-up of its own
        server_dir = os.path.dirname(gone)    # removed, then its lock file
        others = set(servers()) - {live.p.pid, crashed.p.pid}
        later = Server(tmp, "c")               # its start sweeps
        swept = re.compile(r"swept the session directories of \d+ servers? without state")
        # Every server of this uid sweeps at its start (the base, /var/tmp/toolsrv.<euid>, is
        # the uid's, machine-wide): with other suites running, another may sweep first.
        mine = {live.p.pid, crashed.p.pid, later.p.pid}

        def done() -> bool:
            others.update(set(servers()) - mine)
            return not os.path.exists(gone) and not os.path.exists(server_dir + ".lock")
        assert wait_for(done, 60), f"{gone} left behind by a crashed server"
        assert not os.path.exists(server_dir)
        assert os.path.isdir(kept), "a live server's session directory was swept"
        if not others:    # then it was `later`, which logs it once through every directory
            assert wait_for(lambda: swept.search(later.stderr()), 60), \
                f"no sweep logged\n{later.stderr()}"
        live.stop()                            # a clean stop removes its own
        assert not os.path.exists(os.path.dirname(kept))
    finally:
        for s in (crashed, live, later):
            if s is not None and s.p.poll() is None:
                s.stop()
