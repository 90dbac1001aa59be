"""The `lsp` resident protocol's fields in a .meta (issue 31): normalised, and each
mistake named; every bundled lsp_* .meta parses and names a known operation."""
from __future__ import annotations

import glob
import json
import os
import re

import pytest

from toolsrv.registry.metafile import LSP_OPS, MetaError, parse_meta

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def meta(**fields):
    return json.dumps(fields).encode()


def test_lsp_fields_are_normalised():
    r = parse_meta(meta(resident={"protocol": "lsp", "tool": "hover", "language": "go",
                                  "extensions": [".go"], "settings": {"gopls": {}}}))
    assert r.fields["resident"] == {"protocol": "lsp", "idle": 300.0, "tool": "hover",
                                    "language": "go", "extensions": [".go"],
                                    "settings": {"gopls": {}}, "init": None}


@pytest.mark.parametrize("bad, words", [
    ({"tool": "hover"}, 'resident.language: must be a language id such as "python"'),
    ({"language": "go"}, "resident.tool: must be one of definition, references, hover, "
     "diagnostics, symbols, rename, calls for protocol lsp, not null"),
    ({"tool": "format", "language": "go"}, 'resident.tool: must be one of'),
    ({"tool": "hover", "language": "go", "extensions": "go"},
     'resident.extensions: must be a list of endings such as [".py"]'),
    ({"tool": "hover", "language": "go", "extensions": ["go"]}, "resident.extensions:"),
    ({"tool": "hover", "language": "go", "server": "gopls"},
     "resident.server: unknown field (protocol, idle, tool, language, extensions, "
     "settings, init)"),
])
def test_lsp_mistakes_are_named(bad, words):
    with pytest.raises(MetaError, match=re.escape(words)):
        parse_meta(meta(resident={"protocol": "lsp", **bad}))


def test_lsp_fields_are_refused_for_the_other_protocols():
    with pytest.raises(MetaError, match=re.escape("resident.language: unknown field")):
        parse_meta(meta(resident={"protocol": "lines", "language": "python"}))


def test_the_bundled_lsp_tools():
    files = sorted(glob.glob(os.path.join(REPO, "data", "tools", "lsp_*.meta")))
    ops = []
    for f in files:
        m = parse_meta(open(f, "rb").read())
        r = m.fields["resident"]
        assert r["protocol"] == "lsp" and r["language"] == "python", f
        assert m.extra.get("sandbox") == "lsp" and m.fields["cmd"] == "exec pylsp", f
        assert os.path.basename(f) == f"lsp_{r['tool']}.meta"
        ops.append(r["tool"])
    assert sorted(ops) == sorted(LSP_OPS)
