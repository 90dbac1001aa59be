"""Resident tools (issue 17): the lines protocol end to end, through the python-9p client.

A whole server on a thread, tools are real processes started through the launcher (their own
PID namespace, cgroup, Landlock ruleset); every "gone" is checked on the real process table.
Nothing here asserts on timing.
"""
from __future__ import annotations

import re
import json
import os
import sys
import threading
import time

import pytest
from toolsrv.errors import defuse
from py9p import ORDWR, RemoteError, Rflush, Rread, Tflush, Tread

from apphelpers import AppThread, add_tool, tools_dir
from py9phelpers import _fids, agent, connect, mkdir, rdwr, read

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "tools"))
from sandbox_support import processes_with  # noqa: E402

# A lines-protocol tool that keeps a counter; each op misbehaves in one way.
COUNTER = r'''#!/usr/bin/env python3
import json, os, sys, time
token = os.urandom(6).hex()
n = 0
for line in sys.stdin:
    args = json.loads(line)
    n += 1
    op = args.get("op", "count")
    if op == "count":
        print("counting", n, file=sys.stderr, flush=True)
        out = {"output": f"{n} {token}"}
    elif op == "error":
        out = {"error": "no such widget: w" + str(n)}
    elif op == "garbage":
        sys.stdout.write("Traceback (most recent call last)\n"); sys.stdout.flush(); continue
    elif op == "eof":
        os.close(1); time.sleep(60)
    elif op == "crash":
        print("dying now", file=sys.stderr, flush=True); os._exit(3)
    elif op == "sleep":
        time.sleep(float(args["t"])); out = {"output": "slept"}
    elif op == "big":
        out = {"output": "x" * args["n"]}
    elif op == "read":
        try:
            out = {"output": open(args["path"]).read()}
        except OSError as e:
            out = {"error": f"{e.strerror}"}
    elif op == "whoami":
        out = {"output": f"{os.getuid()} {os.getpid()} {os.getcwd()}"}
    print(json.dumps(out), flush=True)
'''

DIES = "#!/bin/sh\necho 'cannot start: missing config' >&2\nexit 7\n"
IDLE = r'''#!/usr/bin/env python3
import json, signal, sys
signal.signal(signal.SIGTERM, signal.SIG_IGN)   # stubborn: SIGKILL after the grace period
for line in sys.stdin:
    print(json.dumps({"output": "ok"}), flush=True)
'''

PYREAD = r'''#!/usr/bin/env python3
import json, sys
try:
    print(open(json.load(sys.stdin)["path"]).read())
except OSError as e:
    sys.exit(e.strerror)
'''


@pytest.fixture(scope="module")
def srv():
    d = tools_dir()
    add_tool(d, "counter", COUNTER, {"resident": True})
    add_tool(d, "counter_ro", COUNTER, {"resident": {"protocol": "lines"}, "readOnly": True})
    add_tool(d, "dies", DIES, {"resident": True})
    add_tool(d, "idler", IDLE, {"resident": {"idle": 2}})
    add_tool(d, "pyread", PYREAD, {"resident": {"protocol": "python"}})
    app = AppThread([d], timeout=5, max_args=1 << 20).start()
    app.tools = d
    yield app
    app.cleanup()


def procs(srv, name: str) -> list[int]:
    return processes_with(f"{srv.tools}/{name}\0")


def wait_for(pred, what: str, limit: float = 15.0) -> None:
    end = time.monotonic() + limit
    while time.monotonic() < end:
        if pred():
            return
        time.sleep(0.02)
    raise AssertionError(f"gave up waiting for {what}")


def call(c, a: str, tool: str, args: dict) -> bytes:
    return rdwr(c, f"{a}/tools/{tool}/call", json.dumps(args).encode())


def test_state_is_kept_and_each_agent_has_its_process(srv):
    with connect(srv) as c:
        a = agent(c, "st", "a", "counter")
        mkdir(c, "session/st/agent/b")
        b = "session/st/agent/b"
        rdwr(c, b + "/ctl", b"tool_load counter")
        r1 = call(c, a, "counter", {}).split()
        r2 = call(c, a, "counter", {}).split()
        assert (r1[0], r2[0]) == (b"1", b"2") and r1[1] == r2[1]     # one process, kept
        rb = call(c, b, "counter", {}).split()
        assert rb[0] == b"1" and rb[1] != r1[1]                      # another agent: its own
        assert read(c, a + "/tools/counter/err") == b"counting 2\n"  # stderr of that call
        assert read(c, a + "/tools/counter/out") == b"2 " + r1[1]
        status = read(c, a + "/tools/counter/status").decode().splitlines()
        assert status[0].startswith("ok ") and status[1].startswith("resident up ")
        assert status[1].endswith(", 2 calls")
        assert len(procs(srv, "counter")) == 2


def test_error_reply_is_an_rerror_and_the_process_stays(srv):
    with connect(srv) as c:
        a = agent(c, "er", "a", "counter")
        first = call(c, a, "counter", {}).split()[1]
        with pytest.raises(RemoteError) as e:
            call(c, a, "counter", {"op": "error"})
        assert defuse("no such widget: w2") in str(e.value) and "(input/output error)" in str(e.value)
        assert read(c, a + "/tools/counter/status").startswith(b"error ")
        assert "no such widget: w2" in read(c, a + "/log").decode()   # the text as written
        assert call(c, a, "counter", {}).split() == [b"3", first]


@pytest.mark.parametrize("op,words", [
    ("garbage", "reply is not {\"output\": STRING} or {\"error\": STRING}: "
                "'Traceback (most recent"),
    ("eof", "EOF on stdout"),
    ("crash", "process exited with status 3: dying now"),
])
def test_a_broken_reply_fails_the_call_and_the_next_gets_a_fresh_process(srv, op, words):
    with connect(srv) as c:
        a = agent(c, f"br{op}", "a", "counter")
        first = call(c, a, "counter", {}).split()[1]
        with pytest.raises(RemoteError, match="^resident: ") as e:
            call(c, a, "counter", {"op": op})
        assert "(input/output error)" in str(e.value)
        assert words in read(c, a + "/log").decode()
        assert read(c, a + "/tools/counter/status").startswith(b"failed: resident: ")
        n, again = call(c, a, "counter", {}).split()
        assert n == b"1" and again != first


def test_a_reply_over_the_cap_fails_and_kills(srv):
    cap = srv.call(lambda: srv.app.runner.config.stdout_cap)
    with connect(srv) as c:
        a = agent(c, "cap", "a", "counter")
        call(c, a, "counter", {})
        with pytest.raises(RemoteError, match="output cap"):
            call(c, a, "counter", {"op": "big", "n": cap + 10})
        assert read(c, a + "/tools/counter/status").startswith(b"killed")
        assert call(c, a, "counter", {}).split()[0] == b"1"


def _one_process(srv, c, a: str) -> list[int]:
    call(c, a, "counter", {})
    mine = [p for p in procs(srv, "counter") if p not in srv.seen]
    srv.seen.update(mine)
    assert len(mine) == 1
    return mine


@pytest.mark.parametrize("how", ["timeout", "cancel", "flush", "unload", "rm-agent",
                                 "rm-session"])
def test_each_ending_kills_the_process(srv, how):
    srv.seen = getattr(srv, "seen", set(procs(srv, "counter")))
    srv.seen.update(procs(srv, "counter"))
    with connect(srv) as c:
        s = f"end{how}"
        a = agent(c, s, "a", "counter")
        pid = _one_process(srv, c, a)[0]
        if how == "timeout":
            with pytest.raises(RemoteError, match="^timeout after 5s"):
                call(c, a, "counter", {"op": "sleep", "t": 30})
        elif how == "flush":
            f = next(_fids)
            c.walk(0, f, a + "/tools/counter/call")
            c.open(f, ORDWR)
            c.write(f, b'{"op": "sleep", "t": 30}')
            box: dict = {}

            def blocked() -> None:
                try:
                    box["r"] = c.rpc(Tread(fid=f, offset=0, count=100), Rread, tag=77)
                except RemoteError as e:
                    box["e"] = str(e)
            t = threading.Thread(target=blocked)
            t.start()
            c.stat(f)
            assert isinstance(c.rpc(Tflush(oldtag=77), Rflush), Rflush)
            t.join(10)
            assert box == {"e": "interrupted"}
        elif how in ("cancel", "unload"):
            rdwr(c, a + "/ctl", b"cancel counter" if how == "cancel" else b"tool_unload counter")
        else:
            g = next(_fids)
            c.walk(0, g, a if how == "rm-agent" else f"session/{s}")
            c.remove(g)
        wait_for(lambda: not os.path.exists(f"/proc/{pid}"), "the process to be gone")
        if how in ("timeout", "cancel"):
            assert read(c, a + "/tools/counter/status").decode().splitlines()[1] \
                .startswith("resident stopped: ")
            assert call(c, a, "counter", {}).split()[0] == b"1"


def test_idle_process_gets_sigterm_then_sigkill(srv):
    with connect(srv) as c:
        a = agent(c, "idle", "a", "idler")
        assert call(c, a, "idler", {}) == b"ok"
        assert len(procs(srv, "idler")) == 1
        wait_for(lambda: not procs(srv, "idler"), "the idle process to be gone")
        assert read(c, a + "/tools/idler/status").decode().splitlines()[1] == \
            "resident stopped: idle"
        assert call(c, a, "idler", {}) == b"ok"                  # started again


def test_a_tool_that_keeps_dying_at_start_backs_off(srv):
    with connect(srv) as c:
        a = agent(c, "boff", "a", "dies")
        for _ in range(2):
            with pytest.raises(RemoteError, match="exited with status 7: cannot start"):
                call(c, a, "dies", {})
        with pytest.raises(RemoteError, match=r"^resident: 2 failed starts, next start in "):
            call(c, a, "dies", {})
        status = read(c, a + "/tools/dies/status").decode().splitlines()
        assert status[0].startswith("refused: resident: 2 failed starts")
        assert "cannot start: missing config" in status[1] and "next start in" in status[1]
        assert "failed starts" in read(c, a + "/log").decode()


def test_the_sandbox_is_enforced_on_the_resident_process(srv):
    with connect(srv) as c:
        a = agent(c, "sbx", "a", "counter")
        who = call(c, a, "counter", {"op": "whoami"}).decode().split()
        if os.geteuid() == 0:
            assert who[0] == "65534"                       # the tools' uid, not root's
        nspids = []                                        # a PID namespace of its own:
        for p in procs(srv, "counter"):                    # the host pid and the inner one
            with open(f"/proc/{p}/status") as f:
                nspids += [ln.split()[1:] for ln in f if ln.startswith("NSpid:")]
        assert any(len(n) >= 2 and n[-1] == who[1] for n in nspids), (nspids, who)
        with pytest.raises(RemoteError, match=re.escape(defuse("Permission denied"))):
            call(c, a, "counter", {"op": "read", "path": "/etc/shadow" if os.path.exists(
                "/etc/shadow") else "/root/.bashrc"})
        home_file = os.path.join(srv.tmp, "secret")
        with open(home_file, "w") as f:
            f.write("secret")
        os.chmod(home_file, 0o644)
        os.chmod(srv.tmp, 0o755)
        with pytest.raises(RemoteError, match=re.escape(defuse("Permission denied"))):   # Landlock: outside the profile
            call(c, a, "counter", {"op": "read", "path": home_file})


def test_a_thousand_calls_grow_no_fds_or_memory(srv):
    def fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    def rss() -> int:
        with open("/proc/self/status") as f:
            return next(int(ln.split()[1]) for ln in f if ln.startswith("VmRSS:"))
    with connect(srv) as c:
        a = agent(c, "thou", "a", "counter_ro")
        for _ in range(100):
            call(c, a, "counter_ro", {})
        before_fds, before_rss = fds(), rss()
        for _ in range(1000):
            call(c, a, "counter_ro", {})
        assert call(c, a, "counter_ro", {}).split()[0] == b"1101"
        assert fds() <= before_fds
        assert rss() - before_rss < 8 * 1024          # KiB: no per-call growth


def test_a_change_of_cwd_or_sandbox_restarts_the_process_at_the_next_call(srv, tmp_path):
    new = tmp_path / "elsewhere"
    new.mkdir()
    os.chmod(tmp_path, 0o755)
    os.chmod(new, 0o777)
    with connect(srv) as c:
        a = agent(c, "chg", "a", "counter")
        token = call(c, a, "counter", {}).split()[1]
        assert call(c, a, "counter", {}).split() == [b"2", token]
        rdwr(c, "session/chg/cwd", str(new).encode())
        assert call(c, a, "counter", {"op": "whoami"}).split()[2] == str(new).encode()
        n, again = call(c, a, "counter", {}).split()
        assert n == b"2" and again != token            # whoami was the fresh one's first
        rdwr(c, "session/chg/sandbox", b"client9p")
        assert call(c, a, "counter", {}).split()[0] == b"1"
        log = read(c, a + "/log").decode()
        assert log.count("resident counter -> stopped: sandbox or cwd changed") == 2


def test_calls_to_one_process_run_one_at_a_time_in_order(srv):
    """readOnly tools of one agent are not under the agent's lock: the process's is."""
    out: list[bytes] = []

    def one() -> None:
        with connect(srv) as c:
            out.append(call(c, "session/ord/agent/a", "counter_ro", {"op": "sleep", "t": 0.2}))
    with connect(srv) as c:
        agent(c, "ord", "a", "counter_ro")
        ts = [threading.Thread(target=one) for _ in range(3)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(30)
        assert out == [b"slept"] * 3
        assert call(c, "session/ord/agent/a", "counter_ro", {}).split()[0] == b"4"


def test_shutdown_kills_every_resident_process():
    d = tools_dir()
    add_tool(d, "counter", COUNTER, {"resident": True})
    app = AppThread([d], timeout=5).start()
    try:
        with connect(app) as c:
            for name in ("x", "y"):
                a = agent(c, f"sd{name}", "a", "counter")
                call(c, a, "counter", {})
        pids = processes_with(f"{d}/counter\0")
        assert len(pids) == 2
    finally:
        app.cleanup()
    wait_for(lambda: not any(os.path.exists(f"/proc/{p}") for p in pids), "the processes")


def _doc_blocks(lang: str) -> list[str]:
    """The `lang` code blocks of doc/tools.md's section on resident tools."""
    doc = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))), "doc", "tools.md")
    text = open(doc).read().split("## Resident tools", 1)[1].split("\n## ", 1)[0]
    return [b.split("\n", 1)[1] for b in text.split("```" + lang + "\n")[1:]
            for b in [("x\n" + b).split("\n```", 1)[0]]]


def test_the_examples_of_doc_tools_md_work_as_written():
    d = tools_dir()
    (kv,), (counter,) = _doc_blocks("python"), _doc_blocks("bash")
    meta = json.loads(_doc_blocks("json")[0])
    add_tool(d, "kv", kv, meta)
    add_tool(d, "counter", counter, {"resident": True})
    app = AppThread([d], timeout=5).start()
    try:
        with connect(app) as c:
            a = agent(c, "doc", "a", "kv", "counter")
            assert call(c, a, "kv", {"key": "a", "value": "1"}) == b"stored\n"
            assert call(c, a, "kv", {"key": "a"}) == b"1\n"
            with pytest.raises(RemoteError, match=re.escape(defuse("no such key: b"))):
                call(c, a, "kv", {"key": "b"})
            assert call(c, a, "counter", {}) == b"call 1\n"
            assert call(c, a, "counter", {"x": 1}) == b"call 2\n"
            assert read(c, a + "/tools/counter/err") == b"call 2: 7 bytes of args\n"
    finally:
        app.cleanup()


def test_an_elevated_call_of_a_resident_tool_is_refused(srv):
    with connect(srv) as c:
        a = agent(c, "elev", "a", "counter")
        call(c, a, "counter", {})
        with pytest.raises(RemoteError, match=r"^elevation: not for resident tools "
                                              r"\(not implemented\)"):
            call(c, a, "counter", {"elevated": True})
        assert call(c, a, "counter", {}).split()[0] == b"2"     # the process was left alone


@pytest.mark.parametrize("tool, args", [("counter", {"op": "read"}), ("pyread", {})])
def test_an_edited_profile_that_revokes_a_grant_ends_the_resident_before_its_next_call(
        srv, tmp_path, monkeypatch, tool, args):
    """Issue 44.3 (repro/round4/resident_profile_stale.sh): the process was restarted on a
    change of the profile's name only, so a grant revoked on disk stayed in force in the
    resident process (the lines protocol, the bundled shell, the python host) while cold
    runs lost it at once."""
    from toolsrv.run.sandbox import default_shipped_dir
    shipped = (default_shipped_dir() / "default.yaml").read_text()
    os.chmod(tmp_path, 0o755)
    secret = tmp_path / "secret" / "s.txt"
    secret.parent.mkdir(mode=0o755)
    secret.write_text("TOP-SECRET")
    secret.chmod(0o644)
    mine = tmp_path / "home" / ".config" / "ollie" / "sandbox"
    mine.mkdir(parents=True)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    profile = mine / f"rev{tool}.yaml"
    profile.write_text(shipped.replace("  ro:\n", f"  ro:\n    - {secret.parent}\n", 1))
    args = {**args, "path": str(secret)}
    with connect(srv) as c:
        a = agent(c, f"rev{tool}", "a", tool)
        rdwr(c, f"session/rev{tool}/sandbox", f"rev{tool}".encode())
        assert b"TOP-SECRET" in call(c, a, tool, args)                 # granted
        profile.write_text(shipped)                                      # revoked on disk
        with pytest.raises(RemoteError, match=re.escape(defuse("Permission denied"))):
            call(c, a, tool, args)
        log = read(c, a + "/log").decode()
        assert f"resident {tool} -> stopped: sandbox profile rev{tool} edited" in log
        profile.write_text(shipped + "# a comment only\n")             # same grants:
        with pytest.raises(RemoteError):                                 # the process stays
            call(c, a, tool, args)
        assert read(c, a + "/log").decode().count("stopped:") == 1
