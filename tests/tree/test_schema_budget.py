"""A schema never stalls the loop (issue 43, finding 4; shared/repro/round4/
schema_fanout_stall.sh): what it costs is bounded where it enters, and what it costs on
given args is bounded when a call is checked.

Through a whole server on loopback, under the loop-lag probe: a 1.3 KB schema whose refs
fan out (`d_i = allOf[ref d_{i+1}, ref d_{i+1}]`, 2**17 subschemas) is not written by
`import-mcp` and, written by hand, is listed in tools/errors naming its count; a recursive
schema (fine at load) whose cost doubles with each level of the args is refused on such
args by the step budget, naming it, while every other client is served; and a check that
takes more steps than the loop allows itself (LOOP_STEPS) is made in a thread and passes."""
from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from apphelpers import AppThread, add_tool, tools_dir
from toolsrv.cli.client import Client, ClientError
from toolsrv.errors import errno_for
from toolsrv.registry.schemacost import PATHS_MAX
from toolsrv.registry.schemaref import STEP_BUDGET
from toolsrv.tree.calls.apply import LOOP_STEPS

HOSTILE = str(Path(__file__).resolve().parents[1] / "tools" / "hostile_mcp.py")
ECHO = "#!/bin/sh\nexec cat\n"
DEPTH = 16          # 2**18 - 1 paths: past the bound; seconds of the old loop per call


def fan(depth: int) -> dict:
    d = {f"d{i}": {"allOf": [{"$ref": f"#/$defs/d{i + 1}"}, {"$ref": f"#/$defs/d{i + 1}"}]}
         for i in range(depth)}
    d[f"d{depth}"] = {"type": "integer"}
    return {"type": "object", "$defs": d, "properties": {"x": {"$ref": "#/$defs/d0"}}}


# n: an array whose one kind of item is n, twice over: 5 * 2**depth keywords on args
# nested `depth` deep, while the schema is a few nodes (recursion through the args)
NEST = {"type": "object", "$defs": {"n": {"type": "array", "items": {
    "allOf": [{"$ref": "#/$defs/n"}, {"$ref": "#/$defs/n"}]}}},
    "properties": {"a": {"$ref": "#/$defs/n"}}}


def nested(depth: int) -> str:
    return json.dumps({"a": json.loads("[" * depth + "]" * depth)})


def call(c: Client, tool: str, body: str) -> str:
    return c.rdwr(f"session/s/agent/a/tools/{tool}/call", body.encode()).decode()


@pytest.fixture
def served(tmp_path):
    """import-mcp of the fan server into a tools directory, the fan schema by hand
    (fanhand), the nest and echo tools; a server on it, an agent with them loaded."""
    d = tools_dir()
    p = subprocess.run([sys.executable, "-m", "toolsrv", "import-mcp", "--dir", d,
                        "--no-profile", "--", sys.executable, HOSTILE], capture_output=True,
                       text=True, timeout=60,
                       env=dict(os.environ, HOME=str(tmp_path), MODE="fan", DEPTH=str(DEPTH)))
    add_tool(d, "fanhand", ECHO, {"args": fan(DEPTH)})
    add_tool(d, "nest", ECHO, {"args": NEST})
    add_tool(d, "ints", ECHO, {"args": {"type": "object", "properties": {
        "a": {"type": "array", "items": {"type": "integer", "minimum": 0}}}}})
    app = AppThread([d]).start()
    c = Client.connect(app.addr)
    c.mkdir("session/s")
    c.mkdir("session/s/agent/a")
    c.rdwr("session/s/agent/a/ctl", b"tool_load nest ints")
    yield app, c, p
    c.close()
    app.cleanup()


def test_a_fanning_schema_is_refused_where_it_enters_and_never_stalls(served, loop_probe):
    app, c, imported = served
    refusals = []
    with loop_probe(app.addr):
        for tool in ("fan", "fanhand"):      # whatever the registry made of them
            try:
                c.rdwr("session/s/agent/a/ctl", f"tool_load {tool}".encode())
                call(c, tool, '{"x": 1}')
            except ClientError as e:
                refusals.append(str(e))
        errors = c.read("tools/errors").decode()
    assert [r.split(":")[:2] for r in refusals] == [["tool_load", " no such tool"]] * 2, \
        refusals
    count = f"{2 ** (DEPTH + 2) - 1:,}"
    assert imported.returncode == 0, imported.stderr
    assert (f"note: tool 'fan': not written: args: its $refs expand to {count} subschemas, "
            f"past the bound of {PATHS_MAX:,}") in imported.stdout, imported.stdout
    assert "wrote" in imported.stdout and "fine.meta" in imported.stdout
    line = next(ln for ln in errors.splitlines() if "/fanhand.meta\t" in ln)
    assert f"args: its $refs expand to {count} subschemas, past the bound of " \
        f"{PATHS_MAX:,}" in line, errors
    assert not any(ln.startswith("fan\t") for ln in c.read("tools/index").decode().splitlines())


def test_args_past_the_step_budget_are_refused_and_others_are_served(served, loop_probe):
    app, c, _ = served
    assert json.loads(call(c, "nest", nested(4))) == json.loads(nested(4))   # fair args
    with loop_probe(app.addr):
        try:
            got: object = call(c, "nest", nested(17))    # 5 * 2**17 keywords: ~650,000
        except ClientError as e:
            got = e
    assert isinstance(got, ClientError), "args past the step budget were taken"
    err = str(got)
    assert err == f"invalid args: over {STEP_BUDGET:,} steps to check them against the " \
        "schema (its budget); nothing was called (invalid argument)", err
    assert errno_for(got.ename) == errno.EINVAL
    log = c.read("session/s/agent/a/log").decode()
    assert "call nest" in log and f"over {STEP_BUDGET:,} steps to check them" in log


def test_a_check_past_what_the_loop_allows_itself_is_made_in_a_thread(served):
    _, c, _ = served
    args = json.dumps({"a": list(range(LOOP_STEPS * 2))})     # a step per item, and more
    assert json.loads(call(c, "ints", args)) == json.loads(args)
    with pytest.raises(ClientError, match=r"a\[4001\]: -1 is less than the minimum of 0"):
        call(c, "ints", json.dumps({"a": list(range(LOOP_STEPS * 2 + 1)) + [-1]}))


def test_a_subschema_naming_its_own_draft_is_counted_too():
    """jsonschema applies a subschema with its own `$schema` with that draft's validator:
    the step budget follows it there (schemaref._bounded_for)."""
    from toolsrv.registry.schemaref import StepsSpent, bounded, validator
    for draft in ("https://json-schema.org/draft/2020-12/schema",
                  "http://json-schema.org/draft-07/schema#"):
        schema = json.loads(json.dumps(NEST))
        schema["$defs"]["n"]["$schema"] = draft
        with pytest.raises(StepsSpent), bounded(LOOP_STEPS):
            validator(schema).is_valid(json.loads(nested(12)))
