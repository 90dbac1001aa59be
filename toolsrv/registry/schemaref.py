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
`tools/errors`) and `import-mcp` can say so; `REASON` is how both word it.  `ref_loop`
finds refs that lead back where they started without entering the instance
(`{"$ref": "#"}`, a $defs a -> b -> a): validation would never end, so that too is refused.

A schema must not stall the server either (the args, and the schema, are someone else's):
jsonschema's own code is linear in the args but for two things, made bounded here for
every validator built: `uniqueItems` (jsonschema compares every pair: 8,000 objects took
a minute) is a set of canonical keys, linear; and every regex a schema applies
(`pattern`, `patternProperties`, `additionalProperties` beside them, `unevaluated...`)
runs in the `regex` module with a time limit (`(a|aa)+$` backtracks exponentially):
jsonschema's modules see `_BoundedRe` as their `re`, whose search() takes the time left
of the budget `bounded()` sets around one validation (PATTERN_BUDGET in all), and raises
PatternTooSlow once it is spent.  A validation that can run a regex (`uses_regex`) runs
in a thread (tree/calls/apply.py), where regex releases the GIL while it matches: forty
calls at once each spend their budget there, and the loop serves everyone meanwhile.
Every keyword a validator applies is one step, and `bounded(steps)` allows so many
(STEP_BUDGET unless said), then raises StepsSpent: what a schema costs grows with its
refs (bounded at load: schemacost.py) and, through a recursive schema, with the args; the
step budget bounds both, whatever the schema.
"""
from __future__ import annotations

import re
import threading
import time
from typing import Any, Iterator
from urllib.parse import unquote, urljoin

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
    annotations) that resolves only refs inside the schema and never fetches one, with
    uniqueItems linear and every regex bounded (see the header).  A ref that does not
    resolve makes validation raise `referencing.exceptions.Unresolvable`."""
    return _bounded_class(cls or validator_class(schema))(schema, registry=registry())


PATTERN_BUDGET = 0.25   # seconds of regex matching one validation may spend, in all
STEP_BUDGET = 200_000   # keywords one validation may apply, in all (1 to 3 s of a core)


class PatternTooSlow(Exception):
    """A schema's regex took longer than the validation's budget on these args."""

    def __init__(self, pattern: str) -> None:
        super().__init__(pattern)
        self.pattern = pattern


class StepsSpent(Exception):
    """A validation applied more keywords than its step budget (bounded's `steps`)."""


_local = threading.local()    # .deadline, .steps: the budget's end and [steps left],
                              # while bounded() runs (per thread)


class bounded:
    """`with bounded():` one validation: its regexes share PATTERN_BUDGET, and it may apply
    `steps` keywords (STEP_BUDGET unless said), past which StepsSpent is raised."""

    def __init__(self, steps: int = STEP_BUDGET) -> None:
        self.steps = steps

    def __enter__(self) -> None:
        self.outer = getattr(_local, "deadline", None), getattr(_local, "steps", None)
        _local.deadline = time.monotonic() + PATTERN_BUDGET
        _local.steps = [self.steps]

    def __exit__(self, *exc: Any) -> None:
        _local.deadline, _local.steps = self.outer


class _BoundedRe:
    """What jsonschema's keyword modules take for `re`: search() in `regex`, with the time
    left of the budget (a whole PATTERN_BUDGET outside bounded()); all else is re's."""

    def __getattr__(self, name: str) -> Any:
        return getattr(re, name)

    @staticmethod
    def search(pattern: Any, string: Any, flags: int = 0) -> Any:
        import regex
        end = getattr(_local, "deadline", None)
        left = end - time.monotonic() if end is not None else PATTERN_BUDGET
        if left <= 0:
            raise PatternTooSlow(str(pattern))
        try:
            return regex.search(pattern, string, flags, timeout=left, concurrent=True)
        except TimeoutError:
            raise PatternTooSlow(str(pattern)) from None
        except regex.error:   # a pattern re takes and regex does not (metafile checked re)
            return re.search(pattern, string, flags)


def uses_regex(schema: Any) -> bool:
    """Whether validating against schema can run a regex (`pattern`, `patternProperties`):
    such a validation may take its whole budget, so the server runs it off its loop."""
    return any(isinstance(node.get("pattern"), str) or "patternProperties" in node
               for _, node in _walk(schema, ""))


_classes: dict[Any, Any] = {}


def _bounded_class(cls: Any) -> Any:
    """cls with uniqueItems linear, every keyword counted against the step budget, and
    jsonschema's modules given _BoundedRe (once).  jsonschema's `validator_for`, which
    picks the class for a subschema that names its own `$schema`, is made to answer with
    such a class too, or that subschema's keywords would go uncounted."""
    got = _classes.get(cls)
    if got is None:
        import jsonschema._keywords
        import jsonschema._legacy_keywords
        import jsonschema._utils
        import jsonschema.validators as jv
        for module in (jsonschema._keywords, jsonschema._legacy_keywords, jsonschema._utils):
            if getattr(module, "re", None) is re:   # a jsonschema that searches with re
                module.re = _BoundedRe()            # type: ignore[attr-defined]
        if not _classes:
            jv.validator_for = _bounded_for(jv.validator_for)
        keywords = dict(cls.VALIDATORS)
        if "uniqueItems" in keywords:
            keywords["uniqueItems"] = _unique_items
        got = _classes[cls] = jv.extend(cls, {k: _counted(f) for k, f in keywords.items()})
        _classes[got] = got
    return got


def _bounded_for(validator_for: Any) -> Any:
    def bounded_for(schema: Any, *default: Any, **kw: Any) -> Any:
        return _bounded_class(validator_for(schema, *default, **kw))
    return bounded_for


def _counted(keyword: Any) -> Any:
    """keyword, applying which spends one step of bounded()'s budget (none outside it)."""
    def counted(validator: Any, value: Any, instance: Any, schema: Any) -> Any:
        left = getattr(_local, "steps", None)
        if left is not None:
            left[0] -= 1
            if left[0] < 0:
                raise StepsSpent()
        return keyword(validator, value, instance, schema)
    return counted


def _unique_items(validator: Any, unique: Any, instance: Any, schema: Any) -> Any:
    """uniqueItems with a set of canonical keys (JSON equality: 1 == 1.0, true != 1)."""
    if not unique or not validator.is_type(instance, "array"):
        return
    seen: dict[Any, int] = {}
    for i, item in enumerate(instance):
        k = _key(item)
        if k in seen:
            from jsonschema.exceptions import ValidationError
            yield ValidationError(f"has non-unique elements: [{seen[k]}] and [{i}] are equal")
            return
        seen[k] = i


def _key(x: Any) -> Any:
    if isinstance(x, bool) or x is None:
        return ("b", x)
    if isinstance(x, (int, float)):
        return ("n", x)              # 1 and 1.0: equal and of one hash
    if isinstance(x, str):
        return ("s", x)
    if isinstance(x, list):
        return ("l", tuple(_key(v) for v in x))
    if isinstance(x, dict):
        return ("d", frozenset((k, _key(v)) for k, v in x.items()))
    return ("o", id(x))


_IN_PLACE_LISTS = ("allOf", "anyOf", "oneOf")     # subschemas applied to the same instance
_IN_PLACE_ONE = ("not", "if", "then", "else")
_IN_PLACE_MAPS = ("dependentSchemas", "dependencies")   # (the old drafts' name for it)


def ref_loop(schema: Any) -> list[str] | None:
    """The pointers of a loop of `$ref`s that never enters the instance (each step a ref,
    or an allOf/anyOf/oneOf/not/if/then/else/dependentSchemas of the same place), or None.
    A loop that passes through properties, items and the like is a recursive schema, and
    fine: each step goes one level into the args, so it ends with them.
    Only refs that are pointers into this document ("#", "#/...") are followed; those
    under an embedded `$id` are another document's and are not."""
    if not isinstance(schema, dict):
        return None
    edges: dict[int, list[tuple[str, Any]]] = {}
    names: dict[int, str] = {}
    stack: list[tuple[Any, str, bool]] = [(schema, "#", False)]
    while stack:
        node, where, embedded = stack.pop()
        if not isinstance(node, dict) or id(node) in names:
            continue
        names[id(node)] = where
        embedded = embedded or (node is not schema and _id_of(node) is not None)
        out = edges.setdefault(id(node), [])
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#") and not embedded:
            target = _pointer(schema, ref)
            if isinstance(target, dict):
                out.append((ref, target))
        for k in _IN_PLACE_LISTS:
            for i, sub in enumerate(node.get(k) or () if isinstance(node.get(k), list) else ()):
                out.append((f"{where}/{k}/{i}", sub))
        for k in _IN_PLACE_ONE:
            out.append((f"{where}/{k}", node.get(k)))
        for k in _IN_PLACE_MAPS:
            for name, sub in (m.items() if isinstance(m := node.get(k), dict) else ()):
                out.append((f"{where}/{k}/{name}", sub))
        for k, v in node.items():
            if k in _DATA:
                continue
            if isinstance(v, dict):
                stack.append((v, f"{where}/{k}", embedded))
            elif isinstance(v, list):
                stack.extend((x, f"{where}/{k}/{i}", embedded) for i, x in enumerate(v))
    # a cycle in the in-place graph: depth-first, colours white (absent) / grey / black
    state: dict[int, int] = {}
    for start in list(edges):
        if start in state:
            continue
        path: list[tuple[int, str]] = [(start, names[start])]
        iters = [iter(edges.get(start, ()))]
        state[start] = 1
        while iters:
            step = next(iters[-1], None)
            if step is None:
                state[path[-1][0]] = 2
                path.pop()
                iters.pop()
                continue
            label, sub = step
            if not isinstance(sub, dict):
                continue
            n = id(sub)
            if state.get(n) == 1:
                at = next(i for i, (p, _) in enumerate(path) if p == n)
                return [lbl for _, lbl in path[at:]] + [label]
            if n not in state:
                state[n] = 1
                path.append((n, label))
                iters.append(iter(edges.get(n, ())))
    return None


def _pointer(doc: Any, ref: str) -> Any:
    """What the JSON pointer of a "#..." ref names in doc, or None."""
    node = doc
    frag = unquote(ref[1:])
    if frag and not frag.startswith("/"):
        return None                  # an anchor: not followed here
    for part in frag.split("/")[1:]:
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node


def unresolved(err: BaseException) -> str | None:
    """The `$ref ... is not resolved` text for an Unresolvable raised while validating,
    else None."""
    from referencing.exceptions import Unresolvable
    if not isinstance(err, Unresolvable):
        return None
    ref = getattr(err, "ref", None) or str(err)
    return f"$ref to {ref} {REASON}"


def all_refs(schema: Any) -> list[tuple[str, str]]:
    """(base URI, value) of every `$ref`/`$dynamicRef` in `schema`, in document order."""
    return list(_refs(schema, "")) if isinstance(schema, dict) else []


def outside_refs(schema: Any, refs: list[tuple[str, str]] | None = None) -> list[str]:
    """Every `$ref`/`$dynamicRef` value in `schema` that resolves neither inside it nor to a
    bundled meta-schema, in document order; [] when all of them do.  `refs`: all_refs's
    answer, when the caller has it."""
    if not isinstance(schema, dict):
        return []
    refs = all_refs(schema) if refs is None else refs
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
