"""A root server, as in every container (issue 14), through the real CLI client over 9P: the
tool format's quick start (a tool in a 0700 home), a 0700 project cwd that the tools read
and write, files they create owned by root on disk; and nothing else opens up: a root-owned
0660 pathname socket outside the grants, root's home outside the grants, /etc/shadow, set-uid
bits.  And an ordinary user's server still works."""
from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
from sandbox_support import LANDLOCK, NO_LANDLOCK  # noqa: E402
from shellhelpers import REPO, TOOLSRV, serving  # noqa: E402

pytestmark = [pytest.mark.skipif(os.geteuid() != 0, reason="a root server: run as root"),
              pytest.mark.skipif(LANDLOCK.abi < 1, reason=NO_LANDLOCK)]

# A shell tool (the tool format's quick start, in shell): runs its "sh" arg in the cwd.
RUN = """#!/bin/sh
c=$(python3 -c 'import json,sys; print(json.load(sys.stdin)["sh"])'); exec sh -c "$c"
"""
RUN_META = {"args": {"type": "object", "required": ["sh"],
                     "properties": {"sh": {"type": "string"}}}}
# A python tool: connects to a pathname socket, says what happened.
DIAL = """#!/usr/bin/env python3
import json, socket, sys
path = json.load(sys.stdin)["path"]
s = socket.socket(socket.AF_UNIX)
try:
    s.connect(path)
    print("connected")
except OSError as e:
    print(e.strerror)
"""


@pytest.fixture(scope="module")
def root_home() -> Iterator[Path]:
    """A home like /root: 0700 and root's, with the quick start's tools in it, a 0700
    project, and a secret beside them."""
    home = Path(tempfile.mkdtemp(prefix="roothome.", dir="/tmp"))
    tools = home / ".config" / "ollie" / "tools"
    tools.mkdir(parents=True)
    for name, script, meta in (("run", RUN, RUN_META),
                               ("dial", DIAL, {"args": {"type": "object"}})):
        (tools / name).write_text(script)
        (tools / name).chmod(0o700)               # root's own: `chmod +x` as root does
        (tools / f"{name}.meta").write_text(json.dumps({"description": name, **meta}))
    project = home / "work"
    project.mkdir(mode=0o700)
    (project / "README.md").write_text("the project\n")
    (project / "README.md").chmod(0o600)
    (home / "secret.txt").write_text("root's own\n")
    home.chmod(0o700)
    yield home
    shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(scope="module")
def srv(root_home: Path) -> Iterator[dict]:
    tools = str(root_home / ".config" / "ollie" / "tools")
    with serving("--tools", tools, "--no-state") as (env, _banner, _p):
        yield env


def call(env: dict, session: str, tool: str, args: dict, cwd: str | None = None,
         ) -> subprocess.CompletedProcess:
    extra = ["--cwd", cwd] if cwd else []
    return subprocess.run(TOOLSRV + ["call", *extra, session, "a", tool, json.dumps(args)],
                          env=env, cwd=REPO, capture_output=True, text=True, timeout=60)


def test_the_quick_start_runs_root_own_tools(srv: dict, root_home: Path) -> None:
    r = call(srv, "quick", "run", {"sh": "echo hello from $(id -u)"})
    assert r.returncode == 0 and r.stdout == "hello from 65534\n", r


def test_a_0700_project_cwd_is_the_tools_workspace(srv: dict, root_home: Path) -> None:
    project = root_home / "work"
    r = call(srv, "proj", "run", {"sh": "cat README.md && echo made > made.txt && ls"},
             cwd=str(project))
    assert r.returncode == 0, r
    assert r.stdout == "the project\nREADME.md\nmade.txt\n", r
    made = os.stat(project / "made.txt")
    assert (made.st_uid, made.st_gid) == (0, 0)   # root's on disk, as if root wrote it
    assert (project / "made.txt").read_text() == "made\n"


def test_outside_the_grants_nothing_opens_up(srv: dict, root_home: Path) -> None:
    home = str(root_home)
    script = (f"{{ cat {home}/secret.txt; echo x > {home}/new.txt; ls {home}; "
              f"cat /etc/shadow; echo x > {home}/.config/x; }} 2>&1; true")
    r = call(srv, "fence", "run", {"sh": script}, cwd=str(root_home / "work"))
    assert r.returncode == 0, r
    lines = r.stdout.splitlines()
    assert len(lines) == 5 and all("No such file" in line or "Permission denied" in line
                                   for line in lines), r
    assert "root's own" not in r.stdout and "root:" not in r.stdout, r
    assert not (root_home / "new.txt").exists() and not (root_home / ".config" / "x").exists()
    assert (root_home / "secret.txt").read_text() == "root's own\n"


def test_a_root_socket_outside_the_grants_stays_unreachable(srv: dict, tmp_path: Path) -> None:
    """Landlock does not govern connect(2) on pathname sockets: only the uid stops it."""
    where = Path(tempfile.mkdtemp(prefix="sock.", dir="/tmp"))
    where.chmod(0o755)
    path = str(where / "docker.sock")
    listener = socket.socket(socket.AF_UNIX)
    try:
        listener.bind(path)
        listener.listen(1)
        os.chmod(path, 0o660)
        r = call(srv, "sock", "dial", {"path": path})
        assert r.returncode == 0 and r.stdout == "Permission denied\n", r
    finally:
        listener.close()
        shutil.rmtree(where, ignore_errors=True)


def test_no_set_id_bits_even_on_a_mapped_grant(srv: dict, root_home: Path) -> None:
    project = root_home / "work"
    r = call(srv, "suid", "run", {"sh": "cp /bin/true t && { chmod 4755 t; chmod 2755 t; } "
                                        "2>&1; ls -l t | cut -c1-10"}, cwd=str(project))
    assert r.stdout.count("Operation not permitted") == 2, r
    assert r.stdout.endswith("-rwxr-xr-x\n"), r
    mode = os.stat(project / "t").st_mode
    assert not mode & (stat.S_ISUID | stat.S_ISGID)
    (project / "t").unlink()


def test_a_program_outside_the_grants_names_the_uid_and_the_way_out(
        srv: dict, root_home: Path) -> None:
    outside = Path(tempfile.mkdtemp(prefix="prog.", dir="/tmp"))
    try:
        outside.chmod(0o755)
        tools = root_home / ".config" / "ollie" / "tools"
        (outside / "prog").write_text("#!/bin/sh\necho ran\n")
        (outside / "prog").chmod(0o755)
        (tools / "elsewhere.meta").write_text(json.dumps(
            {"description": "elsewhere", "args": {"type": "object"},
             "cmd": str(outside / "prog")}))
        r = None
        for _ in range(50):  # the registry picks the new .meta up live
            r = call(srv, "where", "elsewhere", {})
            if "unknown tool" not in r.stderr and "not found" not in r.stderr:
                break
        assert r is not None and r.returncode != 0, r
        assert "Permission denied (tools run as uid 65534" in r.stderr, r
        log = subprocess.run(TOOLSRV + ["read", "session/where/agent/a/log"], env=srv,
                             cwd=REPO, capture_output=True, text=True, timeout=30).stdout
        assert "uid 65534" in log and str(outside / "prog") in log, log
    finally:
        (root_home / ".config" / "ollie" / "tools" / "elsewhere.meta").unlink(missing_ok=True)
        shutil.rmtree(outside, ignore_errors=True)


def _nobody_can_run_the_checkout() -> str | None:
    """Why the server cannot run as an ordinary user here, or None."""
    if not shutil.which("setpriv"):
        return "no setpriv (util-linux) to run the server as another uid"
    site = [p for p in sys.path if p.endswith("site-packages")]
    for path in [REPO, *site, "/usr/bin/python3"]:
        if subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                           "test", "-r", path], capture_output=True).returncode != 0:
            return f"uid 65534 cannot read {path}"
    return None


def test_an_ordinary_users_server_still_works(tmp_path: Path) -> None:
    """The server itself as an unprivileged user (uid 65534): no uid switch, no idmap; a
    bundled tool called through the CLI works, confined as always."""
    why = _nobody_can_run_the_checkout()
    if why:
        pytest.skip(why)
    home = Path(tempfile.mkdtemp(prefix="userhome.", dir="/tmp"))
    os.chown(home, 65534, 65534)
    site = os.pathsep.join([REPO] + [p for p in sys.path if p.endswith("site-packages")])
    env = {"HOME": str(home), "PATH": "/usr/bin:/bin", "PYTHONPATH": site,
           "NAMESPACE": str(home / "ns"), "XDG_RUNTIME_DIR": str(home / "run"),
           "TMPDIR": str(home)}
    base = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
            "/usr/bin/python3", "-m", "toolsrv"]
    p = subprocess.Popen(base + ["serve", "--no-state"], env=env, cwd=str(home),
                         stderr=subprocess.PIPE, text=True)
    try:
        assert p.stderr is not None
        banner = []
        for line in p.stderr:
            banner.append(line)
            if "agent/me/log" in line:
                break
        text = "".join(banner)
        assert "tools run as the server's uid" in text, text
        (home / "notes.txt").write_text("an ordinary user's notes\n")
        os.chown(home / "notes.txt", 65534, 65534)
        r = subprocess.run(base + ["call", "--cwd", str(home), "s", "a", "file_read",
                                   json.dumps({"path": "notes.txt"})],
                           env=env, cwd=str(home), capture_output=True, text=True, timeout=60)
        assert r.returncode == 0 and "an ordinary user's notes" in r.stdout, (r, text)
    finally:
        p.terminate()
        try:
            p.wait(20)
        except subprocess.TimeoutExpired:
            p.kill()
        shutil.rmtree(home, ignore_errors=True)
