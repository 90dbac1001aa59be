"""A tool's secrets through the whole server (issue 50.1): the value reaches the run's
environment, cold, warm and resident alike, and never a place a client can read: a run
that prints it shows `[secret NAME]` in the reply, `out`, `err`, `status`, the agent's
`log` and the Rerror, and a walk of the whole tree, a grep of the state directory (the
audit trail, state.json) and the server's log find no value.  A missing or unsafe secret
refuses the call before it runs, naming where it looked.  Real processes, real sandbox."""
from __future__ import annotations

import json
import logging
import os
import stat
import tempfile

import pytest

from toolsrv.cli.client import Client, ClientError

from apphelpers import AppThread, add_tool, tools_dir
from serverhelpers import stop_clean, wait_for

VALUE = "tok-" + os.urandom(12).hex()
SH_LEAK = """#!/bin/sh
echo "out: $TEST_TOKEN"
echo "progress 1/2 at $TEST_TOKEN" >&2
echo "err: $TEST_TOKEN" >&2
"""
SH_FAIL = '#!/bin/sh\necho "failed with $TEST_TOKEN" >&2\nexit 3\n'
SH_NAP = """#!/bin/sh
echo "progress 1/2 holding $TEST_TOKEN" >&2
i=0
while [ ! -e go ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done
echo done
"""
SH_CUT = '#!/bin/sh\nprintf "%s" "0123456789$TEST_TOKEN"\n'
SH_MARK = '#!/bin/sh\ntouch ran-anyway\n'
PY_LEAK = """#!/usr/bin/env python3
import json, os, sys
a = json.load(sys.stdin)
v = os.environ.get("TEST_TOKEN", "none")
print("py:", v, "reversed:", v[::-1])
if a.get("fail"):
    sys.exit("failing with " + v)
"""
LINES = """#!/usr/bin/env python3
import json, os, sys
for line in sys.stdin:
    a = json.loads(line)
    v = os.environ.get("TEST_TOKEN", "none")
    if a.get("fail"):
        print(json.dumps({"error": "refused " + v}), flush=True)
    else:
        print(json.dumps({"output": "lines: %s reversed: %s\\n" % (v, v[::-1])}), flush=True)
"""
NEEDS = {"secrets": ["TEST_TOKEN"]}


def secrets_dir(home: str) -> str:
    return os.path.join(home, ".config", "ollie", "secrets")


def put(home: str, name: str, value: str, mode: int = 0o600) -> None:
    d = secrets_dir(home)
    os.makedirs(d, mode=0o700, exist_ok=True)
    p = os.path.join(d, name)
    with open(p, "w") as f:
        f.write(value + "\n")
    os.chmod(p, mode)


@pytest.fixture(scope="module")
def srv():
    home = tempfile.mkdtemp(prefix="home.", dir="/tmp")
    old = {k: os.environ.get(k) for k in ("HOME", "CREDENTIALS_DIRECTORY")}
    os.environ["HOME"] = home
    os.environ.pop("CREDENTIALS_DIRECTORY", None)
    put(home, "TEST_TOKEN", VALUE)
    d = tools_dir()
    add_tool(d, "leak", SH_LEAK, NEEDS)
    add_tool(d, "leakfail", SH_FAIL, NEEDS)
    add_tool(d, "nap", SH_NAP, NEEDS)
    add_tool(d, "cut", SH_CUT, NEEDS)
    add_tool(d, "missing", SH_MARK, {"secrets": ["NOT_THERE"]})
    add_tool(d, "unsafe", SH_MARK, {"secrets": ["LOOSE"]})
    add_tool(d, "badmeta", SH_MARK, {"secrets": ["no-dashes"]})
    add_tool(d, "leakpy", PY_LEAK, NEEDS)
    add_tool(d, "leakpyres", PY_LEAK, {**NEEDS, "resident": {"protocol": "python"}})
    add_tool(d, "plainpyres", PY_LEAK, {"resident": {"protocol": "python"}})
    add_tool(d, "leaklines", LINES, {**NEEDS, "resident": True})
    put(home, "LOOSE", "loose-value", 0o644)
    app = AppThread([d], timeout=20).start()
    app.home = home
    yield app
    stop_clean(app)
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture
def c(srv):
    with Client.connect(srv.addr) as c:
        s = "s" + os.urandom(4).hex()
        c.mkdir(f"session/{s}")
        c.mkdir(f"session/{s}/agent/a")
        c.rdwr(f"session/{s}/agent/a/ctl", b"tool_load leak leakfail nap cut missing unsafe "
               b"leakpy leakpyres plainpyres leaklines")
        c.base = f"session/{s}/agent/a"
        c.session = f"session/{s}"
        yield c


def call(c, tool: str, args: dict | None = None) -> dict:
    """Everything a caller can read of one call."""
    try:
        got, why = c.rdwr(f"{c.base}/tools/{tool}/call", json.dumps(args or {}).encode()), None
    except ClientError as e:
        got, why = b"", str(e)
    t = f"{c.base}/tools/{tool}"
    return {"reply": got, "error": why, "out": c.read(f"{t}/out"), "err": c.read(f"{t}/err"),
            "status": c.read(f"{t}/status").decode(), "log": c.read(f"{c.base}/log")}


def clean(seen: dict, value: str = VALUE) -> None:
    text = json.dumps({k: v.decode("utf-8", "replace") if isinstance(v, bytes) else v
                       for k, v in seen.items()})
    assert value not in text, seen


def test_a_cold_run_gets_its_secret_and_every_place_shows_the_mark(c):
    seen = call(c, "leak")
    clean(seen)
    assert seen["error"] is None, seen
    assert seen["reply"] == b"out: [secret TEST_TOKEN]\n" == seen["out"]
    assert seen["err"] == b"progress 1/2 at [secret TEST_TOKEN]\nerr: [secret TEST_TOKEN]\n"
    seen = call(c, "leakfail")
    clean(seen)
    assert "failed with [secret TEST_TOKEN]" in seen["error"]
    assert b"failed with [secret TEST_TOKEN]" in seen["log"]


def test_a_warm_run_and_its_failure_are_redacted(c):
    seen = call(c, "leakpy")
    clean(seen)
    assert seen["reply"].startswith(b"py: [secret TEST_TOKEN] reversed: " + VALUE[::-1].encode())
    seen = call(c, "leakpy", {"fail": True})
    clean(seen)
    assert "failing with [secret TEST_TOKEN]" in seen["error"] and b"failing with [secret" \
        in seen["log"]
    meta = json.loads(c.read("tools/leakpy/meta"))
    assert meta["start"]["warm"] is True and meta["secrets"] == ["TEST_TOKEN"]


@pytest.mark.parametrize("tool, says", [("leaklines", b"lines: "), ("leakpyres", b"py: ")])
def test_a_resident_gets_the_value_it_started_with_and_restarts_on_a_new_one(srv, c, tool,
                                                                              says):
    seen = call(c, tool)
    clean(seen)
    assert seen["reply"].startswith(says + b"[secret TEST_TOKEN] reversed: "
                                    + VALUE[::-1].encode()), seen
    assert "\nresident up" in seen["status"]
    if tool == "leaklines":
        seen = call(c, tool, {"fail": True})
        clean(seen)
        assert "refused [secret TEST_TOKEN]" in seen["error"]
    rotated = "rot-" + os.urandom(8).hex()
    put(srv.home, "TEST_TOKEN", rotated)
    try:
        seen = call(c, tool)
        clean(seen, rotated)
        assert rotated[::-1].encode() in seen["reply"], seen     # the new value, at once
        assert f"resident {tool} -> stopped: its secrets changed".encode() in seen["log"]
    finally:
        put(srv.home, "TEST_TOKEN", VALUE)


def test_a_tool_without_the_secret_never_shares_an_interpreter_that_has_it(c):
    call(c, "leakpyres")
    seen = call(c, "plainpyres")
    assert seen["reply"].startswith(b"py: none reversed: enon"), seen
    assert "\nresident up" in seen["status"]


def test_status_while_running_shows_the_mark_in_the_progress_line(c):
    path = f"{c.base}/tools/nap/call"
    fid = c.open(path, 2)
    c.write_fid(fid, b"{}")
    status = f"{c.base}/tools/nap/status"
    try:
        assert wait_for(lambda: b"progress" in c.read(status)), c.read(status)
        line = c.read(status).decode()
        assert VALUE not in line and "progress 1/2 holding [secret TEST_TOKEN]" in line
    finally:
        cwd = c.read(f"{c.session}/cwd").decode().strip()
        open(os.path.join(cwd, "go"), "w").close()
    assert c.read_fid(fid) == b"done\n"
    c.clunk(fid)


def test_a_value_cut_by_the_output_cap_is_redacted_to_its_end(srv):
    d = tools_dir()
    add_tool(d, "cut", SH_CUT, NEEDS)
    add_tool(d, "leak", SH_LEAK, NEEDS)
    app = AppThread([d], timeout=20, max_output=10 + len(VALUE) // 2).start()
    try:
        with Client.connect(app.addr) as c:
            c.mkdir("session/cut")
            c.mkdir("session/cut/agent/a")
            c.rdwr("session/cut/agent/a/ctl", b"tool_load cut leak")
            c.base = "session/cut/agent/a"
            seen = call(c, "cut")
            clean(seen)
            assert "output too long" in seen["error"]
            assert seen["out"] == b"0123456789[secret TEST_TOKEN]", seen["out"]
            seen = call(c, "leak")       # stdout cut first; stderr at the cap too
            clean(seen)
            clean(seen, VALUE[:len(VALUE) // 2 - 6])
    finally:
        stop_clean(app)


def test_a_missing_secret_refuses_the_call_unrun_naming_both_places(srv, c, monkeypatch):
    creds = tempfile.mkdtemp(prefix="creds.", dir="/tmp")
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", creds)
    seen = call(c, "missing")
    assert seen["error"].startswith("secret NOT_THERE: ") and seen["error"].endswith(
        "(no such file or directory)"), seen["error"]
    log = seen["log"].decode()
    assert f"$CREDENTIALS_DIRECTORY/NOT_THERE ({creds}/NOT_THERE)" in log
    assert f"{secrets_dir(srv.home)}/NOT_THERE" in log and "refused" in seen["status"]
    cwd = c.read(f"{c.session}/cwd").decode().strip()
    assert not os.path.exists(os.path.join(cwd, "ran-anyway"))
    seen = call(c, "unsafe")
    assert "(permission denied)" in seen["error"]
    assert f"run chmod 600 {secrets_dir(srv.home)}/LOOSE" in seen["log"].decode()
    assert not os.path.exists(os.path.join(cwd, "ran-anyway"))
    os.rmdir(creds)


def test_a_bad_secrets_field_is_a_registry_error(c):
    errors = c.read("tools/errors").decode()
    assert "badmeta" in errors and "'no-dashes' is not an environment variable name" in errors


def walk(c: Client, path: str = "") -> dict[str, bytes]:
    """Every file of the tree a client can read, read."""
    out = {}
    for d in c.ls(path or "."):
        p = f"{path}/{d.name}" if path else d.name
        if d.mode & 0x80000000:
            out.update(walk(c, p))
        elif d.name not in ("revwait",):
            try:
                out[p] = c.read(p)
            except ClientError as e:
                out[p] = str(e).encode()
    return out


def test_no_value_in_the_tree_the_state_or_the_log(srv, c, caplog):
    caplog.set_level(logging.DEBUG)
    for tool in ("leak", "leakfail", "leakpy", "leaklines", "leakpyres", "cut"):
        clean(call(c, tool))
    files = walk(c)
    assert any(p.endswith("/tools/leak/out") for p in files), sorted(files)[:20]
    found = [p for p, data in files.items() if VALUE.encode() in data]
    assert found == [], found
    state = srv.opts.state_dir
    hits = []
    for d, _, names in os.walk(state):
        for n in names:
            p = os.path.join(d, n)
            if stat.S_ISREG(os.lstat(p).st_mode):
                with open(p, "rb") as f:
                    if VALUE.encode() in f.read():
                        hits.append(p)
    assert hits == [] and os.path.exists(os.path.join(state, "audit.jsonl"))
    assert VALUE not in caplog.text
