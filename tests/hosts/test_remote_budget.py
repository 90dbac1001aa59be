"""A remote's metadata is bounded by what it becomes here, not only by its bytes (issue 43,
finding 6): a `{}` is 3 bytes on the wire and ~70 in a front's memory, and a front kept
every tool's parsed meta and schema whole.  Now a tool keeps its schema and the meta
fields this host uses (remote.KEPT), at most MAX_NODES JSON values, and an import's tools
together at most IMPORT_BYTES of text and IMPORT_NODES values; past that the rest of the
index is left out, and tools/errors says so naming the import and the bound."""
from __future__ import annotations

import json

import pytest

from toolsrv.cli.client import Client
from toolsrv.hosts import remote

from hostshelpers import Server, wait_for
from hostile9p import JUNK, SCHEMA_JUNK, Hostile


class Imp:
    source = "import far"


def make(meta: dict, schema: dict, name: str = "t") -> remote.RemoteTool:
    return remote.make("far", name, Imp(), "tcp!far!1", json.dumps(meta).encode(),
                       json.dumps(schema).encode(), b"use it\n")


def test_only_the_meta_fields_this_host_uses_are_kept():
    meta = {"description": "d", "title": "T", "junk": [{}] * 1000, "extra": {"x": [1] * 99}}
    t = make(meta, {"type": "object", "properties": {"a": {"type": "string"}}})
    kept = t.__dict__["_meta"]
    assert set(kept) <= set(remote.KEPT) | {"name", "host"} and kept["title"] == "T"
    assert t.meta_json()["args"] is t.schema and "junk" in t.meta_text    # served as sent
    size = len(json.dumps(meta)) + len(json.dumps(t.schema)) + len("use it\n")
    assert t.cost == (size, 5 + 3)       # schema: 5 values; kept meta: itself, 2 fields


def test_a_tool_past_its_node_bound_is_refused():
    """Its schema and kept meta fields together (outputSchema here) past MAX_NODES; a
    field not kept costs nothing."""
    out = {"type": "object", "properties": {f"p{i}": {} for i in range(20)}}
    with pytest.raises(remote.BadRemoteTool, match=f"more than {remote.MAX_NODES} JSON"):
        make({"description": "d", "outputSchema": out},
             {"type": "object", "x": [[]] * (remote.MAX_NODES - 10)})
    make({"description": "d", "junk": [{}] * remote.MAX_NODES}, {"type": "object"})


def test_an_imports_budget_takes_tools_until_one_would_pass_it(monkeypatch):
    monkeypatch.setattr(remote, "IMPORT_NODES", 100)
    b = remote.Budget()
    small = make({"description": "d"}, {"type": "object", "x": [{}] * 40})
    assert b.take(small) and b.take(small) and not b.take(small)
    assert b.nodes == 2 * small.cost[1] and b.bytes == 2 * small.cost[0]
    assert b.left_out("t2", 5) == (
        f"its tools' metadata passes the import's budget of {remote.IMPORT_BYTES} bytes "
        "and 100 JSON values at t2: it and the 5 tools after it are not imported")


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        return next(int(ln.split()[1]) for ln in f if ln.startswith("VmRSS")) / 1024


def test_a_remotes_junk_metadata_cannot_grow_the_front_past_its_budget(loop_probe):
    """30 tools, each a meta of 100,000 `{}`s in a field nobody uses and a schema of
    40,000: the old front grew by ~10 MiB a tool (~300 MiB here; at the 10,000-tool cap,
    ~100 GB).  Now the junk meta field is dropped, the schemas fill the node budget at the
    13th tool, which tools/errors names, and the front grows by what the budget allows
    (IMPORT_NODES values at ~70 bytes and IMPORT_BYTES of text: well under 120 MiB)."""
    n = 30
    with Hostile("amplify", tools=n) as h:
        front = Server({}).start()
        try:
            with Client.connect(front.addr) as c, loop_probe(front.addr):
                before = rss_mib(front.p.pid)
                c.write("hosts/ctl", f"import evil {h.addr}\n".encode())
                assert wait_for(lambda: "budget" in c.read("tools/errors").decode() or
                                c.read("tools/index").count(b"evil.") == n, 120)
                grew = rss_mib(front.p.pid) - before
                errors = c.read("tools/errors").decode()
                index = c.read("tools/index").decode()
            assert grew < 120, f"the front grew by {grew:.0f} MiB for {n} tools ({JUNK=})"
            fit = remote.IMPORT_NODES // (SCHEMA_JUNK + 2 + 3)
            assert index.count("evil.") == fit, index
            assert (f"evil\tits tools' metadata passes the import's budget of "
                    f"{remote.IMPORT_BYTES} bytes and {remote.IMPORT_NODES} JSON values at "
                    f"t{fit}: it and the {n - fit - 1} tools after it are not imported"
                    ) in errors
        finally:
            front.cleanup()


def test_every_hint_of_a_meta_has_a_kind_a_remote_is_held_to():
    """A field added to metafile.HINTS must be typed here too: an import of any remote
    whose meta carried it failed with a KeyError (5 tests of tests/hosts, in CI)."""
    from toolsrv.hosts.remote import _hints
    from toolsrv.registry.metafile import HINTS
    assert _hints({k: object() for k in HINTS}) == {}       # none of the right type: dropped
    assert _hints({"confirm": True, "title": "T", "destructive": "yes"}) == \
        {"confirm": True, "title": "T"}
