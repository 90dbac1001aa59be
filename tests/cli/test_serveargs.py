"""`serve`'s options are declared once (issue 47.3): the table in toolsrv/options.py makes
the parser, the fast path and the Options record, and they agree."""
from __future__ import annotations

import pytest

from toolsrv.app import Options
from toolsrv.cli.command import build_parser
from toolsrv.cli.serveargs import SERVE_OPTIONS, parse_serve, serve_options
from toolsrv.options import EXTRA, OPTIONS
from toolsrv.serve.server import DEFAULT_MSIZE


def test_serve_with_no_flag_runs_the_default_options():
    assert serve_options(parse_serve([])) == Options()
    assert serve_options(build_parser().parse_args(["serve"])) == Options()


def test_a_flag_reaches_its_field():
    o = serve_options(parse_serve(["--no-state", "--tools", "a:b", "--no-audit", "-a", "x",
                                   "-a", "y", "--max-runs", "3"]))
    assert (o.persist, o.tools, o.audit, o.addrs, o.max_runs) == (False, ["a", "b"], None,
                                                                  ["x", "y"], 3)
    assert o != Options()


def test_each_field_is_set_by_one_flag_or_is_extra():
    fields = [o.field for o in OPTIONS if o.field is not None] + list(EXTRA)
    assert fields == list(Options.FIELDS)
    assert len(set(fields)) == len(fields)
    assert [f for fs, _ in SERVE_OPTIONS for f in fs] == [f for o in OPTIONS for f in o.flags]


def test_the_type_checker_sees_every_field():
    assert list(Options.__annotations__) == list(Options.FIELDS)


def test_options_takes_fields_by_name_or_place_and_nothing_else():
    assert Options(["unix!/x"]).addrs == Options(addrs=["unix!/x"]).addrs == ["unix!/x"]
    assert Options().msize == DEFAULT_MSIZE
    a, b = Options(), Options()
    a.addrs.append("x")
    assert b.addrs == [], "a list default is fresh for each record"
    with pytest.raises(TypeError, match="unexpected keyword argument 'max_run'"):
        Options(max_run=3)
    with pytest.raises(TypeError, match="multiple values for 'addrs'"):
        Options([], addrs=[])
