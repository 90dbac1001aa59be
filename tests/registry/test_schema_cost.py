"""What a schema costs to apply is bounded where it enters (issue 43, finding 4): its JSON
values (NODES_MAX) and its subschemas with every `$ref` expanded (PATHS_MAX), counted at
load by schemacost.cost_refusal, so `d_i = allOf[ref d_{i+1}, ref d_{i+1}]` (1.3 KB, 2**depth
subschemas) is refused in tools/errors naming its count, however the refs are spelled
(pointers, anchors, an embedded `$id`), and the schemas real tools and MCP servers send
pass with room.  A remote host's tool gets the same check (hosts/remote.make)."""
from __future__ import annotations

import glob
import json
import os

import pytest

from toolsrv.hosts.remote import BadRemoteTool, make
from toolsrv.registry.metafile import MetaError, parse_meta
from toolsrv.registry.schemacost import NODES_MAX, PATHS_MAX, cost_refusal


def fan(depth: int) -> dict:
    """The reproducer's schema (shared/repro/round4/fan_mcp.py): 2**depth leaves."""
    d = {f"d{i}": {"allOf": [{"$ref": f"#/$defs/d{i + 1}"}, {"$ref": f"#/$defs/d{i + 1}"}]}
         for i in range(depth)}
    d[f"d{depth}"] = {"type": "integer"}
    return {"type": "object", "$defs": d, "properties": {"x": {"$ref": "#/$defs/d0"}}}


def paths_schema(n: int) -> dict:
    """A schema of exactly n paths: the root, `p` with k refs to one leaf (two each: the
    ref's holder and the leaf), and a padding property when n is odd."""
    k, odd = divmod(n - 2, 2)
    props: dict = {"p": {"anyOf": [{"$ref": "#/$defs/leaf"} for _ in range(k)]}}
    if odd:
        props["pad"] = {}
    return json.loads(json.dumps({"type": "object", "$defs": {"leaf": {"type": "string"}},
                                  "properties": props}))


def nodes_schema(n: int) -> dict:
    """A schema of exactly n JSON values: 5 of structure and an enum of n - 5 numbers."""
    return {"type": "object", "properties": {"x": {"enum": list(range(n - 5))}}}


def test_the_reproducers_schema_is_refused_naming_its_count():
    assert cost_refusal(fan(10)) is None                     # 4,095 paths
    why = cost_refusal(fan(19))
    assert why is not None and "expand to 2,097,151 subschemas, past the bound of " \
        f"{PATHS_MAX:,}" in why
    assert "over 1,000,000,000" in (cost_refusal(fan(200)) or "")   # counted, not walked


def test_paths_at_the_bound_pass_and_one_more_is_refused():
    assert cost_refusal(paths_schema(PATHS_MAX)) is None
    why = cost_refusal(paths_schema(PATHS_MAX + 1))
    assert why == (f"its $refs expand to {PATHS_MAX + 1:,} subschemas, past the bound of "
                   f"{PATHS_MAX:,} (a call's args could meet every one of them: refer to a "
                   "shared definition fewer times over, or flatten it)")


def test_nodes_at_the_bound_pass_and_one_more_is_refused():
    assert cost_refusal(nodes_schema(NODES_MAX)) is None
    assert cost_refusal(nodes_schema(NODES_MAX + 1)) == (
        f"{NODES_MAX + 1:,} JSON values, past the bound of {NODES_MAX:,} for a schema "
        "(make it smaller)")


def test_the_count_comes_first_and_takes_any_json():
    """Counted before jsonschema's check_schema walks it (far costlier per node): a big
    schema that is also invalid is refused by its size; one malformed is counted all the
    same, without an error of the count's own."""
    meta = {"description": "d", "cmd": "true", "args": {"type": "object", "properties": {
        "x": {"type": "strin", "enum": list(range(NODES_MAX))}}}}
    with pytest.raises(MetaError, match=rf"^args: {NODES_MAX + 6:,} JSON values, past"):
        parse_meta(json.dumps(meta).encode())
    odd = {"$schema": "nonsense", "$id": 5, "properties": {"a": {"$ref": 7}, "b": {
        "$id": "x:y", "$ref": "#/%%/~9"}, "c": {"$dynamicRef": "#nowhere"}}}
    assert cost_refusal(odd) is None


def test_the_registry_lists_it_in_tools_errors_by_its_count():
    meta = {"description": "d", "cmd": "true", "args": fan(16)}
    with pytest.raises(MetaError, match=r"^args: its \$refs expand to 262,143 subschemas"):
        parse_meta(json.dumps(meta).encode())
    out = {"description": "d", "cmd": "true", "outputSchema": fan(16)}   # MCP face's
    with pytest.raises(MetaError, match=r"^outputSchema: its \$refs expand to 262,143"):
        parse_meta(json.dumps(out).encode())


@pytest.mark.parametrize("schema", [
    # anchors in place of pointers
    {"$defs": {**{f"d{i}": {"$anchor": f"a{i}", "allOf": [{"$ref": f"#a{i + 1}"}] * 2}
                  for i in range(24)}, "d24": {"$anchor": "a24"}},
     "properties": {"x": {"$ref": "#a0"}}},
    # an embedded resource, reached by its $id
    {"$defs": {"r": {"$id": "https://example.com/r", "$defs": {
        **{f"d{i}": {"allOf": [{"$ref": f"#/$defs/d{i + 1}"}] * 2} for i in range(24)},
        "d24": {}}, "$ref": "#/$defs/d0"}},
     "properties": {"x": {"$ref": "https://example.com/r"}}},
    # under properties named as keywords whose values are data elsewhere
    {"$defs": {**{f"d{i}": {"properties": {"default": {"$ref": f"#/$defs/d{i + 1}"},
                                           "enum": {"$ref": f"#/$defs/d{i + 1}"}}}
                  for i in range(24)}, "d24": {}},
     "properties": {"const": {"$ref": "#/$defs/d0"}}},
])
def test_every_spelling_of_a_ref_is_followed(schema):
    why = cost_refusal(json.loads(json.dumps(schema)))
    assert why is not None and "past the bound" in why


def test_recursion_through_the_args_counts_once_and_passes():
    tree = {"type": "object", "$defs": {"node": {"type": "object", "properties": {
        "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}},
        "left": {"$ref": "#/$defs/node"}, "right": {"$ref": "#/$defs/node"}}}},
        "properties": {"root": {"$ref": "#/$defs/node"}}}
    assert cost_refusal(tree) is None


def test_real_schemas_pass_with_room():
    """The bundled tools' args and the largest schemas pydantic makes for MCP's own types
    (FastMCP's inputSchemas are made so: $defs and refs) stay under a tenth of the bound."""
    from toolsrv.registry.schemacost import _nodes, _paths
    here = os.path.dirname(os.path.abspath(__file__))
    data = os.path.join(here, "..", "..", "data", "tools", "*.meta")
    schemas = [json.load(open(f)).get("args", {}) for f in glob.glob(data)]
    import mcp.types as mt
    schemas += [mt.CallToolRequest.model_json_schema(),
                mt.CreateMessageRequest.model_json_schema()]
    assert len(schemas) > 10
    for s in schemas:
        n, refs = _nodes(s)
        assert n < NODES_MAX // 10 and _paths(s, refs) < PATHS_MAX // 10


class Imp:
    source = "import far"


def test_a_remote_tool_gets_the_same_check():
    with pytest.raises(BadRemoteTool, match=r"^schema: its \$refs expand to 262,143 "):
        make("far", "fan", Imp(), "tcp!far!1", b'{"description": "d"}',
             json.dumps(fan(16)).encode(), b"")
    with pytest.raises(BadRemoteTool, match=r"\$refs loop without end"):
        make("far", "loop", Imp(), "tcp!far!1", b"{}",
             b'{"type": "object", "properties": {"x": {"$ref": "#/properties/x"}}}', b"")
    with pytest.raises(BadRemoteTool, match=r"\$ref to file:///etc/hostname is not"):
        make("far", "out", Imp(), "tcp!far!1", b"{}",
             b'{"type": "object", "properties": {"x": {"$ref": "file:///etc/hostname"}}}', b"")
    assert make("far", "ok", Imp(), "tcp!far!1", b"{}", json.dumps(fan(8)).encode(), b"")
