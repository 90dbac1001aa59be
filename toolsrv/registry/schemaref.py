"""A schema's `$ref`s: only refs inside the schema resolve; nothing is ever fetched (issue 25).

Theory of operation.  jsonschema's default registry retrieves an unknown `$ref` with
`urlopen` (file:// and http:// alike): on the server that is a read as root, or a wait on
someone's listener, on the event loop.  Every validator toolsrv builds (`validator`) is
given a `referencing.Registry` whose `retrieve` refuses every URI, combined (as jsonschema
always does) with the JSON Schema meta-schemas it ships as package data.  So a ref
resolves only to a place inside the schema itself (a JSON pointer, an anchor, an embedded
`$id`) or to one of those meta-schemas; anything else is `Unresolvable`, without I/O.

`outside_refs(schema)` finds, without validating anything, every `$ref`/`$dynamicRef`
that would not resolve that way (the base URI followed through `$id`, and `id` for the
old drafts), so a `.meta` holding one is refused up front (metafile.py, into
`tools/errors`) and `import-mcp` can say so; `REASON` is how both word it.
"""
from __future__ import annotations

from typing import Any, Iterator
from urllib.parse import urljoin

REASON = "is not resolved (toolsrv resolves only refs inside the schema)"
_DATA = frozenset(("const", "enum", "default", "examples"))   # values, not subschemas
_REFS = ("$ref", "$dynamicRef")


class Refused(Exception):
    """retrieve's answer to every URI: toolsrv fetches nothing a schema names."""


def _refuse(uri: str) -> Any:
    raise Refused(f"$ref to {uri} {REASON}")


_registry: Any = None


def registry() -> Any:
    """The refusing `referencing.Registry` (built once, on first use)."""
    global _registry
    if _registry is None:
        from jsonschema_specifications import REGISTRY as SPECIFICATIONS
        from referencing import Registry
        _registry = SPECIFICATIONS.combine(Registry(retrieve=_refuse))  # type: ignore[call-arg]
    return _registry


def validator_class(schema: Any) -> Any:
    """jsonschema's validator class for the draft `schema` declares (2020-12 if none)."""
    import jsonschema.validators as jv
    if not isinstance(schema, dict) or not isinstance(schema.get("$schema"), str):
        return jv.Draft202012Validator
    return jv.validator_for(schema, default=jv.Draft202012Validator)


def validator(schema: Any, cls: Any = None) -> Any:
    """A jsonschema validator for `schema` (its own draft unless `cls` is given; formats are
    annotations) that resolves only refs inside the schema and never fetches one.  A ref
    that does not resolve makes validation raise `referencing.exceptions.Unresolvable`."""
    cls = cls or validator_class(schema)
    return cls(schema, registry=registry())


def unresolved(err: BaseException) -> str | None:
    """The `$ref ... is not resolved` text for an Unresolvable raised while validating,
    else None."""
    from referencing.exceptions import Unresolvable
    if not isinstance(err, Unresolvable):
        return None
    ref = getattr(err, "ref", None) or str(err)
    return f"$ref to {ref} {REASON}"


def outside_refs(schema: Any) -> list[str]:
    """Every `$ref`/`$dynamicRef` value in `schema` that resolves neither inside it nor to a
    bundled meta-schema, in document order; [] when all of them do."""
    if not isinstance(schema, dict):
        return []
    refs = list(_refs(schema, ""))
    if not refs:
        return []
    ids = {base for base, _ in _ids(schema, "")}
    known = {u.rstrip("#") for u in _meta_schema_uris()}
    out: list[str] = []
    for base, ref in refs:
        if ref.startswith("#"):
            target = base                                    # the document it is in
        else:
            target = urljoin(base, ref).split("#", 1)[0]
        if target == "" or target in ids or target in known:
            continue
        if ref not in out:
            out.append(ref)
    return out


def _meta_schema_uris() -> Iterator[str]:
    from jsonschema_specifications import REGISTRY as SPECIFICATIONS
    return iter(SPECIFICATIONS)


def _id_of(node: dict[str, Any]) -> str | None:
    for key in ("$id", "id"):
        v = node.get(key)
        if isinstance(v, str) and not v.startswith("#"):
            return v
    return None


def _walk(node: Any, base: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """(base URI, subschema) for every schema object under node, depth-first."""
    if isinstance(node, list):
        for x in node:
            yield from _walk(x, base)
        return
    if not isinstance(node, dict):
        return
    own = _id_of(node)
    if own is not None:
        base = urljoin(base, own).split("#", 1)[0]
    yield base, node
    for k, v in node.items():
        if k not in _DATA and isinstance(v, (dict, list)):
            yield from _walk(v, base)


def _refs(schema: dict[str, Any], base: str) -> Iterator[tuple[str, str]]:
    for b, node in _walk(schema, base):
        for key in _REFS:
            v = node.get(key)
            if isinstance(v, str):
                yield b, v


def _ids(schema: dict[str, Any], base: str) -> Iterator[tuple[str, dict[str, Any]]]:
    for b, node in _walk(schema, base):
        if _id_of(node) is not None:
            yield b, node
