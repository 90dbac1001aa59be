"""Escape attempts inside the shipped default profile, with real Landlock: each is denied,
and each allowed access works.  The probe tool (tests/tools/probe.py) reports errno names.

Every denied target is reachable by plain Unix permissions (mode 0666/0777 files, world-
readable /etc files), so a denial comes from the sandbox, not from the uid switch."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
from sandbox_support import LANDLOCK, NO_LANDLOCK, ROOT, Harness, profile_from, profile_with  # noqa: E402

pytestmark = pytest.mark.skipif(LANDLOCK.abi < 1, reason=NO_LANDLOCK)
DENIED = ("EACCES", "EPERM")


@pytest.fixture(scope="module", params=["cold", "warm"])
def h(request: pytest.FixtureRequest) -> Iterator[Harness]:
    harness = Harness(warm=request.param == "warm")  # a warm start is confined the same
    yield harness
    harness.close()


def denied(result: dict) -> bool:
    return not result["ok"] and result["errno"] in DENIED


def test_allowed_accesses_work(h: Harness) -> None:
    res = h.probe(
        {"op": "read", "path": "/etc/passwd"},
        {"op": "read", "path": "/usr/lib/os-release"},
        {"op": "listdir", "path": "/usr/bin"},
        {"op": "execute", "path": "/usr/bin/env", "args": ["true"]},
        {"op": "write", "path": str(h.cwd / "out.txt"), "data": "hello"},
        {"op": "read", "path": str(h.cwd / "out.txt")},
        {"op": "write", "path": "/dev/null"},
        {"op": "read", "path": "/dev/urandom"},
        {"op": "read", "path": str(h.tools / "probe.py")})
    assert all(r["ok"] for r in res), res
    assert res[3]["value"] == 0 and res[5]["value"] == "hello"
    res = h.sh('echo t > "$TMPDIR/x" && cat "$TMPDIR/x" && cp /bin/true ./mytrue && ./mytrue'
               ' && rm mytrue && echo ok')
    assert res.stdout == b"t\nok\n", res


def test_reading_outside_the_allowed_paths(h: Harness) -> None:
    res = h.probe({"op": "read", "path": str(h.secret)},
                  {"op": "listdir", "path": str(h.outside)},
                  {"op": "listdir", "path": "/tmp"},
                  {"op": "read", "path": "/etc/hostname"},
                  {"op": "listdir", "path": "/etc"},
                  {"op": "read", "path": "/proc/self/status"},
                  {"op": "listdir", "path": "/home"})
    assert all(denied(r) for r in res), res


def test_writing_outside_cwd_and_tmpdir(h: Harness) -> None:
    res = h.probe({"op": "write", "path": str(h.outside / "new.txt")},
                  {"op": "write", "path": str(h.secret)},
                  {"op": "write", "path": "/dev/shm/toolsrv-escape"},
                  {"op": "write", "path": "/tmp/toolsrv-escape"},
                  {"op": "write", "path": "/usr/toolsrv-escape"})
    assert all(denied(r) for r in res), res
    assert not (h.outside / "new.txt").exists() and h.secret.read_text() == "secret\n"


def test_symlinks_out_are_not_followed(h: Harness) -> None:
    planted = h.cwd / "planted-link"
    planted.unlink(missing_ok=True)
    planted.symlink_to(h.secret)
    made = h.cwd / "made-link"
    made.unlink(missing_ok=True)
    res = h.probe({"op": "read", "path": str(planted)},
                  {"op": "write", "path": str(planted)},
                  {"op": "link", "target": str(h.secret), "path": str(made)},
                  {"op": "read", "path": str(made)})
    assert denied(res[0]) and denied(res[1]) and res[2]["ok"] and denied(res[3]), res


def test_links_and_renames_from_outside_are_refused(h: Harness) -> None:
    res = h.probe({"op": "hardlink", "target": str(h.secret), "path": str(h.cwd / "hl")},
                  {"op": "rename", "src": str(h.secret), "dst": str(h.cwd / "stolen")})
    assert all(not r["ok"] and r["errno"] in (*DENIED, "EXDEV") for r in res), res
    assert h.secret.exists()


def test_proc_tricks(h: Harness) -> None:
    res = h.probe({"op": "read", "path": f"/proc/self/root{h.secret}"},
                  {"op": "read", "path": f"/proc/{os.getpid()}/environ"},
                  {"op": "read", "path": f"/proc/{os.getpid()}/root/etc/hostname"},
                  {"op": "listdir", "path": f"/proc/{os.getpid()}/cwd"},
                  {"op": "write", "path": "/proc/sys/kernel/hostname"})
    assert all(denied(r) for r in res), res


def test_executing_from_a_directory_without_execute(h: Harness) -> None:
    rodir = h.mkdir("ro-bin")
    shutil.copy("/bin/true", rodir / "mytrue")
    (rodir / "mytrue").chmod(0o755)
    profile = profile_with(ro=[str(rodir)])
    [read, run] = h.probe({"op": "read", "path": str(rodir / "mytrue")},
                          {"op": "execute", "path": str(rodir / "mytrue")}, profile=profile)
    assert read["ok"] and run == {"ok": True, "value": 100 + 13}  # child: execv -> EACCES
    res = h.run([str(rodir / "mytrue")], profile=profile)
    assert res.error and "exec" in res.error and "Permission denied" in res.error


def _listener() -> tuple[socket.socket, int]:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)

    def serve() -> None:
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            conn.sendall(b"hi")
            conn.close()

    threading.Thread(target=serve, daemon=True).start()
    return srv, srv.getsockname()[1]


def test_no_network_in_the_default_profile(h: Harness) -> None:
    srv, port = _listener()
    try:
        res = h.probe({"op": "connect_tcp", "port": port},
                      {"op": "bind_tcp", "port": 0},
                      {"op": "udp", "port": 53})
        assert denied(res[0]) and denied(res[1]), res  # landlock: no tcp port allowed
        assert not res[2]["ok"], res  # udp: the empty network namespace has no route
    finally:
        srv.close()


def test_tcp_connect_only_to_allowed_ports(h: Harness) -> None:
    srv_a, port_a = _listener()
    srv_b, port_b = _listener()
    data = {"filesystem": {"rox": ["/usr", "/lib", "/lib64", "/bin", "{TOOLS}"],
                           "ro": ["/etc/ld.so.cache", "/etc/python3.11"]},
            "network": {"enabled": True, "connect_tcp": [port_a]}}
    try:
        res = h.probe({"op": "connect_tcp", "port": port_a},
                      {"op": "connect_tcp", "port": port_b},
                      {"op": "connect_tcp", "host": "::1", "port": port_b},
                      {"op": "bind_tcp", "port": 0},
                      profile=profile_from(data))
        assert res[0] == {"ok": True, "value": "hi"}, res
        assert denied(res[1]) and denied(res[2]) and denied(res[3]), res
    finally:
        srv_a.close()
        srv_b.close()


def test_signals_to_processes_outside(h: Harness) -> None:
    """Outside pids do not exist in the tool's PID namespace, and its pid 1 (the run's init)
    is off limits: a signal to it is refused, or dropped by the kernel (a namespace's init
    ignores signals from inside it that it has no handler for), so the run goes on."""
    kw = {"user": 65534, "group": 65534} if ROOT else {}
    victim = subprocess.Popen(["/bin/sleep", "60"], **kw)  # type: ignore[call-overload]
    try:
        res = h.probe({"op": "kill", "pid": 1, "sig": 9},
                      {"op": "kill", "pid": 1, "sig": 15},
                      {"op": "kill", "pid": victim.pid, "sig": 15},
                      {"op": "kill", "pid": os.getpid(), "sig": 15},
                      {"op": "whoami"})
        assert all(not r["ok"] and r["errno"] in (*DENIED, "ESRCH") for r in res[2:4]), res
        assert all(denied(r) or r["ok"] for r in res[:2]), res
        assert res[4]["ok"], res  # still running after pid 1 was signalled: the init lives
        assert victim.poll() is None
    finally:
        victim.kill()
        victim.wait()


def test_abstract_unix_sockets_outside(h: Harness) -> None:
    name = f"toolsrv-test-{os.getpid()}"
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind("\0" + name)
    srv.listen(1)
    try:
        [res] = h.probe({"op": "abstract", "name": name})
        assert not res["ok"] and res["errno"] in (*DENIED, "ECONNREFUSED"), res
    finally:
        srv.close()


def test_tmpdir_starts_empty_so_nothing_is_planted(h: Harness) -> None:
    res = h.sh('ls -A "$TMPDIR" | wc -l')
    assert res.stdout.strip() == b"0"
