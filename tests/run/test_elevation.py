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
    env = {"OLLIE_BYPASS_SOCKET": sock} if sock else {}
    return h.run(["/bin/cat", str(h.secret)], elevated=True, env=env,
                 context={"session": "s1", "agent": "a1", "tool": "file_read",
                          "args": {"path": str(h.secret)}})


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
        assert no.asked == [{"session": "s1", "agent": "a1", "tool": "file_read",
                             "args": {"path": str(h.secret)}, "cwd": str(h.cwd)}]
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
        res = h.run(["/bin/true"], elevated=True, env={"OLLIE_BYPASS_SOCKET": path},
                    context={"tool": "shell"})
        assert res.error == ("elevation denied (permission denied): shell is not in the "
                             "broker's allow list")
    finally:
        server.close()


def test_silent_broker_times_out_to_no(h: Harness) -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # never answers; returns when the asker hangs up
        writer.close()

    path = str(h.base / "silent.sock")
    server = h.run_async(asyncio.start_unix_server(silent, path))
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

    path = str(h.base / "scripted.sock")
    server = h.run_async(asyncio.start_unix_server(scripted, path))
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
        assert path.exists()
        proc.send_signal(getattr(signal, sig))
        assert proc.wait(10) == 0
        assert not path.exists()
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
            assert "elevation request: tool shell" in line
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
