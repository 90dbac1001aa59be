"""Elevation: refused without a broker, on "no", on silence or nonsense; granted on "yes";
the reference broker's --allow policy, its socket protocol and its command line."""
from __future__ import annotations

import asyncio
import errno
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from outside import OUTSIDE

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
from sandbox_support import LANDLOCK, NO_LANDLOCK, Harness  # noqa: E402

from toolsrv.cli.approve import Broker, decide_allowed, format_request  # noqa: E402
from toolsrv.run.elevation import request_approval  # noqa: E402
from toolsrv.errors import errno_for  # noqa: E402
from toolsrv.run.runner import RunnerConfig  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def h() -> Iterator[Harness]:
    harness = Harness(RunnerConfig(approval_timeout=2.0))
    yield harness
    harness.close()


class Recorder:
    """A scripted operator: answers yes or no, and remembers what it was asked."""

    def __init__(self, answer: bool) -> None:
        self.answer = answer
        self.asked: list[dict] = []

    async def __call__(self, request: dict) -> bool:
        self.asked.append(request)
        return self.answer


def start_broker(h: Harness, broker: Broker) -> tuple[str, asyncio.AbstractServer]:
    path = str(h.base / f"broker-{time.monotonic_ns()}.sock")
    return path, h.run_async(broker.serve(path))


def elevated_read(h: Harness, sock: str | None) -> object:
    h.runner.config.bypass_socket = sock
    return h.run(["/bin/cat", str(h.secret)], elevated=True,
                 context={"session": "s1", "agent": "a1", "tool": "file_read",
                          "args": {"path": str(h.secret)}})


def fake_broker(h: Harness, handler: object, name: str) -> tuple[str, asyncio.AbstractServer]:
    """A scripted broker at base/NAME, with a token beside it as a broker writes one."""
    path = str(h.base / name)
    with open(os.open(path + ".token", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
        f.write("t" * 64)
    return path, h.run_async(asyncio.start_unix_server(handler, path))  # type: ignore[arg-type]


@pytest.mark.skipif(LANDLOCK.abi < 1, reason=NO_LANDLOCK)
def test_sandboxed_read_is_denied_to_begin_with(h: Harness) -> None:
    res = h.run(["/bin/cat", str(h.secret)])
    assert res.exit_code == 1 and b"Permission denied" in res.stderr


def test_no_broker_means_denied(h: Harness) -> None:
    """Issue 14: the refusal had none of 9pfuse's words (the shell saw ERANGE, "Numerical
    result out of range"); it reads EACCES now, whatever the broker's reason says."""
    res = elevated_read(h, None)
    assert res.error == ("elevation denied (permission denied): no approval broker "  # type: ignore
                         "configured (OLLIE_BYPASS_SOCKET is unset)")
    assert errno_for(res.error) == errno.EACCES  # type: ignore[attr-defined]
    assert res.exit_code is None and res.stdout == b""  # type: ignore[attr-defined]


def test_operator_says_no(h: Harness) -> None:
    no = Recorder(False)
    path, server = start_broker(h, Broker(ask=no))
    try:
        res = elevated_read(h, path)
        assert res.error == "elevation denied (permission denied): refused by the operator"  # type: ignore
        assert res.stdout == b""  # type: ignore[attr-defined]
        [asked] = no.asked
        assert asked.pop("peer") == [os.getpid(), os.geteuid()]     # the server, asking
        assert asked.pop("reach").startswith("an approved run leaves Landlock")
        assert asked == {"session": "s1", "agent": "a1", "tool": "file_read",
                         "args": {"path": str(h.secret)}, "cwd": str(h.cwd)}
    finally:
        server.close()


def test_operator_says_yes_and_the_run_leaves_landlock(h: Harness) -> None:
    path, server = start_broker(h, Broker(ask=Recorder(True)))
    try:
        res = elevated_read(h, path)
        assert res.error is None and res.stdout == b"secret\n"  # type: ignore[attr-defined]
    finally:
        server.close()


def test_allow_list_approves_only_listed_tools(h: Harness) -> None:
    path, server = start_broker(h, Broker(allow=frozenset({"file_read"})))
    try:
        assert elevated_read(h, path).stdout == b"secret\n"  # type: ignore[attr-defined]
        res = h.run(["/bin/true"], elevated=True, context={"tool": "shell"})
        assert res.error == ("elevation denied (permission denied): shell is not in the "
                             "broker's allow list")
    finally:
        server.close()


def test_silent_broker_times_out_to_no(h: Harness) -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # never answers; returns when the asker hangs up
        writer.close()

    path, server = fake_broker(h, silent, "silent.sock")
    try:
        ok, reason = h.run_async(request_approval(path, {"tool": "x"}, timeout=0.3))
        assert not ok and "did not answer" in reason
    finally:
        server.close()


@pytest.mark.parametrize("answer, expected", [
    (b'{"approve": "yes"}\n', "refused by the approval broker"),
    (b'{"approve": 1}\n', "refused by the approval broker"),
    (b'[true]\n', "bad answer"),
    (b'not json\n', "bad answer"),
    (b'', "closed the connection"),
    (b'{"approve": false, "reason": "not today"}\n', "not today"),
])
def test_anything_but_a_clear_yes_is_no(h: Harness, answer: bytes, expected: str) -> None:
    async def scripted(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readline()
        writer.write(answer)
        await writer.drain()
        writer.close()

    path, server = fake_broker(h, scripted, "scripted.sock")
    try:
        ok, reason = h.run_async(request_approval(path, {"tool": "x"}))
        assert not ok and expected in reason
    finally:
        server.close()


def test_missing_socket_is_denied(h: Harness) -> None:
    ok, reason = h.run_async(request_approval(str(h.base / "nope.sock"), {}))
    assert not ok and "nope.sock" in reason


def test_decide_and_format() -> None:
    assert decide_allowed({"tool": "a"}, frozenset({"a"}))[0]
    assert not decide_allowed({"tool": "b"}, frozenset({"a"}))[0]
    assert not decide_allowed({}, frozenset({"a"}))[0]
    text = format_request({"tool": "grep", "session": "s", "agent": "g", "cwd": "/w",
                           "args": {"pattern": "TODO"}})
    assert "tool grep" in text and '"pattern": "TODO"' in text and "/w" in text


def test_approve_command_serves_the_allow_list(tmp_path: Path) -> None:
    path = tmp_path / "approve.sock"
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv[1]);"
                             "from toolsrv.cli.approve import approve_main;"
                             "sys.exit(approve_main(sys.argv[2:]))", str(REPO),
                             "--allow", "file_read", "other", "--socket", str(path)],
                            stderr=subprocess.PIPE, text=True)
    try:
        banner = proc.stderr.readline() if proc.stderr else ""
        assert f"OLLIE_BYPASS_SOCKET={path}" in banner
        assert os.stat(path).st_mode & 0o777 == 0o600

        async def ask(tool: str) -> tuple[bool, str]:
            return await request_approval(str(path), {"tool": tool})

        assert asyncio.run(ask("file_read"))[0]
        assert asyncio.run(ask("other"))[0]
        ok, reason = asyncio.run(ask("shell"))
        assert not ok and "allow list" in reason
    finally:
        proc.terminate()
        proc.wait()


def test_interactive_broker_asks_one_at_a_time(h: Harness) -> None:
    order: list[str] = []

    async def slow_operator(request: dict) -> bool:
        order.append(f"start {request['tool']}")
        await asyncio.sleep(0.05)
        order.append(f"end {request['tool']}")
        return request["tool"] == "a"

    path, server = start_broker(h, Broker(ask=slow_operator))
    try:
        async def both() -> list[tuple[bool, str]]:
            return await asyncio.gather(request_approval(path, {"tool": "a"}),
                                        request_approval(path, {"tool": "b"}))

        answers = h.run_async(both())
        assert [ok for ok, _ in answers] == [True, False]
        assert order[0].startswith("start") and order[1].startswith("end")
    finally:
        server.close()
    assert json.dumps(order)


def _approve(path: Path, *args: str, **kw: object) -> "subprocess.Popen[str]":
    """`toolsrv approve --socket PATH ARGS`, once it listens."""
    proc = subprocess.Popen([sys.executable, "-m", "toolsrv", "approve", "--socket", str(path),
                             *args], cwd=OUTSIDE, stderr=subprocess.PIPE, text=True,
                            **kw)  # type: ignore[call-overload]
    assert proc.stderr is not None and "listening" in proc.stderr.readline()
    return proc


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGHUP", "SIGINT"])
def test_approve_removes_its_socket_when_stopped(tmp_path: Path, sig: str) -> None:
    """Issue 21: `toolsrv approve` left approve.sock behind when stopped."""
    import signal
    path = tmp_path / "approve.sock"
    proc = _approve(path, "--allow", "file_read")
    try:
        assert path.exists() and os.stat(f"{path}.token").st_mode & 0o777 == 0o600
        proc.send_signal(getattr(signal, sig))
        assert proc.wait(10) == 0
        assert not path.exists() and not os.path.exists(f"{path}.token")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_approve_stopped_while_it_asks_still_exits_and_cleans_up(tmp_path: Path) -> None:
    """Stopped with a question on the terminal unanswered: it does not wait for the answer,
    the asker gets a no, and the socket goes."""
    import signal
    path = tmp_path / "approve.sock"
    proc = _approve(path, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        async def ask_then_stop() -> tuple[bool, str]:
            asking = asyncio.ensure_future(request_approval(str(path), {"tool": "shell"}))
            loop = asyncio.get_running_loop()
            assert proc.stdout is not None
            line = await loop.run_in_executor(None, proc.stdout.readline)
            assert line.startswith("elevation request from pid ") and "tool shell (" in line
            proc.send_signal(signal.SIGTERM)
            return await asking
        ok, reason = asyncio.run(ask_then_stop())
        assert not ok and "closed the connection" in reason
        assert proc.wait(10) == 0
        assert not path.exists()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_stopping_broker_leaves_a_newer_brokers_socket_alone(tmp_path: Path) -> None:
    import signal
    path = tmp_path / "approve.sock"
    old = _approve(path, "--allow", "a")
    new = _approve(path, "--allow", "b")             # replaces the socket at that path
    try:
        old.send_signal(signal.SIGTERM)
        assert old.wait(10) == 0
        assert path.exists()
        assert asyncio.run(request_approval(str(path), {"tool": "b"}))[0]
    finally:
        for p in (old, new):
            if p.poll() is None:
                p.terminate()
                p.wait(10)
    assert not path.exists()


# -- who is asked, and who may ask (issue 44.4, 44.5) --

FORGE = """
import json, os, socket, sys
path = sys.argv[1]
print("env:", os.environ.get("OLLIE_BYPASS_SOCKET"))
try:
    open(path + ".token").read()
    print("token: read")
except OSError as e:
    print("token:", e.strerror)
s = socket.socket(socket.AF_UNIX)
s.settimeout(30)
s.connect(path)
s.sendall(json.dumps({"session": "prod", "agent": "deploy", "tool": "shell",
                      "args": {"command": "systemctl restart web"}}).encode() + b"\\n")
print("broker:", s.recv(4096).decode().strip())
"""


PYTHON = "/usr/bin/python3"     # the default profile grants /usr, not the venv


@pytest.mark.skipif(LANDLOCK.abi < 1, reason=NO_LANDLOCK)
@pytest.mark.skipif(not os.path.exists(PYTHON), reason=f"no {PYTHON} for the tool")
def test_a_tool_cannot_put_a_request_in_front_of_the_operator() -> None:
    """Issue 44.5 (repro/round4/broker_forged_request.sh): every tool had the broker's
    socket in $OLLIE_BYPASS_SOCKET, and where the server runs tools as its own uid (an
    ordinary user's server; here run_as=None) nothing told its requests from the server's:
    the operator was asked to approve a call nobody made.  Now the tool has no socket in
    its environment, cannot read the token (outside its profile), and the broker refuses
    what it sends at once, asking no one."""
    h = Harness(RunnerConfig(run_as=None))
    try:
        operator = Recorder(True)
        path, server = start_broker(h, Broker(ask=operator))
        res = h.run([PYTHON, "-c", FORGE, path], env={"OLLIE_BYPASS_SOCKET": path},
                    profile=h.default)
        out = res.stdout.decode()
        assert "env: None" in out, (out, res.stderr, res.error)    # not handed to the tool
        assert "token: Permission denied" in out, (out, res.stderr)   # Landlock: not granted
        assert "does not carry the broker's token" in out and '"approve": false' in out
        assert operator.asked == []                                 # nobody was asked
        assert elevated_read(h, path).stdout == b"secret\n"  # type: ignore[attr-defined]
        assert len(operator.asked) == 1                             # the server still asks
        server.close()
    finally:
        h.close()


@pytest.mark.parametrize("mode, why", [(0o1777, "shared (sticky)"), (0o777, "writable by others")])
def test_a_broker_socket_where_others_may_write_is_not_trusted(h: Harness, mode: int,
                                                               why: str) -> None:
    """Issue 44.4 (repro/round4/broker_peer_unchecked.sh): a socket named in a directory
    like /tmp, which another user may bind first, was asked all the same."""
    d = h.base / f"pub{mode:o}"
    d.mkdir()
    d.chmod(mode)
    asked: list[bytes] = []

    async def yes(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        asked.append(await reader.readline())
        writer.write(b'{"approve": true}\n')
        writer.close()

    path, server = fake_broker(h, yes, f"pub{mode:o}/approve.sock")
    try:
        ok, reason = h.run_async(request_approval(path, {"tool": "x"}))
        assert not ok and why in reason and "permission denied" in reason, reason
        assert asked == []
    finally:
        server.close()


EVIL = """
import json, os, socket, sys
s = socket.socket(socket.AF_UNIX)
s.bind(sys.argv[1])            # in a directory of ours, with our token beside it
os.setresgid(65534, 65534, 65534)
os.setresuid(65534, 65534, 65534)
s.listen(4)                    # SO_PEERCRED names who listened: uid 65534
print("ready", flush=True)
while True:
    c, _ = s.accept()
    c.recv(65536)
    c.sendall(b'{"approve": true, "reason": "uid 65534 says yes"}\\n')
    c.close()
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to listen as another uid")
def test_a_broker_of_another_uid_is_not_asked(h: Harness) -> None:
    """Issue 44.4: whoever listened at the socket was asked, whatever its uid."""
    path = str(h.base / "evil.sock")
    with open(os.open(path + ".token", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
        f.write("t" * 64)
    evil = subprocess.Popen([sys.executable, "-c", EVIL, path], stdout=subprocess.PIPE,
                            text=True, cwd=OUTSIDE)
    try:
        assert evil.stdout is not None and evil.stdout.readline() == "ready\n"
        ok, reason = h.run_async(request_approval(path, {"tool": "x"}))
        assert not ok and "served by uid 65534" in reason and "permission denied" in reason
    finally:
        evil.kill()
        evil.wait()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to connect as another uid")
def test_the_broker_refuses_a_peer_of_another_uid_without_asking(h: Harness) -> None:
    operator = Recorder(True)
    path, server = start_broker(h, Broker(ask=operator))
    os.chmod(path, 0o666)
    try:
        code = ("import os, socket, sys; os.setresuid(65534, 65534, 65534); "
                "s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); "
                "print(s.recv(4096).decode())")
        out = h.run_async(asyncio.to_thread(subprocess.run, [sys.executable, "-c", code, path],
                                            capture_output=True, text=True, cwd=OUTSIDE,
                                            timeout=30))
        assert "may not ask this broker" in out.stdout, out
        assert operator.asked == []
    finally:
        server.close()


# -- an elevated run stays in its session (issue 44.2) --

PEEK = """
echo "A: $(cat "$1" 2>&1)"
echo "bases: $(ls "$2" 2>&1 | tr '\\n' ' ')"
echo "own: $(cat mine.txt 2>&1)"
echo t > "$TMPDIR/t" && echo "tmp: $(cat "$TMPDIR/t")"
echo "init: $(tr '\\0' ' ' < /proc/1/cmdline)"
echo "procs: $(ls /proc | grep -c '^[0-9]')"
grep -l 'py[t]est' /proc/[0-9]*/cmdline 2>/dev/null | head -1 | sed 's/^/host: /'
echo "uid: $(id -u)"
"""


def test_an_approved_elevated_run_sees_no_other_session_and_no_host_proc() -> None:
    """Issue 44.2 (repro/round4/elevated_cross_session.sh): an approved elevated run (no
    Landlock, no seccomp) read another session's private cwd, which the tools' uid owns
    beside its own, and saw the host's /proc.  Now the work and scratch bases are hidden
    from it in a mount namespace of its own, but for its cwd and TMPDIR, and its /proc is
    its PID namespace's."""
    h = Harness(RunnerConfig(approval_timeout=10.0))
    try:
        work = h.mkdir("work")
        h.runner.config.hidden = (str(work),)
        sessions = {}
        for name in ("sA.1.1", "sB.1.2"):
            d = work / name
            d.mkdir(mode=0o700)
            if h.uid:
                os.chown(d, *h.uid)
            sessions[name] = d
        secret = sessions["sA.1.1"] / "secret.txt"
        secret.write_text("session A's private file\n")
        (sessions["sB.1.2"] / "mine.txt").write_text("session B's own\n")
        for f in (secret, sessions["sB.1.2"] / "mine.txt"):
            f.chmod(0o600)
            if h.uid:
                os.chown(f, *h.uid)
        operator = Recorder(True)
        path, server = start_broker(h, Broker(ask=operator))
        h.runner.config.bypass_socket = path
        try:
            res = h.run(["/bin/sh", "-c", PEEK, "peek", str(secret), str(work)],
                        cwd=str(sessions["sB.1.2"]), elevated=True,
                        context={"session": "sB", "agent": "b1", "tool": "peek", "args": {}})
        finally:
            server.close()
        out = res.stdout.decode()
        assert res.error is None and res.exit_code == 0, (res, out)
        assert "session A's private file" not in out and "A: cat: " in out, out
        assert "bases: sB.1.2 \n" in out, out                 # its own cwd, nothing beside it
        assert "own: session B's own" in out and "tmp: t" in out, out
        assert "host: " not in out, out                       # no process of the host
        with open("/proc/1/cmdline") as f:                   # pid 1 is its namespace's init
            assert "init: " in out and f"init: {f.read().replace(chr(0), ' ')}" not in out
        assert int(out.split("procs: ")[1].split()[0]) < 10, out
        if h.uid:
            assert f"uid: {h.uid[0]}" in out, out
        assert "sees no other session's" not in operator.asked[0]["reach"]
        assert "other sessions' directories" in operator.asked[0]["reach"]
    finally:
        h.close()


PEEK_TOOL = """#!/bin/sh
other=$(sed 's/.*"other": *"\\([^"]*\\)".*/\\1/')
echo "other: $(cat "$other/secret.txt" 2>&1)"
echo "beside: $(ls "$(dirname "$PWD")" 2>&1 | tr '\\n' ' ')"
echo "procs: $(ls /proc | grep -c '^[0-9]')"
echo "own: $PWD"
"""


def test_an_elevated_call_through_the_server_stays_in_its_session(tmp_path: Path,
                                                                   monkeypatch) -> None:
    """Issue 44.2 end to end (repro/round4/elevated_cross_session.sh): a server, `toolsrv
    approve --allow peek`, two sessions with private cwds side by side; session B's
    approved elevated call saw session A's cwd beside its own (the tools' uid owns both)
    and read A's file.  Now nothing is beside its cwd."""
    from apphelpers import AppThread, add_tool, tools_dir
    from py9phelpers import agent, connect, rdwr, read
    d = tools_dir()
    add_tool(d, "peek", PEEK_TOOL)
    ns = tmp_path / "broker"
    ns.mkdir(mode=0o700)
    sock = ns / "approve.sock"
    broker = _approve(sock, "--allow", "peek")
    monkeypatch.setenv("OLLIE_BYPASS_SOCKET", str(sock))
    app = AppThread([d], timeout=10).start()
    try:
        with connect(app) as c:
            agent(c, "sA", "a", "peek")
            a_cwd = read(c, "session/sA/cwd").decode().strip()
            secret = Path(a_cwd) / "secret.txt"
            secret.write_text("session A's private file\n")
            secret.chmod(0o600)
            uid = app.app.runner.tool_uid()
            if uid:
                os.chown(secret, *uid)
            b = agent(c, "sB", "b", "peek")
            out = rdwr(c, b + "/tools/peek/call", json.dumps(
                {"elevated": True, "other": a_cwd}).encode()).decode()
            own = out.split("own: ")[1].split()[0]
            assert "session A's private file" not in out and "other: cat: " in out, out
            assert f"beside: {os.path.basename(own)} \n" in out, out   # its cwd alone
            assert int(out.split("procs: ")[1].split()[0]) < 10, out
            log = read(c, b + "/log").decode()
            assert "elevated" in log
    finally:
        app.cleanup()
        broker.terminate()
        broker.wait(10)
