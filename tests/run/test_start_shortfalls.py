"""What a container may withhold, said at start and never a crash (issue 52): a root server
without CAP_SYS_ADMIN (its runs' namespaces then come through a user namespace that maps
root alone, where the switch to the tools' uid fails: every call is refused) says so in its
banner and in `toolsrv sandbox check`, rather than claiming a PID namespace, the uid drop and
"verdict: enforced"; a hard RLIMIT_NOFILE and RLIMIT_NPROC under the 4096 runs are given
are what runs get, said once, and the tools answer; and the CLI of a uid with no passwd entry
and no $USER or $LOGNAME works, its uname uid:NNNN.  Real processes: the capability is
dropped with setpriv (util-linux), the limits set with prlimit."""
from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
from sandbox_support import LANDLOCK, NO_LANDLOCK  # noqa: E402
from serverhelpers import wait_for  # noqa: E402

TOOLSRV = [sys.executable, "-m", "toolsrv"]
REPO = str(Path(__file__).resolve().parents[2])
NO_SYS_ADMIN = ["setpriv", "--inh-caps=-sys_admin", "--bounding-set=-sys_admin"]
root = pytest.mark.skipif(os.geteuid() != 0, reason="drops a capability root has: run as "
                          "root")
landlock = pytest.mark.skipif(LANDLOCK.abi < 1, reason=NO_LANDLOCK)


def _needs(tool: str) -> None:
    if not shutil.which(tool):
        pytest.skip(f"no {tool} (util-linux) here")


@pytest.fixture
def home() -> Iterator[str]:
    """A home of the server's own, outside the checkout and pytest's 0700 tmp_path."""
    d = tempfile.mkdtemp(prefix="shortfall.", dir="/tmp")
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _env(home: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OLLIE_TOOLS_PATH", "TOOLSRV_ADDR")}
    env.update(HOME=home, NAMESPACE=os.path.join(home, "ns"),
               XDG_STATE_HOME=os.path.join(home, "state"), **extra)
    return env


class Served:
    """`TOOLSRV serve --no-state ARGS` in `home` (TOOLSRV: how to run toolsrv, under
    setpriv or prlimit); .banner once it has printed it."""

    def __init__(self, toolsrv: list[str], env: dict[str, str], home: str,
                 *args: str) -> None:
        self.p = subprocess.Popen(toolsrv + ["serve", "--no-state", *args], env=env,
                                  cwd=home, stderr=subprocess.PIPE, text=True)
        assert self.p.stderr is not None
        lines = []
        for line in self.p.stderr:             # the banner ends with the log example
            lines.append(line)
            if "agent/me/log" in line:
                break
        self.banner = "".join(lines)
        assert "agent/me/log" in self.banner, self.banner

    def stop(self) -> None:
        self.p.terminate()
        try:
            self.p.wait(20)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()


def _work(home: str) -> str:
    """A cwd the tools' uid reaches as it is (no idmapped mount needed)."""
    os.chmod(home, 0o755)
    work = os.path.join(home, "work")
    os.mkdir(work)
    os.chmod(work, 0o777)
    return work


def _call(env: dict, cwd: str, command: str) -> subprocess.CompletedProcess:
    return subprocess.run([*TOOLSRV, "call", "--cwd", cwd, "s", "a", "shell",
                           json.dumps({"command": command})], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=60)


def _no_userns_without_sys_admin() -> str | None:
    r = subprocess.run(NO_SYS_ADMIN + ["unshare", "--user", "true"], capture_output=True)
    return None if r.returncode == 0 else ("no user namespace without CAP_SYS_ADMIN here: "
                                           "runs get no PID namespace, and the uid switch works")


@root
@landlock
def test_without_cap_sys_admin_the_banner_and_check_say_every_call_is_refused(home: str
                                                                               ) -> None:
    _needs("setpriv")
    why = _no_userns_without_sys_admin()
    if why:
        pytest.skip(why)
    work = _work(home)
    env = _env(home)
    r = subprocess.run(NO_SYS_ADMIN + TOOLSRV + ["sandbox", "check"], env=env, cwd=home,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "verdict: enforced" not in r.stdout, r
    assert "  pid namespace per run: no (no run starts: the uid switch fails)" in r.stdout
    assert "  tools run as uid 65534: no (setgroups: Operation not permitted)" in r.stdout
    assert ("verdict: refused: every call: tools run as uid 65534, and the switch to it "
            "fails here (setgroups: Operation not permitted): without CAP_SYS_ADMIN the "
            "runs' namespaces are made in a user namespace that maps root alone; the "
            "remedy: --cap-add SYS_ADMIN in a container, or serve as an ordinary user "
            "(tools then run as it)") in r.stdout.splitlines(), r.stdout
    srv = Served(NO_SYS_ADMIN + TOOLSRV, env, home)
    try:
        assert "pid namespace per run: yes" not in srv.banner, srv.banner
        assert "tools run as uid 65534;" not in srv.banner, srv.banner
        assert "pid namespace per run: no (no run starts: the uid switch fails)" in srv.banner
        assert "tools run as uid 65534: no (setgroups: Operation not permitted)" in srv.banner
        assert ("toolsrv: every call is refused: tools run as uid 65534, and the switch to "
                "it fails here (setgroups: Operation not permitted): without CAP_SYS_ADMIN "
                "the runs' namespaces are made in a user namespace that maps root alone; the "
                "remedy: --cap-add SYS_ADMIN in a container, or serve as an ordinary user "
                "(tools then run as it)") in srv.banner.splitlines(), srv.banner
        r = _call(env, work, "id -u")           # as it said: refused
        assert r.returncode != 0 and "setgroups: Operation not permitted" in r.stderr, r
    finally:
        srv.stop()
    r = subprocess.run(TOOLSRV + ["sandbox", "check"], env=env, cwd=home,
                       capture_output=True, text=True, timeout=60)
    assert "  tools run as uid 65534\n" in r.stdout and "every call" not in r.stdout, r


@landlock
def test_a_hard_limit_under_4096_is_what_runs_get_and_said_once(home: str) -> None:
    _needs("prlimit")
    work = _work(home)
    env = _env(home)
    srv = Served(["prlimit", "--nofile=1024:1024", "--nproc=1024:1024", *TOOLSRV], env, home)
    try:
        assert "Traceback" not in srv.banner, srv.banner
        said = [ln for ln in srv.banner.splitlines() if "runs get" in ln]
        assert said == ["toolsrv: runs get nofile 1024, not 4096; nproc 1024, not 4096: the "
                        "server's hard limits (raise them before the server starts: prlimit, "
                        "or --ulimit in a container)"], srv.banner
        r = _call(env, work, "ulimit -Hn; ulimit -n")
        assert r.returncode == 0 and r.stdout.split()[:2] == ["1024", "1024"], r
    finally:
        srv.stop()


def _unlisted_uid() -> int:
    for uid in range(4242, 4342):
        try:
            pwd.getpwuid(uid)
        except KeyError:
            return uid
    pytest.skip("no uid without a passwd entry in 4242-4341")


@root
def test_a_uid_without_a_passwd_entry_uses_the_cli(home: str) -> None:
    """No $USER, no $LOGNAME, no passwd entry: getpass.getuser() raises; the CLI names the
    uid (uid:NNNN) instead, in its uname and in its default namespace."""
    _needs("setpriv")
    uid = _unlisted_uid()
    as_uid = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups"]
    site = [p for p in sys.path if p.endswith("site-packages")]
    for path in [REPO, *site, "/usr/bin/python3"]:   # this venv's python is below /root
        if subprocess.run(as_uid + ["test", "-r", path]).returncode != 0:
            pytest.skip(f"uid {uid} cannot read {path}")
    os.chown(home, uid, uid)
    env = {k: v for k, v in _env(home).items() if k not in ("USER", "LOGNAME", "LNAME",
                                                              "USERNAME")}
    env.update(PYTHONPATH=os.pathsep.join([REPO, *site]), PATH="/usr/bin:/bin")
    as_uid += ["/usr/bin/python3", "-m", "toolsrv"]
    no_ns = {k: v for k, v in env.items() if k != "NAMESPACE"}
    r = subprocess.run(as_uid + ["read", "revision"], env=no_ns, cwd=home,
                       capture_output=True, text=True, timeout=60)
    assert "Traceback" not in r.stderr and r.stderr.startswith(
        f"toolsrv: no toolsrv answers at unix!/tmp/ns.uid:{uid}.:0/toolsrv"), r
    trail = os.path.join(home, "audit.jsonl")
    srv = Served(as_uid, env, home, "--audit", trail)
    try:
        r = subprocess.run(as_uid + ["read", "revision"], env=env, cwd=home,
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0 and r.stdout.strip() and not r.stderr, r
        r = subprocess.run(as_uid + ["call", "--cwd", home, "s", "a", "file_glob",
                                               '{"pattern": "*"}'],
                           env=env, cwd=home, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0 and "audit.jsonl" in r.stdout, r
        assert wait_for(lambda: os.path.exists(trail) and os.path.getsize(trail) > 0)
        with open(trail) as f:
            text = f.read()
        assert f'"uname":"uid:{uid}"' in text, text
    finally:
        srv.stop()
