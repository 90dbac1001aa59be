"""A running call's status over 9P (issue 29, items 5 and 12), with the independent
python-9p client:

- while a call runs, its `status` line carries `out N` (the bytes of stdout so far) and
  the tool's latest `progress DONE/TOTAL MESSAGE` line of stderr; the line stays in `err`;
- a progress line is never the reason of an `exit N`;
- a `.meta` `timeoutArg` is bounded by the call's time limit in tools/<tool>/schema, meta
  and the agent's schemas, and a call over it is refused naming the limit;
- the limit of a tool whose profile sets general.timeout is the profile's; another host's
  tool is left to that host.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile

import pytest
from py9p import ORDWR, RemoteError

from apphelpers import AppThread, add_tool, tools_dir
from py9phelpers import _fids, agent, connect, rdwr, read
from serverhelpers import stop_clean, wait_for

WAITS = {"type": "object", "properties": {
    "t": {"type": "number", "exclusiveMinimum": 0, "maximum": 600, "description": "Seconds."},
    "n": {"type": "integer"}}, "additionalProperties": False}


@pytest.fixture(scope="module")
def srv():
    d = tools_dir()
    # stdout first, then the report; then it waits until it is cancelled
    add_tool(d, "halfway", "#!/bin/sh\nprintf 'some-out\\n'\necho 'progress 0.5/4 warming' >&2\n"
             "echo 'progress 2/4 halfway there' >&2\nexec sleep 120\n")
    add_tool(d, "failing", "#!/bin/sh\necho 'the real reason' >&2\n"
             "echo 'progress 1/1 done' >&2\nexit 1\n")
    add_tool(d, "waits", "#!/bin/sh\ncat\n", {"args": WAITS, "timeoutArg": "t"})
    app = AppThread([d], timeout=12).start()
    yield app
    stop_clean(app)
    shutil.rmtree(d, ignore_errors=True)


def test_a_running_calls_status_has_its_out_bytes_and_the_tools_progress(srv):
    c = connect(srv)
    base = agent(c, "live", "a", "halfway")
    f = next(_fids)
    c.walk(0, f, f"{base}/tools/halfway/call")
    c.open(f, ORDWR)
    c.write(f, b"{}")                                   # the call starts; nobody reads it
    status = f"{base}/tools/halfway/status"
    seen: list[str] = []

    def reported() -> bool:
        seen.append(read(c, status).decode())
        return "progress 2/4 halfway there" in seen[-1]
    try:
        assert wait_for(reported, 60), seen[-3:]
        line = seen[-1]
        assert line.startswith("running ") and line.endswith(" out 9 progress 2/4 halfway "
                                                             "there\n"), line
    finally:
        rdwr(c, f"{base}/ctl", b"cancel halfway")
        c.clunk(f)
    assert wait_for(lambda: read(c, status).startswith(b"killed"), 30)
    after = read(c, status).decode()
    assert "progress" not in after and " out " not in after      # an ended call's line
    err = read(c, f"{base}/tools/halfway/err")
    assert b"progress 0.5/4 warming\nprogress 2/4 halfway there\n" == err   # as written


def test_a_progress_line_is_not_the_reason_of_an_exit(srv):
    c = connect(srv)
    base = agent(c, "live2", "a", "failing")
    with pytest.raises(RemoteError) as e:
        rdwr(c, f"{base}/tools/failing/call", b"{}")
    assert "exit 1 (input/output error): the real reason" in str(e.value)


def test_the_timeout_arg_is_bounded_by_the_calls_limit(srv):
    c = connect(srv)
    schema = json.loads(read(c, "tools/waits/schema"))
    t = schema["properties"]["t"]
    assert t["exclusiveMaximum"] == 12 and "maximum" not in t, t
    assert t["description"] == "Seconds. Less than 12: the call's time limit in seconds."
    assert schema["properties"]["n"] == {"type": "integer"}         # the rest as written
    meta = json.loads(read(c, "tools/waits/meta"))
    assert meta["args"] == schema and meta["extra"]["timeoutArg"] == "t"
    base = agent(c, "bound", "a", "waits")
    listed = json.loads(read(c, f"{base}/schemas"))
    assert listed[0]["parameters"]["properties"]["t"]["exclusiveMaximum"] == 12
    assert rdwr(c, f"{base}/tools/waits/call", b'{"t": 11.5}') == b'{"t": 11.5}'
    with pytest.raises(RemoteError) as e:
        rdwr(c, f"{base}/tools/waits/call", b'{"t": 12}')
    assert str(e.value) == ("invalid args: t: 12 is not below 12, the call's time limit in "
                            "seconds: give a smaller t (invalid argument)")
    log = read(c, f"{base}/log").decode()
    assert ("t: 12 is not below 12, the call's time limit in seconds: give a smaller t (the "
            "limit: toolsrv serve --timeout, or general.timeout in sandbox profile default)"
            ) in log, log
    with pytest.raises(RemoteError) as e:                        # the .meta's own bound
        rdwr(c, f"{base}/tools/waits/call", b'{"t": 700}')
    assert "700" in str(e.value)


def test_a_profiles_timeout_is_the_bound(monkeypatch):
    from toolsrv.tree.calls import timebound

    class Tool:
        schema = WAITS
        extra = {"timeoutArg": "t", "sandbox": "short"}
    home = tempfile.mkdtemp(prefix="tb-home.")
    try:
        prof = os.path.join(home, ".config", "ollie", "sandbox")
        os.makedirs(prof)
        with open(os.path.join(prof, "short.yaml"), "w") as f:
            f.write("general:\n  timeout: 5\n")
        monkeypatch.setenv("HOME", home)
        lim = timebound.limit(Tool(), "default", 30.0)
        assert lim == (5.0, "general.timeout in sandbox profile short")
        assert timebound.schema(Tool(), lim)["properties"]["t"]["exclusiveMaximum"] == 5
        Tool.extra = {"timeoutArg": "t"}                     # the session's profile: default
        assert timebound.limit(Tool(), "default", 30.0)[0] == 30.0
        Tool.extra = {"timeoutArg": "nope"}                  # names no argument: no bound
        assert timebound.limit(Tool(), "default", 30.0) is None
        Tool.extra = {"timeoutArg": "t"}
        Tool.remote = object()                               # another host's: bounded there
        assert timebound.limit(Tool(), "default", 30.0) is None
    finally:
        shutil.rmtree(home, ignore_errors=True)


def test_the_bundled_shell_names_its_timeout_arg():
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with open(os.path.join(here, "data", "tools", "shell.meta")) as f:
        meta = json.load(f)
    assert meta["timeoutArg"] == "timeout" and "timeout" in meta["args"]["properties"]
