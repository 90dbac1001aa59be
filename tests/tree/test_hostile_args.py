"""Args and schemas that are someone else's (round 3's hostile pass, 2026-12-04): a call's
args never stall the server, crash it, or pass as what they are not.

Through a whole server on loopback: a uniqueItems of 20,000 objects and a pattern that
backtracks without end are bounded (the first validates, the second is refused by name)
while another client is served; args nested too deep, NaN, Infinity and 1e999 are
refused as not JSON; a schema whose `$ref`s loop is refused at load, in tools/errors; and
the words an `invalid args` quotes (the args, the schema, a path) never decide the errno
9pfuse gives (errors.errno_for), while the agent's log keeps them as written."""
from __future__ import annotations

import errno
import json
import os
import threading

import pytest

from apphelpers import AppThread, add_tool, tools_dir
from toolsrv.cli.client import Client, ClientError
from toolsrv.errors import errno_for
from toolsrv.registry.schemaref import PATTERN_BUDGET, bounded, validator

ECHO = "#!/bin/sh\nexec cat\n"
SCHEMAS = {
    "uniq": {"type": "object", "properties": {"items": {"type": "array", "uniqueItems": True}}},
    "redos": {"type": "object", "properties": {"s": {"type": "string",
                                                      "pattern": "^(a|aa)+$"}}},
    "redoskeys": {"type": "object", "patternProperties": {"^(a|aa)+$": {}},
                  "additionalProperties": False},
    "mode": {"type": "object", "properties": {"mode": {"enum": ["fast", "slow"]},
                                              "n": {"type": "number", "maximum": 10}}},
    "loop": {"type": "object", "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}},
             "properties": {"w": {"$ref": "#/$defs/a"}}},
    "tree": {"type": "object", "$defs": {"node": {"type": "object", "properties": {
        "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}}}},
             "properties": {"root": {"$ref": "#/$defs/node"}}},
}


@pytest.fixture(scope="module")
def srv():
    d = tools_dir()
    for name, schema in SCHEMAS.items():
        add_tool(d, name, ECHO, {"description": f"echo ({name})", "args": schema})
    app = AppThread([d]).start()
    c = Client.connect(app.addr)
    c.mkdir("session/h")
    c.mkdir("session/h/agent/a")
    c.rdwr("session/h/agent/a/ctl", b"tool_load uniq redos redoskeys mode tree")
    yield app, c
    c.close()
    app.cleanup()


def call(c: Client, tool: str, body: str | bytes) -> str:
    data = body.encode() if isinstance(body, str) else body
    return c.rdwr(f"session/h/agent/a/tools/{tool}/call", data).decode()


class Refusal(str):
    """An Rerror as a person reads it; `.ename` as sent (what 9pfuse maps)."""
    ename: str


def refused(c: Client, tool: str, body: str) -> Refusal:
    with pytest.raises(ClientError) as e:
        call(c, tool, body)
    out = Refusal(str(e.value))
    out.ename = e.value.ename
    return out


def test_unique_items_of_many_objects_is_linear_and_others_are_served(srv):
    app, c = srv
    args = json.dumps({"items": [{"a": i} for i in range(20_000)]})
    served: list[bytes] = []

    def other() -> None:      # another client, while the big call is validated and run
        with Client.connect(app.addr) as c2:
            served.append(c2.read("revision"))
    t = threading.Thread(target=other)
    t.start()
    assert json.loads(call(c, "uniq", args)) == json.loads(args)   # jsonschema's pairs:
    t.join(60)                                                      # hours; here linear
    assert served and served[0].strip().isdigit()
    assert "[0] and [3] are equal" in refused(c, "uniq", '{"items": [1, 2.5, true, 1.0]}')
    assert call(c, "uniq", '{"items": [1, true, "1", [1], {"a": 1}, {"a": true}]}')


def test_a_pattern_that_backtracks_without_end_is_refused_by_name(srv):
    _, c = srv
    for tool, body in (("redos", json.dumps({"s": "a" * 60 + "!"})),
                       ("redoskeys", json.dumps({"a" * 60 + "!": 1}))):
        err = refused(c, tool, body)
        assert "invalid args: pattern" in err and "ran over 0.25 s" in err, err
        assert "nothing was called" in err
    assert call(c, "redos", '{"s": "aaaa"}') == '{"s": "aaaa"}'   # a fair input still matches
    assert "s: 'ab' does not match the pattern ^(a|aa)+$ (invalid" in \
        refused(c, "redos", '{"s": "ab"}')          # the pattern as the schema spells it


def test_the_pattern_budget_is_one_for_the_whole_validation():
    """Many strings against a slow pattern share one budget: the validation ends within
    about PATTERN_BUDGET of matching, not that much per string."""
    v = validator({"type": "array", "items": {"pattern": "^(a|aa)+$"}})
    from toolsrv.registry.schemaref import PatternTooSlow
    import time
    t0 = time.process_time()
    with pytest.raises(PatternTooSlow), bounded():
        v.is_valid(["a" * 60 + "!"] * 50)
    assert time.process_time() - t0 < 50 * PATTERN_BUDGET      # not a budget per string


@pytest.mark.parametrize("body, words", [
    ('{"n": NaN}', "NaN is not a JSON number"),
    ('{"n": Infinity}', "Infinity is not a JSON number"),
    ('{"n": -Infinity}', "-Infinity is not a JSON number"),
    ('{"n": 1e999}', "1e999 is past the range of a number"),
    ('{"n": ' + "9" * 5000 + "}", "not usable as JSON"),
    ('{"x": ' + "[" * 3000 + "]" * 3000 + "}", "nested too deeply to parse"),
])
def test_what_is_not_json_is_refused_as_such(srv, body, words):
    _, c = srv
    err = refused(c, "mode", body)
    assert words in err and errno_for(err.ename) == errno.EINVAL, err


def test_a_recursive_schema_is_fine_and_deep_args_are_a_clear_error(srv):
    _, c = srv
    node: dict = {}
    for _ in range(5):
        node = {"kids": [node]}
    assert json.loads(call(c, "tree", json.dumps({"root": node}))) == {"root": node}
    for _ in range(400):      # parsed fine, deeper than validation can follow
        node = {"kids": [node]}
    err = refused(c, "tree", json.dumps({"root": node}))
    assert "recurses without end" in err and errno_for(err.ename) == errno.EINVAL, err
    assert c.read("revision").strip().isdigit()          # the server goes on


def test_a_schema_whose_refs_loop_is_refused_at_load(srv):
    _, c = srv
    errors = c.read("tools/errors").decode()
    assert "loop.meta" in errors and "$refs loop without end: #/$defs/a -> #/$defs/b -> " \
        "#/$defs/a" in errors, errors
    with pytest.raises(ClientError, match="no such tool"):
        c.rdwr("session/h/agent/a/ctl", b"tool_load loop")


def test_quoted_words_never_decide_the_errno(srv):
    app, c = srv
    for body in ('{"mode": "Permission"}', '{"mode": "exists"}', '{"mode": "not found"}',
                 '{"mode": "no such thing"}', '{"mode": "a directory"}',
                 '{"mode": "this is a directory"}', '{"mode": "a bad file"}'):
        err = refused(c, "mode", body)
        assert errno_for(err.ename) == errno.EINVAL, (err, err.ename)
        assert json.loads(body)["mode"] in err            # as a person reads it
    log = c.read("session/h/agent/a/log").decode()
    assert "'Permission' is not one of" in log and "\u2060" not in log
    for path in ("/nonexistent/permission-x", "/nonexistent/exists"):
        with pytest.raises(ClientError) as e:
            c.rdwr("session/h/cwd", path.encode())
        assert errno_for(e.value.ename) == errno.ENOENT, e.value.ename
        assert path in str(e.value)


def test_slow_patterns_at_once_leave_the_server_serving(srv):
    """Twenty calls at once whose pattern backtracks without end: each spends its budget in
    a thread (regex lets go of the GIL while it matches), not on the loop, so a read by
    another client is answered before the last of them is refused."""
    app, c = srv
    for i in range(20):
        c.mkdir(f"session/h/agent/r{i}")
        c.rdwr(f"session/h/agent/r{i}/ctl", b"tool_load redos")
    done: list[tuple[str, str]] = []
    lock = threading.Lock()

    def slow(i: int) -> None:
        with Client.connect(app.addr) as ci:
            try:
                ci.rdwr(f"session/h/agent/r{i}/tools/redos/call",
                        json.dumps({"s": "a" * 60 + "!"}).encode())
                got = "called"
            except ClientError as e:
                got = str(e)
        with lock:
            done.append(("slow", got))
    threads = [threading.Thread(target=slow, args=(i,)) for i in range(20)]
    for t in threads:
        t.start()
    with Client.connect(app.addr) as c2:
        while len(done) < 2:          # the slow ones are under way (two already refused)
            c2.read("revision")
        c2.read("revision")
        with lock:
            done.append(("other", "served"))
    for t in threads:
        t.join(120)
    kinds = [k for k, _ in done]
    assert kinds.count("slow") == 20 and kinds.index("other") < len(kinds) - 1, kinds
    assert all("ran over 0.25 s" in got for k, got in done if k == "slow"), done
