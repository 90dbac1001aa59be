"""The OCI image (issue 52): toolsrv in a container, with the least it must be granted.

`deploy/image.sh` builds the image unless the one for this checkout's wheel is built (its tag
is keyed by the wheel's RECORD; the Debian rootfs is cached in ~/.cache/toolsrv/image/).  The
container runs with the minimal set of doc/hosts.md, Running a fleet: podman's defaults plus
`--cap-add SYS_ADMIN` (and ulimits the launcher's rlimits fit under).  Its socket is
bind-mounted out, and the host's CLI calls through it a bundled tool (file_read), the tool
format's quick-start tool (my_tool, in a directory mounted on root's tools path) and a shell,
from which escapes are tried: /etc/shadow, another session's cwd, the container's own root
filesystem outside the grants.  The last test times the same sandboxed call inside the
container and on the host, in the same run.

Marked slow (`make test-slow`): the first build fetches ~100 MB of Debian packages and the
wheels of the dependencies.  Skipped, saying why, where podman, runc or mmdebstrap are
missing, when not root (the minimal set measured is rootful podman's), or when the build
fails for a reason outside the project (Debian's mirror or PyPI unreachable: exit 3).
"""
from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from toolsrv.cli.client import Client

REPO = Path(__file__).resolve().parents[2]
CLI = str(Path(sys.executable).with_name("toolsrv"))
# the minimal set (doc/hosts.md, Running a fleet): nothing else is added
MINIMAL = ["--cap-add", "SYS_ADMIN"]
ULIMITS = ["--ulimit", "nofile=4096:4096", "--ulimit", "nproc=4096:4096"]

pytestmark = pytest.mark.slow

QUICK_TOOL = """#!/usr/bin/env python3
import json, sys
args = json.load(sys.stdin)
print(f"my_tool saw {args['path']}")
"""
QUICK_META = {"description": "One-liner shown in tool listings.",
              "prompt": "## my_tool\n\nFull documentation shown when loaded.",
              "args": {"type": "object", "required": ["path"],
                       "properties": {"path": {"type": "string"}}},
              "tier": "hot"}


def _missing() -> str | None:
    for prog in ("podman", "runc", "mmdebstrap"):
        if shutil.which(prog) is None:
            return f"{prog} is not installed (as root: apt-get install -y mmdebstrap podman runc uidmap)"
    if os.geteuid() != 0:
        return "the minimal set measured is rootful podman's: run as root"
    return None


@pytest.fixture(scope="module")
def image() -> str:
    why = _missing()
    if why:
        pytest.skip(why)
    p = subprocess.run(["bash", str(REPO / "deploy" / "image.sh")], capture_output=True,
                       text=True, timeout=1200)
    if p.returncode == 3:
        pytest.skip(f"the image could not be built for a reason outside the project: "
                    f"{p.stderr.strip().splitlines()[-1]}")
    assert p.returncode == 0, p.stderr
    return p.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def container(image: str):
    top = Path(tempfile.mkdtemp(prefix="toolsrv-image-test."))
    sock, tools = top / "sock", top / "tools"
    sock.mkdir()
    tools.mkdir()
    (tools / "my_tool").write_text(QUICK_TOOL)
    (tools / "my_tool").chmod(0o755)
    (tools / "my_tool.meta").write_text(json.dumps(QUICK_META))
    name = f"toolsrv-test-{uuid.uuid4().hex[:8]}"
    run = ["podman", "--runtime", "runc", "run", "-d", "--rm", "--name", name, *ULIMITS,
           *MINIMAL, "-v", f"{sock}:/run/toolsrv",
           "-v", f"{tools}:/root/.config/ollie/tools:ro", image]
    subprocess.run(run, check=True, capture_output=True, timeout=60)
    try:
        logs = ""
        for _ in range(300):            # the banner's last line is printed once it listens
            logs = _logs(name)
            if (sock / "toolsrv").is_socket() and "toolsrv: try" in logs:
                break
            time.sleep(0.1)
        assert (sock / "toolsrv").is_socket(), logs
        yield f"unix!{sock}/toolsrv", name
    finally:
        subprocess.run(["podman", "rm", "-f", name], capture_output=True, timeout=60)
        shutil.rmtree(top, ignore_errors=True)


def _logs(name: str) -> str:
    p = subprocess.run(["podman", "logs", name], capture_output=True, text=True, timeout=30)
    return p.stdout + p.stderr


def cli(addr: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([CLI, args[0], "-a", addr, *args[1:]], capture_output=True,
                          text=True, timeout=60, cwd="/")


def shell(addr: str, session: str, command: str) -> str:
    p = cli(addr, "call", session, "me", "shell", json.dumps({"command": command}))
    return p.stdout + p.stderr


def test_banner_names_what_it_got(container) -> None:
    """The start-up lines say the sandbox is whole but for the cgroups, and why not those."""
    text = _logs(container[1])
    assert "toolsrv: serving on unix!/run/toolsrv/toolsrv" in text
    for got in ("pid namespace per run: yes", "idmapped grants: uid 0 <-> 65534",
                "tools run as uid 65534", "no ptrace in a run (seccomp): yes",
                "landlock abi"):
        assert got in text, text
    assert "per-run cgroup: none (" in text and "without a cgroup per run" in text, text


def test_bundled_and_quick_start_tools(container) -> None:
    addr, _ = container
    assert cli(addr, "mkdir", "session/one").returncode == 0
    p = cli(addr, "call", "one", "me", "file_read", '{"path": "/etc/os-release", "limit": 1}')
    assert "Debian GNU/Linux 12" in p.stdout, p.stderr
    p = cli(addr, "call", "one", "me", "my_tool", '{"path": "x.txt"}')
    assert p.stdout.strip() == "my_tool saw x.txt", p.stderr
    out = shell(addr, "one", "id -u; echo $$")
    uid, pid = out.split()[:2]
    assert uid == "65534", out                  # the uid drop
    # a PID namespace per run: another session's shell, started the same way, has the same
    # pid in a namespace of its own (in a shared one, two live processes never do)
    cli(addr, "mkdir", "session/other")
    assert shell(addr, "other", "echo $$").split()[0] == pid
    status = cli(addr, "read", "status").stdout
    assert "1 made warm" in status and " 0 failed" in status, status


def test_escapes_are_refused(container) -> None:
    addr, _ = container
    for s in ("one", "two"):
        cli(addr, "mkdir", f"session/{s}")
    p = cli(addr, "call", "two", "me", "file_write",
            '{"path": "secret.txt", "content": "two only\\n"}')
    assert p.returncode == 0, p.stderr
    two = cli(addr, "read", "session/two/cwd").stdout.strip()
    assert two
    p = cli(addr, "call", "one", "me", "file_read", '{"path": "/etc/shadow"}')
    assert p.returncode != 0 and "root:" not in p.stdout
    p = cli(addr, "call", "one", "me", "file_read", json.dumps({"path": f"{two}/secret.txt"}))
    assert p.returncode != 0 and "two only" not in p.stdout
    for attempt in ("cat /etc/shadow", f"cat {two}/secret.txt", f"ls {two}",
                    # world-readable, but outside the grants: Landlock alone refuses them
                    "cat /var/lib/dpkg/status", "ls /opt/toolsrv", "cat /proc/1/environ",
                    "ls /root", "ls /run/toolsrv"):
        out = shell(addr, "one", attempt + " && echo ESCAPED")
        assert "ESCAPED" not in out and "ermission denied" in out, (attempt, out)


def _call_cost(addr: str, n: int = 50) -> float:
    """The median of n file_read calls through one connection, in seconds."""
    s = f"cost{uuid.uuid4().hex[:6]}"
    with Client.connect(addr, timeout=30) as c:
        c.mkdir(f"session/{s}")
        c.mkdir(f"session/{s}/agent/me")
        c.write(f"session/{s}/agent/me/ctl", b"tool_load file_read")
        call = f"session/{s}/agent/me/tools/file_read/call"
        args = b'{"path": "/etc/os-release", "limit": 1}'
        assert b"1\t" in c.rdwr(call, args)     # the resident interpreter starts here
        times = []
        for _ in range(n):
            t = time.perf_counter()
            c.rdwr(call, args)
            times.append(time.perf_counter() - t)
    return statistics.median(times)


def test_call_cost_inside_and_outside(container, tmp_path) -> None:
    """The same sandboxed call in the container and on the host, same run (doc/hosts.md)."""
    addr, _ = container
    ns = tmp_path / "ns"
    ns.mkdir(mode=0o700)
    host = subprocess.Popen([CLI, "serve", "-a", f"unix!{ns}/host", "--no-state"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd="/")
    try:
        for _ in range(300):
            if (ns / "host").is_socket():
                break
            time.sleep(0.1)
        inside, outside = [], []
        for _ in range(3):              # interleaved, so both see the same machine
            inside.append(_call_cost(addr))
            outside.append(_call_cost(f"unix!{ns}/host"))
    finally:
        host.terminate()
        host.wait(timeout=30)
    i, o = min(inside), min(outside)
    print(f"\nfile_read, median of 50, best of 3: container {i * 1e3:.2f} ms, "
          f"host {o * 1e3:.2f} ms, ratio {i / o:.2f}")
    assert i < 20 * o + 0.05


def test_in_a_user_namespace(image: str) -> None:
    """The recommended mode: the same set inside a user namespace of the container's own
    (podman's --uidmap; a pod's hostUsers: false), where SYS_ADMIN is over that namespace
    alone and the container's root is uid 100000 on the host.  The server answers only its
    own uid, so the client is a child of this test switched to host uid 100000 (the host's
    CLI could not run as that uid here: its interpreter lies under root's 0700 home)."""
    top = Path(tempfile.mkdtemp(prefix="toolsrv-image-test."))
    top.chmod(0o755)                    # (pytest's tmp_path is under a 0700 directory)
    sock = top / "sock"
    sock.mkdir(mode=0o755)
    name = f"toolsrv-test-{uuid.uuid4().hex[:8]}"
    subprocess.run(["podman", "--runtime", "runc", "run", "-d", "--rm", "--name", name,
                    *ULIMITS, *MINIMAL, "--uidmap", "0:100000:65536", "--gidmap",
                    "0:100000:65536", "-v", f"{sock}:/run/toolsrv:U", image],
                   check=True, capture_output=True, timeout=60)
    try:
        for _ in range(300):
            if (sock / "toolsrv").is_socket() and "toolsrv: try" in _logs(name):
                break
            time.sleep(0.1)
        assert "idmapped grants: uid 0 <-> 65534" in _logs(name), _logs(name)
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:                    # the client, as the container's root
            out: dict = {}
            try:
                os.setgroups([])
                os.setgid(100000)
                os.setuid(100000)
                with Client.connect(f"unix!{sock}/toolsrv", timeout=30,
                                    uname="agent") as c:
                    c.mkdir("session/s")
                    c.mkdir("session/s/agent/me")
                    c.write("session/s/agent/me/ctl", b"tool_load file_read shell")
                    out["read"] = c.rdwr("session/s/agent/me/tools/file_read/call",
                                         b'{"path": "/etc/os-release", "limit": 1}').decode()
                    for cmd in ("id -u", "cat /etc/shadow", "cat /var/lib/dpkg/status"):
                        try:
                            out[cmd] = c.rdwr("session/s/agent/me/tools/shell/call",
                                              json.dumps({"command": cmd}).encode()).decode()
                        except Exception as e:     # noqa: BLE001  a failed call's error
                            out[cmd] = str(e)
            except Exception as e:      # noqa: BLE001  reported to the parent
                out["error"] = repr(e)
            os.write(w, json.dumps(out).encode())
            os._exit(0)
        os.close(w)
        with os.fdopen(r) as f:
            got = json.loads(f.read() or "{}")
        os.waitpid(pid, 0)
        assert "error" not in got, got
        assert "Debian GNU/Linux 12" in got["read"], got
        assert got["id -u"].split()[0] == "65534", got
        for cmd in ("cat /etc/shadow", "cat /var/lib/dpkg/status"):
            assert "ermission denied" in got[cmd], got
    finally:
        subprocess.run(["podman", "rm", "-f", name], capture_output=True, timeout=60)
        shutil.rmtree(top, ignore_errors=True)
