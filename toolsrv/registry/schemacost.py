"""What a schema costs to apply, bounded where it enters (issue 43, finding 4).

Theory of operation.  jsonschema applies a subschema once for every way of reaching it: a
`$ref` is followed each time it is met, so `d_i = allOf[ref d_{i+1}, ref d_{i+1}]` is 1.3 KB
and 2**depth subschemas, every call.  `cost_refusal(schema)` counts, at load, two things:
its nodes (every JSON value in it), and its *paths*: the subschemas it holds with every
`$ref`/`$dynamicRef`/`$recursiveRef` expanded in place, which is the most subschemas one
place of the args can meet.  Paths are counted by dynamic programming over the graph of
subschemas (children by keyword, and refs resolved as validation resolves them, through
`referencing`, anchors and embedded `$id`s included): each node's count is worked out once
and memoised, so the count is linear in the schema however large the number.  A ref
back to a node still being counted (recursion through `properties`, `items`: loops that
never enter the args are refused by schemaref.ref_loop) counts once; what such a schema
costs grows with the args, and the validation's step budget (schemaref.bounded) bounds it.

The registry (metafile.check_args), `import-mcp` and a remote host's tools (hosts/
remote.py) refuse a schema past NODES_MAX nodes or PATHS_MAX paths, naming the count,
before anything else walks it: the count takes any JSON, valid schema or not.
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

NODES_MAX = 50_000     # JSON values (objects, arrays, strings, numbers...) one schema holds
PATHS_MAX = 20_000     # subschemas it holds with every $ref expanded in place
_SHOWN_MAX = 10 ** 9   # counts past this are said as "over" it

_DATA = frozenset(("const", "enum", "default", "examples"))    # values, not subschemas
_NAMED = frozenset(("properties", "patternProperties", "dependentSchemas", "dependencies"))
_DEFS = frozenset(("$defs", "definitions"))                    # reached only by a ref
_REFS = ("$ref", "$dynamicRef", "$recursiveRef")


def cost_refusal(schema: Any) -> str | None:
    """Why `schema` costs too much to apply (its node or path count past the bound,
    named), or None."""
    return cost_and_refs(schema)[0]


def cost_and_refs(schema: Any) -> tuple[str | None, bool]:
    """cost_refusal's answer, and whether any object in `schema` has a ref key (the
    same walk: a schema without one needs no ref checks, metafile.check_args)."""
    nodes, has_refs = _nodes(schema)
    if nodes > NODES_MAX:
        return (f"{nodes:,} JSON values, past the bound of {NODES_MAX:,} for a schema "
                "(make it smaller)"), has_refs
    if not has_refs and nodes <= PATHS_MAX:
        return None, False              # without refs a path is a node of its own
    paths = _paths(schema, has_refs)
    if paths > PATHS_MAX:
        said = f"{paths:,}" if paths <= _SHOWN_MAX else f"over {_SHOWN_MAX:,}"
        return (f"its $refs expand to {said} subschemas, past the bound of {PATHS_MAX:,} "
                "(a call's args could meet every one of them: refer to a shared "
                "definition fewer times over, or flatten it)"), has_refs
    return None, has_refs


def _nodes(schema: Any) -> tuple[int, bool]:
    """(how many JSON values schema holds, whether any of its objects has a ref key)."""
    n, refs = 0, False
    stack = [schema]
    while stack:
        v = stack.pop()
        n += 1
        if isinstance(v, dict):
            refs = refs or any(k in v for k in _REFS)
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
    return n, refs


def _paths(schema: Any, has_refs: bool) -> int:
    """The subschemas of schema with its refs expanded, memoised per node (see header)."""
    if not isinstance(schema, dict):
        return 1
    refs = None
    if has_refs:
        try:
            refs = _Refs(schema)
        except Exception:           # a root check_schema refuses next ("$id": 5): no refs
            refs = None
    done: dict[int, int] = {}
    active: set[int] = {id(schema)}
    frames: list[list[Any]] = [[schema, _children(schema, refs, refs and refs.root), 1]]
    while True:
        frame = frames[-1]
        step = next(frame[1], None)
        if step is None:
            node, _, total = frames.pop()
            done[id(node)] = total = min(total, _SHOWN_MAX + 1)
            active.discard(id(node))
            if not frames:
                return total
            frames[-1][2] += total
            continue
        child, res = step
        key = id(child)
        if key in done:
            frame[2] += done[key]
        elif key in active or not isinstance(child, dict):
            frame[2] += 1               # recursion through the args, or a boolean schema
        else:
            active.add(key)
            frames.append([child, _children(child, refs, res), 1])


class _Refs:
    """Resolves a schema's refs as a validator of it does (schemaref's registry: nothing
    fetched), each (ref, base) once."""

    def __init__(self, schema: dict[str, Any]) -> None:
        from referencing.jsonschema import DRAFT202012, specification_with
        from .schemaref import registry
        uri = schema.get("$schema")
        self.spec = specification_with(uri, default=DRAFT202012) if isinstance(uri, str) \
            else DRAFT202012
        self.root = registry().resolver_with_root(self.spec.create_resource(schema))
        self.seen: dict[tuple[str, int], Any] = {}
        self.kept: list[Any] = []      # every resolver keyed by id() here stays alive

    def enter(self, node: dict[str, Any], resolver: Any) -> Any:
        """The resolver inside node (a new base when it has an id)."""
        if "$id" in node or "id" in node:
            try:
                resolver = resolver.in_subresource(self.spec.create_resource(node))
            except Exception:           # an id check_schema refuses ("id": {}): no base
                return resolver
            self.kept.append(resolver)
        return resolver

    def lookup(self, ref: str, resolver: Any) -> Any:
        """(target, its resolver), or None when it does not resolve."""
        key = (ref, id(resolver))
        if key not in self.seen:
            try:
                got = resolver.lookup(ref)
                self.seen[key] = (got.contents, got.resolver)
            except Exception:           # unresolved: refused where it enters (outside_refs),
                self.seen[key] = None   # or a schema not yet checked (counted before it is)
        return self.seen[key]


def _children(node: dict[str, Any], refs: _Refs | None, resolver: Any
              ) -> Iterator[tuple[Any, Any]]:
    """(subschema, its resolver) for each subschema node applies in place or deeper."""
    if refs is not None:
        resolver = refs.enter(node, resolver)
    for k, v in node.items():
        if k in _DATA or k in _DEFS:
            continue
        if k in _REFS and isinstance(v, str) and refs is not None:
            got = refs.lookup(v, resolver)
            if got is not None:
                yield got
        elif isinstance(v, dict):
            if k in _NAMED:
                yield from ((sub, resolver) for sub in v.values() if isinstance(sub, dict))
            else:
                yield v, resolver
        elif isinstance(v, list):
            yield from ((sub, resolver) for sub in v if isinstance(sub, dict))
