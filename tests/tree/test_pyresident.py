"""Resident protocol python (issue 33): a one-shot Python tool kept in one interpreter per
agent and tool, whose every call is run as a cold start would run it.

The same script is served twice, once resident (`pyres`) and once as an ordinary tool
(`pycold`), and each test holds the two to the same answers: result or Rerror, `out`,
`err`, the status word.  Real processes, real sandbox; nothing asserts on timing.
"""
from __future__ import annotations

import json
import os
import time

import pytest

from toolsrv.cli.client import Client, ClientError

from apphelpers import AppThread, add_tool, tools_dir

SCRIPT = r'''#!/usr/bin/env python3
"""A one-shot tool: one op per call."""
import json, os, subprocess, sys, time
SEEN = []
a = json.load(sys.stdin)
op = a.get("op")
SEEN.append(op)
if op == "state":       # what an earlier call could have left behind
    mask = os.umask(0o022)
    print(len(SEEN), os.environ.get("MARK", "-"), os.getcwd() == os.environ["PWD"], oct(mask),
          __name__, sys.argv[0] == __file__, sys.modules["__main__"].__dict__ is globals())
    os.environ["MARK"] = "left"
    os.chdir("/")
    os.umask(0o077)
elif op == "exit":
    print("before", flush=True)
    sys.exit(a["code"])
elif op == "raise":
    raise ValueError("no such widget: w1")
elif op == "child":     # a child's output lands in order with the tool's own
    print("one", flush=True)
    subprocess.run(["/bin/echo", "two"])
    print("three")
    print("warned", file=sys.stderr)
elif op == "bytes":
    sys.stdout.buffer.write(b"\xff\xfe not UTF-8 \xe2\x82\xac\n")
elif op == "big":
    sys.stdout.write("x" * a["n"])
elif op == "sleep":
    time.sleep(a["t"])
elif op == "wait":       # until the test says go (a file in the cwd), at most 2.5 s
    until = time.monotonic() + 2.5
    while not os.path.exists("go") and time.monotonic() < until:
        time.sleep(0.01)
    print("went" if os.path.exists("go") else "no go")
elif op == "pid":       # the process: its pid is of a namespace of its own, its TMPDIR its own
    print(os.environ["TMPDIR"], os.getuid())
elif op == "_exit":      # without flushing: what was printed unflushed is lost, as cold
    os.write(1, b"said\n")
    os._exit(a["code"])
elif op == "forked":     # a child's os._exit is the real one
    pid = os.fork()
    if pid == 0:
        os.write(1, b"child\n")
        os._exit(7)
    print("child status", os.waitpid(pid, 0)[1] >> 8)
elif op == "thread":     # a non-daemon thread is waited for, its output is this call's
    import threading
    threading.Thread(target=lambda: (time.sleep(0.3), print("late", flush=True))).start()
elif op == "alarm":      # a pending alarm would end the process after the call
    import signal
    signal.alarm(1)
    print("armed")
elif op == "stdin":
    sys.stdin.seek(0) if sys.stdin.seekable() else None
    print(repr(sys.stdin.read()), repr(os.read(0, 100)))
'''


@pytest.fixture(scope="module")
def srv():
    d = tools_dir()
    add_tool(d, "pyres", SCRIPT, {"resident": {"protocol": "python"}})
    add_tool(d, "pycold", SCRIPT)
    add_tool(d, "pyro", SCRIPT, {"resident": {"protocol": "python"}, "readOnly": True})
    add_tool(d, "shres", "#!/bin/sh\ncat\n", {"resident": {"protocol": "python"}})
    with open(os.path.join(d, "engine.py"), "w") as f:     # a cmd's engine, as file_grep's
        f.write('#!/usr/bin/env python3\nimport sys\nprint(sys.argv[1:], sys.stdin.read())\n')
    os.chmod(os.path.join(d, "engine.py"), 0o755)
    add_tool(d, "viacmd", None, {"cmd": f"exec {d}/engine.py --fast",
                                 "resident": {"protocol": "python", "script": "engine.py",
                                              "args": ["--fast"]}})
    app = AppThread([d], timeout=3).start()
    app.tools = d
    yield app
    app.cleanup()


@pytest.fixture
def c(srv):
    with Client.connect(srv.addr) as c:
        s = "p" + os.urandom(4).hex()
        c.mkdir(f"session/{s}")
        c.mkdir(f"session/{s}/agent/a")
        c.rdwr(f"session/{s}/agent/a/ctl", b"tool_load pyres pycold shres viacmd pyro")
        c.base = f"session/{s}/agent/a"
        yield c
        c.rm(f"session/{s}")


def call(c, tool: str, args: dict) -> dict:
    """Everything a caller can see of one call."""
    try:
        out, why = c.rdwr(f"{c.base}/tools/{tool}/call", json.dumps(args).encode()), None
    except ClientError as e:
        out, why = None, str(e)
    status = c.read(f"{c.base}/tools/{tool}/status").decode()
    return {"result": out, "error": why, "state": status.split()[0],
            "out": c.read(f"{c.base}/tools/{tool}/out"),
            "err": c.read(f"{c.base}/tools/{tool}/err"), "status": status}


def both(c, args: dict) -> dict:
    """The call made resident and cold; the two must agree in everything but the status's
    times and its resident line."""
    res, cold = call(c, "pyres", args), call(c, "pycold", args)
    assert "\nresident " in res["status"] and "resident" not in cold["status"], (res, cold)
    for k in ("result", "error", "state", "out", "err"):
        mine = cold[k].replace(b"pycold", b"pyres") if isinstance(cold[k], bytes) else cold[k]
        assert res[k] == mine, (k, args, res, cold)      # a traceback names its file
    return res


@pytest.mark.parametrize("args", [
    {"op": "exit", "code": 0}, {"op": "exit", "code": 3}, {"op": "exit", "code": "gave up"},
    {"op": "exit", "code": None}, {"op": "child"}, {"op": "bytes"}, {"op": "stdin"},
    {"op": "none"}, {"op": "_exit", "code": 4}, {"op": "forked"}, {"op": "thread"}])
def test_each_call_is_answered_as_a_cold_run_would_be(c, args):
    r = both(c, args)
    if args.get("code") == 3:
        assert r["state"] == "exit" and r["error"].startswith("exit 3 (input/output error)")
        assert r["out"] == b"before\n"
    if args.get("op") == "child":
        assert r["result"] == b"one\ntwo\nthree\n" and r["err"] == b"warned\n"
    if args.get("op") == "bytes":
        assert r["result"] == b"\xff\xfe not UTF-8 \xe2\x82\xac\n"


def test_an_uncaught_exception_is_the_interpreters_traceback(c):
    r = both(c, {"op": "raise"})
    assert r["state"] == "exit" and "no such widget: w1" in r["error"]
    err = r["err"].decode()
    assert err.startswith("Traceback (most recent call last):\n") and "pyhost" not in err
    assert err.rstrip().endswith("ValueError: no such widget: w1")


def test_bad_json_is_the_scripts_own_error_as_cold(c):
    res = c.rdwr(f"{c.base}/tools/pyres/call", b"{}")   # valid: {} has no op
    assert res == b""
    r = both(c, {"op": "raise"})
    assert r["state"] == "exit"


def test_nothing_one_call_does_is_seen_by_the_next(c):
    first = both(c, {"op": "state"})
    assert first["result"].decode().split() == ["1", "-", "True", "0o22", "__main__", "True",
                                                "True"]
    again = call(c, "pyres", {"op": "state"})
    assert again["result"] == first["result"]
    pids = {call(c, "pyres", {"op": "pid"})["result"] for _ in range(3)}
    assert len(pids) == 1                     # one process served them all
    pid, uid = pids.pop().split()
    assert uid != b"0" or os.geteuid() != 0   # confined as a cold run: not the server's uid


def test_an_edited_script_is_run_as_edited(c, srv):
    pid = call(c, "pyres", {"op": "pid"})["result"]
    path = os.path.join(srv.tools, "pyres")
    with open(path, "a") as f:
        f.write('print("edited")\n')
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    try:
        r = call(c, "pyres", {"op": "pid"})
        assert r["result"].endswith(b"edited\n")
        assert r["result"].split()[0] == pid.split()[0]    # the same process, new code
    finally:
        with open(path, "w") as f:
            f.write(SCRIPT)


def test_output_over_the_cap_is_cut_as_a_cold_runs(c, srv):
    cfg = srv.app.runner.config
    old = cfg.stdout_cap
    srv.call(lambda: setattr(cfg, "stdout_cap", 4096))
    try:
        c.rdwr(f"{c.base}/ctl", b"tool_unload pyres")     # a process started with the cap
        c.rdwr(f"{c.base}/ctl", b"tool_load pyres")
        r = both(c, {"op": "big", "n": 10000})
        assert r["state"] == "killed" and r["error"].startswith("output too long: stdout cut at")
        assert r["out"] == b"x" * 4096
        assert both(c, {"op": "big", "n": 100})["result"] == b"x" * 100
    finally:
        srv.call(lambda: setattr(cfg, "stdout_cap", old))


def test_a_timeout_is_a_cold_runs_and_the_next_call_gets_a_new_process(c):
    pid = call(c, "pyres", {"op": "pid"})["result"]
    r = both(c, {"op": "sleep", "t": 30})
    assert r["state"] == "timeout" and r["error"].startswith("timeout after 3s")
    assert "\nresident stopped: timeout after 3s" in r["status"]
    assert call(c, "pyres", {"op": "pid"})["result"] != pid


def test_a_command_it_cannot_host_runs_cold_and_the_log_says_why_once(c):
    for _ in range(2):
        assert c.rdwr(f"{c.base}/tools/shres/call", b'{"x": 1}') == b'{"x": 1}'
    log = c.read(f"{c.base}/log").decode()
    assert log.count("resident shres -> runs cold: not a Python script") == 1, log


def hosts_of(path: str) -> list[str]:
    """The pids of pyhost processes serving the tools directory `path`."""
    found = []
    for p in os.listdir("/proc"):
        try:
            with open(f"/proc/{p}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if len(argv) > 5 and b"pyhost.py" in argv[2] and argv[5] == path.encode():
            found.append(p)
    return found


def test_an_agents_tools_share_one_interpreter_until_the_last_is_unloaded(c, srv):
    """pyres and pyro (one tools directory, one sandbox, one #! interpreter) are served by
    one process of the agent; unloading one leaves it to the other; the last one ends it."""
    path = srv.tools
    deadline = time.monotonic() + 20
    while hosts_of(path) and time.monotonic() < deadline:   # other tests' sessions' go
        time.sleep(0.05)
    one = call(c, "pyres", {"op": "pid"})["result"]
    assert call(c, "pyro", {"op": "pid"})["result"] == one        # the same TMPDIR: process
    assert len(hosts_of(path)) == 1
    assert "residents: 1 up (1 python)\n" in c.read("status").decode()   # /status says so
    log = c.read(f"{c.base}/log").decode()      # and the log, so no one looks for a warm start
    assert log.count("-> started: this agent's one interpreter for its one-shot Python "
                     "tools (their calls run in it, not as warm starts)") == 1, log
    c.rdwr(f"{c.base}/ctl", b"tool_unload pyres")
    assert call(c, "pyro", {"op": "pid"})["result"] == one        # still up, for pyro
    assert len(hosts_of(path)) == 1
    c.rdwr(f"{c.base}/ctl", b"tool_unload pyro")
    while hosts_of(path) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert hosts_of(path) == []


def test_a_script_beside_the_meta_is_run_for_a_cmd_tool(c):
    r = call(c, "viacmd", {"x": 1})
    assert r["result"] == b"""['--fast'] {"x": 1}\n""" and "\nresident up " in r["status"]


def test_read_only_calls_still_run_side_by_side(c):
    """A readOnly tool's calls run in parallel, cold; resident, one that finds the
    interpreter busy runs cold beside it (and the log says so once)."""
    import threading
    call(c, "pyro", {"op": "pid"})                    # the interpreter is up
    got: list = []
    slow = threading.Thread(target=lambda: got.append(call(c, "pyro", {"op": "wait"})))
    slow.start()
    deadline = time.monotonic() + 20
    while "running" not in c.read(f"{c.base}/tools/pyro/status").decode() \
            and time.monotonic() < deadline:
        time.sleep(0.01)
    r = c.rdwr(f"{c.base}/tools/pyro/call", b'{"op": "pid"}')   # while the first waits
    log = c.read(f"{c.base}/log").decode()
    cwd = c.read(f"session/{c.base.split('/')[1]}/cwd").decode().strip()
    open(os.path.join(cwd, "go"), "w").close()        # now the first may end
    slow.join()
    assert got[0]["result"] == b"went\n"            # it was still running: side by side
    assert r.split()[1] == call(c, "pyro", {"op": "pid"})["result"].split()[1]   # its uid
    assert "\nresident up " in c.read(f"{c.base}/tools/pyro/status").decode()
    assert log.count("resident pyro -> runs cold: its interpreter is busy") == 1, log


def test_a_pending_alarm_does_not_end_the_process(c):
    before = call(c, "pyres", {"op": "pid"})["result"]
    assert both(c, {"op": "alarm"})["result"] == b"armed\n"
    # the next call outlasts the alarm: SIGALRM, had it stayed armed, would end the process
    assert call(c, "pyres", {"op": "sleep", "t": 1.5})["state"] == "ok"
    assert call(c, "pyres", {"op": "pid"})["result"] == before


def test_an_elevated_call_runs_cold_where_elevation_is_decided(c):
    """Elevation lifts the sandbox, which a resident process cannot: the call goes the cold
    way, to the broker (none here, so it is denied, as any cold elevated call is)."""
    before = call(c, "pyres", {"op": "pid"})["result"]
    r = call(c, "pyres", {"op": "pid", "elevated": True})
    assert r["error"].startswith("elevation denied (permission denied)"), r
    log = c.read(f"{c.base}/log").decode()
    assert "resident pyres -> runs cold: an elevated call runs outside the sandbox" in log
    assert call(c, "pyres", {"op": "pid"})["result"] == before     # the process was left be
