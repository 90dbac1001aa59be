"""The `python` resident protocol's fields in a .meta (issue 33): normalised, each mistake
named; the bundled Python tools say it, file_grep in each variant with its engine."""
from __future__ import annotations

import json
import os

import pytest

from toolsrv.registry.metafile import MetaError, parse_meta

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOLS = os.path.join(REPO, "data", "tools")


def meta(**fields):
    return json.dumps(fields).encode()


def test_python_fields_are_normalised():
    assert parse_meta(meta(resident={"protocol": "python"})).fields["resident"] == {
        "protocol": "python", "idle": 300.0, "tool": None}
    r = parse_meta(meta(resident={"protocol": "python", "script": "engine.py",
                                  "args": ["--fast"], "idle": 60}))
    assert r.fields["resident"] == {"protocol": "python", "idle": 60.0, "tool": None,
                                    "script": "engine.py", "args": ["--fast"]}


@pytest.mark.parametrize("bad, words", [
    ({"script": "../x.py"}, "resident.script: must be the name of a file beside the .meta, "
     'not "../x.py"'),
    ({"script": "/usr/bin/x"}, "resident.script: must be the name of a file beside"),
    ({"script": ".."}, "resident.script:"),
    ({"script": 3}, "resident.script:"),
    ({"script": "x.py", "args": "--rg"}, 'resident.args: must be a list of strings, not "--rg"'),
    ({"script": "x.py", "args": [1]}, "resident.args: must be a list of strings"),
    ({"args": ["--rg"]}, "resident.args: needs a script"),
    ({"language": "go"}, "resident.language: unknown field (protocol, idle, tool, script, args)"),
])
def test_python_mistakes_are_named(bad, words):
    with pytest.raises(MetaError) as e:
        parse_meta(meta(resident={"protocol": "python", **bad}))
    assert words in str(e.value)


@pytest.mark.parametrize("name", ["file_read", "file_write", "file_edit", "file_glob"])
def test_the_bundled_python_tools_run_resident(name):
    with open(os.path.join(TOOLS, name + ".meta"), "rb") as f:
        m = parse_meta(f.read())
    assert m.fields["resident"]["protocol"] == "python"


def test_each_file_grep_variant_hosts_its_engine():
    with open(os.path.join(TOOLS, "file_grep.meta"), "rb") as f:
        m = parse_meta(f.read())
    for v in m.variants:
        r = v.fields["resident"]
        assert r["protocol"] == "python" and r["script"] == "file_grep.py"
        assert r["args"] == (["--rg"] if v.match.get("binary") == ("rg",) else [])
        assert os.access(os.path.join(TOOLS, r["script"]), os.X_OK)
        assert ("--rg" in v.fields["cmd"]) is bool(r["args"])    # the cold run's engine too
