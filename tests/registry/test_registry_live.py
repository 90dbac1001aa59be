"""Live reload at the library level: files and directories changing on disk reach
`tools` and `wait_change` without a restart, with inotify and with polling.

No assertion depends on timing: each test waits (generously) for the state it expects,
and a burst is made with no await between its writes, so its events are queued together.
"""

import asyncio
import json
import os
import shutil
import time

import pytest

from toolsrv.registry.registry import Registry
from toolsrv.registry.watch import Batcher, inotify_available

MODES = ["poll", pytest.param("inotify", marks=pytest.mark.skipif(
    not inotify_available(), reason="no inotify here"))]
WAIT = 20.0  # seconds: only ever reached when a test fails


def write(path, obj):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj))


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


async def until(r, cond):
    """Wait for revision bumps until cond() holds; return the revision."""
    deadline = time.monotonic() + WAIT
    while not cond():
        left = deadline - time.monotonic()
        assert left > 0, "timed out waiting for the registry"
        await r.wait_change(r.revision, left)
    return r.revision


def started(tmp_path, dirs, mode, poll_interval=None):
    """A registry watching `dirs`; with inotify the periodic tick is off unless asked for,
    so what the test sees came through inotify."""
    if poll_interval is None:
        poll_interval = 0.05 if mode == "poll" else 3600
    return Registry([str(d) for d in dirs], watch=mode, poll_interval=poll_interval,
                    env={"PATH": str(tmp_path / "bin"), "HOME": str(tmp_path)})


async def start(r):
    await r.start()
    assert r._follower.watching == (r.watch_mode == "inotify")


@pytest.mark.parametrize("mode", MODES)
def test_write_then_delete_a_meta(tmp_path, mode):
    tools = tmp_path / "tools"
    tools.mkdir()

    async def main():
        r = started(tmp_path, [tools], mode)
        await start(r)
        try:
            assert r.revision == 1 and r.index_text() == ""
            write(tools / "hello.meta", {"description": "hi", "cmd": "echo hi"})
            assert await r.wait_change(1, WAIT) == 2
            assert r.index_text() == "hello\thot\thi\n"
            (tools / "hello.meta").unlink()
            assert await r.wait_change(2, WAIT) == 3
            assert r.get("hello") is None and r.index_text() == ""
        finally:
            await r.close()
    run(main())


@pytest.mark.parametrize("mode", MODES)
def test_changes_that_arrive_together_are_one_revision(tmp_path, mode):
    tools = tmp_path / "tools"
    tools.mkdir()

    async def main():
        r = started(tmp_path, [tools], mode)
        await start(r)
        try:
            for i in range(20):  # no await in between: the events queue up together
                write(tools / f"t{i}.meta", {"cmd": "echo x"})
            assert await r.wait_change(1, WAIT) == 2
            assert len(r.tools) == 20
            await asyncio.sleep(0.3)
            assert r.revision == 2
        finally:
            await r.close()
    run(main())


@pytest.mark.parametrize("mode", MODES)
def test_edit_rename_and_executable(tmp_path, mode):
    tools = tmp_path / "tools"
    write(tools / "a.meta", {"description": "one", "cmd": "echo a"})

    async def main():
        r = started(tmp_path, [tools], mode)
        await start(r)
        try:
            write(tools / ".a.meta.tmp", {"description": "two", "cmd": "echo a"})
            os.rename(tools / ".a.meta.tmp", tools / "a.meta")  # an editor's atomic save
            await until(r, lambda: r.get("a") and r.get("a").description == "two")
            os.rename(tools / "a.meta", tools / "b.meta")
            await until(r, lambda: r.get("a") is None and r.get("b") is not None)
            (tools / "b").write_text("#!/bin/sh\n")
            (tools / "b").chmod(0o755)
            await until(r, lambda: r.get("b").command.rule == "beside")
            (tools / "b").chmod(0o644)
            await until(r, lambda: r.get("b").command.rule == "cmd-shell")
        finally:
            await r.close()
    run(main())


@pytest.mark.parametrize("mode", MODES)
def test_directory_of_the_path_appearing_and_vanishing(tmp_path, mode):
    first, second = tmp_path / "a" / "b" / "tools", tmp_path / "second"
    write(second / "x.meta", {"description": "second", "cmd": "echo x"})

    async def main():
        r = started(tmp_path, [first, second], mode)
        await start(r)
        try:
            assert r.get("x").description == "second"
            write(first / "x.meta", {"description": "first", "cmd": "echo x"})  # mkdir -p too
            await until(r, lambda: r.get("x").description == "first")
            assert r.errors == [(str(second / "x.meta"), f"shadowed by {first / 'x.meta'}")]
            shutil.rmtree(tmp_path / "a")
            await until(r, lambda: r.get("x").description == "second")
            assert r.errors == []
            os.rename(second, tmp_path / "elsewhere")
            await until(r, lambda: r.get("x") is None)
            os.rename(tmp_path / "elsewhere", second)
            await until(r, lambda: r.get("x") is not None)
        finally:
            await r.close()
    run(main())


@pytest.mark.parametrize("mode", MODES)
def test_path_binary_appearing_is_found_by_the_periodic_recheck(tmp_path, mode):
    tools = tmp_path / "tools"
    write(tools / "logs.meta", {"variants": [{"match": {"binary": "journalctl"},
                                              "cmd": "journalctl"}]})

    async def main():
        r = started(tmp_path, [tools], mode, poll_interval=0.05)
        await start(r)
        try:
            assert r.get("logs") is None
            (tmp_path / "bin").mkdir()
            (tmp_path / "bin" / "journalctl").write_text("#!/bin/sh\n")
            (tmp_path / "bin" / "journalctl").chmod(0o755)
            await until(r, lambda: r.get("logs") is not None)
            assert r.get("logs").command.argv == (str(tmp_path / "bin" / "journalctl"),)
        finally:
            await r.close()
    run(main())


def test_wait_change_returns_at_once_times_out_and_cancels(tmp_path):
    async def main():
        r = Registry([str(tmp_path)], env={"PATH": ""})
        r.load()
        assert await r.wait_change(0, 10) == 1  # already moved past 0
        assert await r.wait_change(1, 0.05) == 1  # bounded wait, unchanged value
        task = asyncio.ensure_future(r.wait_change(1, WAIT))
        await asyncio.sleep(0.01)
        task.cancel()  # what a Tflush does
        with pytest.raises(asyncio.CancelledError):
            await task
        assert not r._waiters
        waiter = asyncio.ensure_future(r.wait_change(1, WAIT))
        await asyncio.sleep(0.01)
        write(tmp_path / "a.meta", {"cmd": "echo x"})
        r.rescan()
        assert await waiter == 2
    run(main())


def test_batcher_applies_a_burst_once_and_holds_for_open_files():
    applied = []

    async def main():
        b = Batcher(applied.append, quiet=0.01, cap=0.1, hold=5.0)
        for i in range(5):
            b.add(f"/t/{i}")
        while not applied:
            await asyncio.sleep(0.01)
        assert applied == [{f"/t/{i}" for i in range(5)}]
        b.add("/t/big", "writing")  # modified, not yet closed: held back
        await asyncio.sleep(0.3)
        assert len(applied) == 1
        b.add("/t/big", "closed")
        while len(applied) == 1:
            await asyncio.sleep(0.01)
        assert applied[1] == {"/t/big"}
        b.close()
    run(main())
