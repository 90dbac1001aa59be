"""What a remote sends is data (issue 30): remote.make checks names, sizes and types, and
the RemoteTool it makes holds nothing this host would act on by itself; a registry serves
an import's tools beside its own, a local tool winning, and holds them while unreachable."""
from __future__ import annotations

import json

import pytest

from toolsrv.hosts.imports import Spec, remote_session
from toolsrv.hosts.remote import MAX_TEXT, BadRemoteTool, make
from toolsrv.registry.registry import Registry

from apphelpers import add_tool, tools_dir


class Imp:
    source = "import far"


def tool(name="t", meta=None, schema=b'{"type": "object"}', prompt=b"use it\n", prefix="far"):
    m = {"description": "d", "cmd": "/bin/touch /tmp/never", "resident": {"protocol": "mcp"},
         "extra": {"sandbox": "none", "warm": True}, "keywords": ["k"]}
    m.update(meta or {})
    return make(prefix, name, Imp(), "tls!far!1", json.dumps(m).encode(), schema, prompt)


def test_a_remote_tool_holds_nothing_to_run_here():
    t = tool()
    assert t.name == "far.t" and t.remote_name == "t" and t.remote.source == "import far"
    assert t.command.argv == () and t.resident is None and t.extra == {} and t.dir == ""
    assert t.meta_json()["cmd"] == "/bin/touch /tmp/never"     # shown as served, only
    assert t.meta_text.startswith("{") and t.prompt_text == "use it\n"
    assert t.index_line == "far.t\thot\td\n"


@pytest.mark.parametrize("kw,words", [
    (dict(name="../etc"), "bad tool name"),
    (dict(name="a b"), "bad tool name"),
    (dict(name="x" * 127), "longer than 128"),
    (dict(schema=b"[1]"), "must be JSON objects"),
    (dict(schema=b"{not json"), "unreadable"),
    (dict(meta={"keywords": "one"}), "keywords"),
    (dict(meta={"description": 7}), "description"),
    (dict(prompt=b"x" * (MAX_TEXT + 1)), "longer than"),
    (dict(prompt=b"\xff\xfe"), "unreadable"),
])
def test_bad_remote_tools_are_refused_with_a_reason(kw, words):
    with pytest.raises(BadRemoteTool, match=words):
        tool(**kw)


def test_import_specs_and_remote_names():
    s = Spec.parse("gpu=tls!gpu.example!5640,ca=/c.pem,cert=/f.pem,key=/f.key,secret=/s")
    assert (s.name, s.addr, s.ca, s.cert, s.key, s.secret) == (
        "gpu", "tls!gpu.example!5640", "/c.pem", "/f.pem", "/f.key", "/s")
    for bad, words in (("gpu", "want NAME=ADDR"), ("a.b=unix!/x", "bad import name"),
                       ("g=tls!h", "bad address"), ("g=unix!/x,ca", "bad option"),
                       ("g=unix!/x,cert=/c", "go together")):
        with pytest.raises(ValueError, match=words):
            Spec.parse(bad)
    assert remote_session("front-1", "s1") == "front-1-s1"
    long = remote_session("front-1", "s" * 128)
    assert len(long) <= 128 and long.startswith("front-1-") and long != remote_session(
        "front-1", "s" * 127 + "t")


def test_the_registry_serves_imports_beside_its_own_tools():
    d = tools_dir()
    add_tool(d, "far.t", "#!/bin/sh\ncat\n")         # a local tool of the same name
    reg = Registry([d])
    reg.load()
    local = reg.get("far.t")
    rev = reg.revision
    other = tool("u")
    assert reg.serve_remote("import far", {"far.t": tool(), "far.u": other}, [])
    assert reg.revision != rev and reg.get("far.t") is local and reg.get("far.u") is other
    assert "far.u\t" in reg.index_text()
    rev = reg.revision
    assert not reg.serve_remote("import far", {"far.t": tool(), "far.u": tool("u")}, [])
    assert reg.revision == rev and reg.get("far.u") is other    # unchanged: the same Tool
    assert reg.serve_remote("import far", {}, [("far", "unreachable at x: gone")],
                            held={"far.u": other})
    assert "far.u" not in reg.index_text() and reg.get("far.u") is other
    assert "far\tunreachable at x: gone\n" in reg.errors_text()
    assert reg.serve_remote("import far", {}, [])
    assert reg.get("far.u") is None and "unreachable" not in reg.errors_text()
