"""The agent's tools.py and the bundled `script` tool (issue 45.2, 45.3): real processes,
real Landlock.

- tools.py is served, compiles, and has one keyword-only function per loaded tool (required
  args first), a mapped name for a tool whose name is no identifier, and its qid version
  moves when a tool is loaded;
- a script that imports tools, calls three tools and prints a summary returns that summary;
- an uncaught exception fails the call with the traceback in err; a tool's failure is a
  tools.ToolError with the whole reason: a nested file_read of /etc/shadow is refused;
- cancelling a script kills its nested calls."""
from __future__ import annotations

import inspect
import json
import os
import shutil
import threading

import pytest

from apphelpers import AppThread, add_tool, agent, tools_dir
from serverhelpers import wait_for
from toolsrv.cli.client import Client, ClientError

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUNDLED = os.path.join(REPO, "data", "tools")

HANG = """#!/bin/sh
cat >/dev/null
: > hang-started
sleep 600
"""
ECHO = """#!/bin/sh
cat
"""


@pytest.fixture(scope="module")
def app():
    d = tools_dir()
    add_tool(d, "hang", HANG)
    add_tool(d, "echo-args", ECHO, {"args": {"type": "object", "required": ["x"],
                                             "properties": {"x": {"type": "integer"}}},
                                    "outputSchema": {"type": "object"}})
    a = AppThread([BUNDLED, d], timeout=20).start()
    yield a
    a.cleanup()
    shutil.rmtree(d, ignore_errors=True)


def script(c: Client, a: str, code: str) -> str:
    return c.rdwr(f"{a}/tools/script/call", json.dumps({"code": code}).encode()).decode()


def test_tools_py_is_served_and_compiles(app):
    with Client.connect(app.addr) as c:
        a = agent(c, "t1", "file_read file_write echo-args hang")
        before = c.stat(f"{a}/tools.py").qid.vers
        src = c.read(f"{a}/tools.py").decode()
        mod: dict = {}
        exec(compile(src, "tools.py", "exec"), mod)
        sig = inspect.signature(mod["file_read"])
        assert list(sig.parameters) == ["path", "offset", "limit"]
        assert all(p.kind is p.KEYWORD_ONLY for p in sig.parameters.values())
        assert sig.parameters["path"].default is inspect.Parameter.empty
        assert sig.parameters["limit"].default == 2000
        assert "Read a text file" in mod["file_read"].__doc__
        assert "echo-args -> echo_args" in mod["__doc__"]
        assert issubclass(mod["ToolError"], Exception)
        assert str(inspect.signature(mod["hang"])) == "(**more: 'Any') -> 'str'"
        c.rdwr(f"{a}/ctl", b"tool_load file_grep")
        assert c.stat(f"{a}/tools.py").qid.vers != before
        assert "def file_grep(" in c.read(f"{a}/tools.py").decode()


def test_a_script_calls_three_tools(app):
    with Client.connect(app.addr) as c:
        a = agent(c, "t2", "script file_write file_read file_grep echo-args")
        out = script(c, a, """
import tools
tools.file_write(path="a.txt", content="one\\nTODO two\\nthree\\n")
lines = tools.file_read(path="a.txt").splitlines()
hits = tools.file_grep(pattern="TODO", path="a.txt").splitlines()
echoed = tools.echo_args(x=7)
print(f"{len(lines)} lines, {len(hits)} TODO, x={echoed['x']}")
""")
        assert out == "3 lines, 1 TODO, x=7\n"
        log = c.read(f"{a}/log").decode()
        assert "call file_write (child of script) -> ok" in log
        assert "call file_grep (child of script) -> ok" in log


def test_an_exception_is_the_error_with_its_traceback_in_err(app):
    with Client.connect(app.addr) as c:
        a = agent(c, "t3", "script file_read")
        with pytest.raises(ClientError) as e:
            script(c, a, """
import tools
try:
    tools.file_read(path="/etc/shadow")
except tools.ToolError as e:
    print("refused:", e.reason)
tools.file_read(path="/etc/shadow")
""")
        # the Rerror keeps its head and the fix (errors.shorten); the whole reason, the
        # exception's name with it, is in the agent's log and the traceback in err
        assert "traceback in err" in str(e.value) and "/etc/shadow" in str(e.value)
        assert "ToolError" in c.read(f"{a}/log").decode()
        err = c.read(f"{a}/tools/script/err").decode()
        assert "Traceback (most recent call last)" in err and '<script>", line 7' in err
        assert "permission denied: /etc/shadow" in err
        assert "refused: " in c.read(f"{a}/tools/script/out").decode()
        assert c.read(f"{a}/tools/file_read/out") == b""


def test_cancelling_a_script_kills_its_nested_calls(app):
    with Client.connect(app.addr) as c:
        a = agent(c, "t4", "script hang")
        cwd = c.read("session/t4/cwd").decode().strip()
        got: list = []

        def run() -> None:
            with Client.connect(app.addr) as c2:
                try:
                    got.append(script(c2, a, "import tools\ntools.hang()\n"))
                except ClientError as e:
                    got.append(e)
        t = threading.Thread(target=run, daemon=True)
        t.start()
        assert wait_for(lambda: os.path.exists(os.path.join(cwd, "hang-started")))
        c.rdwr(f"{a}/ctl", b"cancel script")
        t.join(20)
        assert isinstance(got[0], ClientError) and "cancelled" in str(got[0])
        assert wait_for(lambda: c.read(f"{a}/tools/hang/status").startswith(b"killed"))


def test_names_that_are_no_identifiers_are_mapped():
    """toolspy.module alone: odd tool and argument names still make a module that compiles,
    and an argument never hides call_tool."""
    from toolsrv.tree.calls.toolspy import module
    entries = [{"name": "my-tool.v2", "description": 'say """hi""" \\ there', "prompt": "",
                "parameters": {"type": "object", "required": ["class", "call_tool"],
                               "additionalProperties": False,
                               "properties": {"class": {"type": "string"},
                                              "call_tool": {"type": "integer"},
                                              "max-n": {"type": "number", "default": 1.5}}}},
               {"name": "call_tool", "parameters": {"type": "object"}}]
    src = module("session/s/agent/a", entries, set())
    mod: dict = {}
    exec(compile(src, "tools.py", "exec"), mod)
    assert "my-tool.v2 -> my_tool_v2" in mod["__doc__"]
    assert "call_tool -> call_tool_" in mod["__doc__"]
    sig = inspect.signature(mod["my_tool_v2"])
    assert list(sig.parameters) == ["class_", "call_tool_", "max_n"]
    assert sig.parameters["max_n"].default == 1.5
    assert '"""hi"""' in mod["my_tool_v2"].__doc__
    sent = []
    mod["call_tool"] = lambda name, args, structured: sent.append((name, args)) or "ok"
    assert mod["my_tool_v2"](class_="c", call_tool_=3) == "ok"
    assert sent == [("my-tool.v2", {"class": "c", "call_tool": 3, "max-n": 1.5})]
