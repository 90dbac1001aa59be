"""Replay 9P conversations written as text (tests/transcripts/*.txt).

Each file is a conversation in the one-line trace form of proto.fmt:
    T-lines are sent to a fresh server over an in-memory transport, and so are
    Malformed lines (what the codec makes of a sound frame with bad content);
    R-lines are the replies expected, in the order they arrive;
    `*` in an R-line matches any one word (times, for instance);
    `!bump` moves the fake registry's revision, `!hangup` hangs up,
    `!quiet` asserts that no reply is waiting;
    `#` starts a comment.
"""
from __future__ import annotations

import asyncio
import pathlib
import re

import pytest

from toolsrv.proto import format_msg, parse_msg
from toolsrv.serve.server import Conn, ServerConfig

from fakes import FakeRegistry, FakeRunner, make_fs

HERE = pathlib.Path(__file__).parent.parent / "transcripts"
FILES = sorted(HERE.glob("*.txt"))


def _pattern(expected: str) -> re.Pattern[str]:
    parts = [r"\S+" if w == "*" else re.escape(w) for w in expected.split(" ")]
    return re.compile(" ".join(parts) + r"\Z")


async def _yield(n: int = 20) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


async def replay(path: pathlib.Path, tmp: str) -> None:
    reg = FakeRegistry()
    fs = make_fs(tmp, reg, revwait_timeout=5.0, runner=FakeRunner())
    replies: asyncio.Queue = asyncio.Queue()
    conn = Conn(fs, replies.put_nowait, ServerConfig(msize=8192 + 24))
    for lineno, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        where = f"{path.name}:{lineno}"
        if line.startswith(("T", "Malformed ")):
            conn.receive(parse_msg(line))
        elif line.startswith("R"):
            try:
                got = format_msg(await asyncio.wait_for(replies.get(), 5))
            except asyncio.TimeoutError:
                pytest.fail(f"{where}: no reply, expected {line}")
            if "*" in line.split(" "):
                assert _pattern(line).match(got), f"{where}: got {got!r}, want {line!r}"
            else:
                want = format_msg(parse_msg(line))
                assert got == want, f"{where}: got {got!r}, want {want!r}"
        elif line == "!bump":
            reg.bump()
        elif line == "!hangup":
            conn.hangup()
        elif line == "!quiet":
            await _yield()
            assert replies.empty(), f"{where}: unexpected reply {replies.get_nowait()}"
        else:
            raise ValueError(f"{where}: unknown line {line!r}")
    await _yield()
    assert replies.empty(), f"{path.name}: unexpected trailing reply {replies.get_nowait()}"


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_transcript(path: pathlib.Path, tmp_path: pathlib.Path) -> None:
    asyncio.run(replay(path, str(tmp_path)))


def test_there_are_transcripts() -> None:
    assert len(FILES) >= 5


def test_trace_shows_each_message_in_the_text_form(tmp_path: pathlib.Path) -> None:
    """-D: one line per message each way, in proto.fmt's form (cut at 64 data bytes)."""
    async def go() -> list[str]:
        fs = make_fs(str(tmp_path), FakeRegistry(), revwait_timeout=5.0, runner=FakeRunner())
        lines: list[str] = []
        conn = Conn(fs, lambda r: None, ServerConfig(msize=8192 + 24, trace=lines.append), "c1")
        for line in ("Tversion tag 65535 msize 8192 version 9P2000",
                     "Tattach tag 1 fid 0 afid -1 uname u aname ''"):
            conn.receive(parse_msg(line))
        await _yield()
        return lines
    lines = asyncio.run(go())
    assert lines[:3] == ["c1 <- Tversion tag 65535 msize 8192 version 9P2000",
                         "c1 -> Rversion tag 65535 msize 8192 version 9P2000",
                         "c1 <- Tattach tag 1 fid 0 afid -1 uname u aname ''"]
    assert lines[3].startswith("c1 -> Rattach tag 1 qid (") and len(lines) == 4
