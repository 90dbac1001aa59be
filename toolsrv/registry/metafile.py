"""Parse and check one `.meta` file: bytes in, a `MetaDef` or a `MetaError` out
(`read_meta`: a path in, a `MetaFile` out, never an exception).

Theory of operation.  `parse_meta` decodes the bytes (UTF-8, at most 1 MiB), parses JSON,
and checks every known field's type; fields it does not know are kept in `extra`, never
rejected.  The prose fields (description, prompt, keywords in all) are at most 64 KiB each:
past that a file is refused, since search indexes them (issue 25).  `variants` are checked
the same way, each with its `match` conditions.  No file system or environment is
consulted here: whether a variant holds or a command exists is decided later (variants.py,
resolve.py), so a parsed file can be cached by its stat key and re-evaluated cheaply when
the host changes.

Every failure is a `MetaError` whose text is a reason a person can act on, prefixed with
where it is: `line 3 column 5: Expecting ',' delimiter`, `tier: must be one of hot, warm,
cold, not "hotter"`, `variants[1].args.properties.path.type: 'strin' is not valid under
any of the given schemas`.

`args` must be a valid JSON Schema for the draft its `$schema` declares (2020-12 when it
declares none), judged by jsonschema's `check_schema`.  That check costs milliseconds per
schema (the 2020-12 meta-schema is dynamic-ref heavy), far too slow for thousands of files,
so `_surely_valid` first walks the schema with the meta-schema's rules for the common
keywords.  It only ever answers "surely valid" or "don't know"; on "don't know" (an
unhandled keyword, or anything that looks wrong) jsonschema decides and words the error,
and its verdicts are memoised by the schema's canonical text.  What a schema costs each
call is bounded here too (schemacost.py: its nodes, and its subschemas with every `$ref`
expanded), for `args` and `outputSchema` alike.
"""

from __future__ import annotations

import json
import logging
import os
import re
import stat
from collections.abc import Callable
from typing import Any

from ..record import Frozen, Record, setfield
from .metaerror import MetaError, json_kind
from .names import check_secrets
from .residentmeta import LSP_OPS, check_resident  # noqa: F401  (LSP_OPS: said here too)
from .schemacost import cost_and_refs
from .schemaref import REASON, all_refs, outside_refs, ref_loop

MAX_META_BYTES = 1 << 20
# The prose fields a person or a model reads (and search indexes): past this, a .meta is
# refused (tools/errors), so nothing a tool's author writes makes indexing costly.
MAX_TEXT_BYTES = 64 << 10
TIERS = ("hot", "warm", "cold")
MATCH_KEYS = ("binary", "file", "os", "arch", "env", "nenv")
# Go's GOOS and GOARCH values (`go tool dist list`), so typos fail loudly.
GOOS = frozenset("aix android darwin dragonfly freebsd hurd illumos ios js linux netbsd "
                 "openbsd plan9 solaris wasip1 windows zos".split())
GOARCH = frozenset("386 amd64 arm arm64 loong64 mips mips64 mips64le mipsle ppc64 ppc64le "
                   "riscv64 s390x sparc64 wasm".split())
DRAFT_2020_12 = "json-schema.org/draft/2020-12/schema"
DRAFT_07 = "json-schema.org/draft-07/schema"


class Variant(Frozen):
    """One entry of `variants`: conditions (key -> alternatives, ORed) and the fields it sets."""
    FIELDS = ("match", "fields", "extra")
    match: dict[str, tuple[str, ...]]
    fields: dict[str, Any]
    extra: dict[str, Any]

    def __init__(self, match: dict[str, tuple[str, ...]], fields: dict[str, Any],
                 extra: dict[str, Any]) -> None:
        setfield(self, "match", match)
        setfield(self, "fields", fields)
        setfield(self, "extra", extra)


class MetaDef(Frozen):
    """A checked `.meta`: known top-level fields, unknown ones, and its variants."""
    FIELDS = ("fields", "extra", "variants")
    fields: dict[str, Any]
    extra: dict[str, Any]
    variants: tuple[Variant, ...]

    def __init__(self, fields: dict[str, Any], extra: dict[str, Any] | None = None,
                 variants: tuple[Variant, ...] = ()) -> None:
        setfield(self, "fields", fields)
        setfield(self, "extra", {} if extra is None else extra)
        setfield(self, "variants", variants)

    def effective(self, index: int | None) -> tuple[dict[str, Any], dict[str, Any]]:
        """(fields, extra) with variant `index` applied: its fields override, unset ones
        inherit the top level."""
        if index is None:
            return self.fields, self.extra
        v = self.variants[index]
        return {**self.fields, **v.fields}, {**self.extra, **v.extra}


def default_args() -> dict[str, Any]:
    """The schema of a tool without `args`: an object with no required properties."""
    return {"type": "object", "properties": {}}


def json_path(parts: Any) -> str:
    """`.key` / `[index]` for each part of a JSON path (odd keys quoted: `["a b"]`)."""
    out = ""
    for p in parts:
        if isinstance(p, int):
            out += f"[{p}]"
        elif re.fullmatch(r"[A-Za-z0-9_$-]+", p):
            out += f".{p}"
        else:
            out += f"[{json.dumps(p)}]"
    return out


# --- field checkers: (value, where) -> normalised value, or MetaError -------------------

def _string(v: Any, where: str) -> str:
    if not isinstance(v, str):
        raise MetaError(f"{where}: must be a string, not {json_kind(v)}")
    return v


def _text(v: Any, where: str) -> str:
    """description, prompt: a string of at most MAX_TEXT_BYTES (UTF-8)."""
    _string(v, where)
    if len(v) > MAX_TEXT_BYTES // 4 and len(v.encode("utf-8", "surrogatepass")) > MAX_TEXT_BYTES:
        raise MetaError(f"{where}: too long: {len(v.encode('utf-8', 'surrogatepass'))} bytes, "
                        f"at most {MAX_TEXT_BYTES} (64 KiB); shorten it")
    return v


def _keywords(v: Any, where: str) -> tuple[str, ...]:
    """keywords: strings of at most MAX_TEXT_BYTES (UTF-8) in all."""
    words = _strings(v, where)
    size = sum(len(w.encode("utf-8", "surrogatepass")) for w in words)
    if size > MAX_TEXT_BYTES:
        raise MetaError(f"{where}: too long: {size} bytes in all, at most {MAX_TEXT_BYTES} "
                        "(64 KiB); keep the discovery words")
    return words


def _boolean(v: Any, where: str) -> bool:
    if not isinstance(v, bool):
        raise MetaError(f"{where}: must be a boolean, not {json_kind(v)}")
    return v


def _strings(v: Any, where: str) -> tuple[str, ...]:
    if not isinstance(v, list):
        raise MetaError(f"{where}: must be an array of strings, not {json_kind(v)}")
    for i, s in enumerate(v):
        _string(s, f"{where}[{i}]")
    return tuple(v)


def _tier(v: Any, where: str) -> str:
    if v not in TIERS or not isinstance(v, str):
        raise MetaError(f"{where}: must be one of {', '.join(TIERS)}, not {json.dumps(v)}")
    return v


def _cmd(v: Any, where: str) -> str:
    cmd = _string(v, where)
    if not cmd.strip():
        raise MetaError(f"{where}: must not be empty")
    return cmd


def _secrets(v: Any, where: str) -> tuple[str, ...]:
    """secrets: the names of the values a run of the tool gets in its environment
    (run/secrets.py reads them at each call; names.check_secrets is the rule)."""
    if not isinstance(v, list):
        raise MetaError(f"{where}: must be an array of names, not {json_kind(v)}")
    try:
        return check_secrets(v, where)
    except ValueError as e:
        raise MetaError(str(e)) from None


def check_args(v: Any, where: str = "args") -> dict[str, Any]:
    """`args`, checked: a JSON Schema of an object, valid for its draft, its refs inside it,
    without a loop, its cost within schemacost's bounds; else MetaError (tools/errors).
    A remote host's tools get the same (hosts/remote.py)."""
    if not isinstance(v, dict):
        raise MetaError(f"{where}: must be an object (a JSON Schema), not {json_kind(v)}")
    has_refs = _check_cost(v, where)
    check_schema(v, where)
    if has_refs:                # the cost's walk saw a ref key (most schemas have none)
        check_refs(v, where)
    t = v.get("type", "object")
    if t != "object" and not (isinstance(t, list) and "object" in t):
        raise MetaError(f'{where}.type: must be "object" (a tool reads one JSON object '
                        f"on stdin), not {json.dumps(t)}")
    return v


def _output_schema(v: Any, where: str) -> dict[str, Any]:
    """outputSchema: a JSON Schema of the JSON object the tool prints (MCP's
    structuredContent): checked as `args` is, and it must describe an object."""
    if not isinstance(v, dict):
        raise MetaError(f"{where}: must be an object (a JSON Schema), not {json_kind(v)}")
    _check_cost(v, where)
    check_schema(v, where)
    if v.get("type") != "object":
        raise MetaError(f'{where}.type: must be "object" (MCP\'s structured content is '
                        f"one JSON object), not {json.dumps(v.get('type'))}")
    return v


_CHECKERS: dict[str, Callable[[Any, str], Any]] = {
    "description": _text, "prompt": _text, "keywords": _keywords, "args": check_args,
    "tier": _tier, "cmd": _cmd, "scope": _string, "outputFormat": _string,
    "resetsCounter": _boolean, "readOnly": _boolean, "resident": check_resident,
    "title": _string, "destructive": _boolean, "idempotent": _boolean,
    "outputSchema": _output_schema, "secrets": _secrets, "confirm": _boolean,
}
# kept as written (tools/<name>/meta); `confirm`: a person's yes before each run (issue 48.2)
HINTS = ("title", "destructive", "idempotent", "outputSchema", "confirm")
FIELDS = tuple(_CHECKERS)


def _check_fields(obj: dict[str, Any], prefix: str, skip: tuple[str, ...]
                  ) -> tuple[dict[str, Any], dict[str, Any]]:
    fields: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    for k, v in obj.items():
        check = _CHECKERS.get(k)
        if check is None:
            if k not in skip:
                extra[k] = v
        elif type(v) is str and (check is _string or check is _text
                                 and len(v) <= MAX_TEXT_BYTES // 4):
            fields[k] = v                          # the common case, without a call
            fields[k] = v
        else:
            fields[k] = check(v, prefix + k)
    return fields, extra


def _match_value(key: str, v: Any, where: str) -> tuple[str, ...]:
    alts = [v] if isinstance(v, str) else v
    if not isinstance(alts, list) or not alts:
        raise MetaError(f"{where}: must be a string or a non-empty array of strings, "
                        f"not {json_kind(v) if v != [] else 'an empty array'}")
    for i, a in enumerate(alts):
        w = where if isinstance(v, str) else f"{where}[{i}]"
        if not isinstance(a, str) or not a:
            raise MetaError(f"{w}: must be a non-empty string")
        if key == "os" and a not in GOOS:
            raise MetaError(f"{w}: {json.dumps(a)} is not a Go GOOS name (linux, darwin, ...)")
        if key == "arch" and a not in GOARCH:
            raise MetaError(f"{w}: {json.dumps(a)} is not a Go GOARCH name (amd64, arm64, ...)")
        if key == "file" and not a.startswith("/"):
            raise MetaError(f"{w}: {json.dumps(a)} must be an absolute path")
        if key == "binary" and "/" in a and not a.startswith("/"):
            raise MetaError(f"{w}: {json.dumps(a)} must be a name looked up on $PATH "
                            "or an absolute path")
    return tuple(alts)


def _variant(v: Any, where: str) -> Variant:
    if not isinstance(v, dict):
        raise MetaError(f"{where}: must be an object, not {json_kind(v)}")
    if "variants" in v:
        raise MetaError(f"{where}.variants: variants cannot nest")
    m = v.get("match", {})
    if not isinstance(m, dict):
        raise MetaError(f"{where}.match: must be an object, not {json_kind(m)}")
    match = {}
    for k, val in m.items():
        if k not in MATCH_KEYS:
            raise MetaError(f"{where}.match: unknown condition {json.dumps(k)} "
                            f"(known: {', '.join(MATCH_KEYS)})")
        match[k] = _match_value(k, val, f"{where}.match.{k}")
    fields, extra = _check_fields(v, where + ".", ("match",))
    return Variant(match, fields, extra)


def parse_meta(data: bytes) -> MetaDef:
    """Parse and check the bytes of one `.meta`; raise MetaError with the reason."""
    if len(data) > MAX_META_BYTES:
        raise MetaError(f"too large: {len(data)} bytes, at most {MAX_META_BYTES}")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise MetaError(f"not UTF-8: byte 0x{data[e.start]:02x} at offset {e.start}") from None
    try:
        doc = _DECODER.decode(text)
    except json.JSONDecodeError as e:
        if not text.strip():
            raise MetaError("empty file") from None
        raise MetaError(f"line {e.lineno} column {e.colno}: {e.msg}") from None
    except _NotJSON as e:
        raise MetaError(f"{_constant_at(text, e.args[1])}{e.args[0]}") from None
    except RecursionError:
        raise MetaError("JSON nested too deeply") from None
    if not isinstance(doc, dict):
        raise MetaError(f"must be a JSON object, not {json_kind(doc)}")
    fields, extra = _check_fields(doc, "", ("variants",))
    raw = doc.get("variants", [])
    if not isinstance(raw, list):
        raise MetaError(f"variants: must be an array, not {json_kind(raw)}")
    variants = tuple(_variant(v, f"variants[{i}]") for i, v in enumerate(raw))
    return MetaDef(fields, extra, variants)


class _NotJSON(ValueError):
    pass


def _no_constant(name: str) -> None:
    raise _NotJSON(f"{name} is not valid JSON", name)


def _constant_at(text: str, name: str) -> str:
    """`line L column C: ` of the first `name` (NaN, Infinity, -Infinity) outside a
    string, as json's own errors give it (the decoder's hook is not told where)."""
    quoted = escaped = False
    for i, ch in enumerate(text):
        if quoted:
            escaped, quoted = (False, True) if escaped else (ch == "\\", ch != '"')
        elif ch == '"':
            quoted = True
        elif text.startswith(name, i):
            line = text.count("\n", 0, i) + 1
            return f"line {line} column {i - (text.rfind(chr(10), 0, i) + 1) + 1}: "
    return ""


_DECODER = json.JSONDecoder(parse_constant=_no_constant)


class MetaFile(Record):
    """One .meta as last read: its stat key (mtime_ns, size, inode) and its MetaDef, or
    None and the reason."""
    FIELDS = ("key", "meta", "error")

    def __init__(self, key: tuple[int, int, int], meta: MetaDef | None, error: str = "") -> None:
        self.key = key
        self.meta = meta
        self.error = error


def read_meta(path: str, st: os.stat_result) -> MetaFile:
    """Read and parse the .meta at `path` whose stat is `st`; never raises.  Were it
    rewritten between that stat and the read, its next event (or poll) finds a new stat
    key and reads it again."""
    key = (st.st_mtime_ns, st.st_size, st.st_ino)
    if not stat.S_ISREG(st.st_mode):
        return MetaFile(key, None, "not a regular file")
    if st.st_size > MAX_META_BYTES:
        return MetaFile(key, None, f"too large: {st.st_size} bytes, at most {MAX_META_BYTES}")
    try:
        # O_NONBLOCK and fstat: a FIFO swapped in after the stat never makes this wait
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        try:  # size + 1 (not the limit): a large buffer per file costs more than the read
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return MetaFile(key, None, "not a regular file")
            data = os.read(fd, st.st_size + 1)
            while len(data) != st.st_size and len(data) <= MAX_META_BYTES and \
                    (more := os.read(fd, 65536)):
                data += more
        finally:
            os.close(fd)
    except OSError as e:
        return MetaFile(key, None, f"cannot read: {e.strerror}")
    try:
        return MetaFile(key, parse_meta(data))
    except MetaError as e:
        return MetaFile(key, None, str(e))
    except Exception as e:  # a bug here must cost one file, not the registry
        logging.getLogger(__name__).exception("parsing %s", path)
        return MetaFile(key, None, f"internal error: {type(e).__name__}: {e}")


# --- args: JSON Schema validity --------------------------------------------------------

def check_schema(schema: dict[str, Any], where: str = "args") -> None:
    """Raise MetaError unless `schema` is valid for the JSON Schema draft it declares
    (2020-12 when it declares none)."""
    uri = schema.get("$schema")
    if uri is None:
        key = DRAFT_2020_12
    elif not isinstance(uri, str):
        raise MetaError(f"{where}.$schema: must be a string, not {json_kind(uri)}")
    else:
        key = draft_key(uri)
    if key in (DRAFT_2020_12, DRAFT_07) and _surely_valid(schema, 0):
        return
    canon = key + "\0" + json.dumps(schema, sort_keys=True)
    if canon not in _verdicts:
        if len(_verdicts) > 4096:
            _verdicts.clear()
        _verdicts[canon] = _slow_check(schema, key, uri)
    reason = _verdicts[canon]
    if reason is not None:
        raise MetaError(where + reason)


_verdicts: dict[str, str | None] = {}


def check_refs(schema: dict[str, Any], where: str = "args") -> None:
    """Raise MetaError naming the first `$ref` that would not resolve inside the schema
    (toolsrv never fetches one: schemaref.py), or a loop of refs."""
    refs = all_refs(schema)
    if not refs:
        return                  # most schemas: one walk, and nothing to resolve
    outside = outside_refs(schema, refs)
    if outside:
        raise MetaError(f"{where}: $ref to {outside[0]} {REASON}")
    if not any(ref.startswith("#") for _, ref in refs):
        return                  # ref_loop follows only pointers into the document
    loop = ref_loop(schema)
    if loop:
        raise MetaError(f"{where}: $refs loop without end: {' -> '.join(loop)} (validation "
                        "would never finish; break the loop)")


def _check_cost(schema: dict[str, Any], where: str) -> bool:
    """Raise MetaError when the schema costs past schemacost's bounds: checked before
    anything else walks it (jsonschema's check_schema costs far more per node).  Whether
    any of its objects has a ref key."""
    cost, has_refs = cost_and_refs(schema)
    if cost:
        raise MetaError(f"{where}: {cost}")
    return has_refs


def draft_key(uri: str) -> str:
    """A `$schema` URI with its scheme and empty fragment dropped (http/https alike)."""
    return uri.split("://", 1)[-1].rstrip("#")


def validator_class(schema: dict[str, Any]) -> Any:
    """jsonschema's validator class for the draft `schema` declares (2020-12 if none)."""
    uri = schema.get("$schema")
    return draft_validators()[draft_key(uri) if isinstance(uri, str) else DRAFT_2020_12]


def draft_validators() -> dict[str, Any]:
    """jsonschema's validator classes by `draft_key` of their meta-schema's URI."""
    global _drafts
    if _drafts is None:
        import jsonschema.validators as jv
        _drafts = {draft_key(c.ID_OF(c.META_SCHEMA) or ""): c for c in (
            jv.Draft3Validator, jv.Draft4Validator, jv.Draft6Validator, jv.Draft7Validator,
            jv.Draft201909Validator, jv.Draft202012Validator)}
    return _drafts


_drafts: dict[str, Any] | None = None


def _slow_check(schema: dict[str, Any], key: str, uri: str | None) -> str | None:
    """jsonschema's verdict: None when valid, else ".path: message"."""
    from jsonschema.exceptions import SchemaError
    cls = draft_validators().get(key)
    if cls is None:
        return (f".$schema: unknown JSON Schema draft {json.dumps(uri)}; omit it for "
                "2020-12 or name a draft (e.g. http://json-schema.org/draft-07/schema#)")
    try:
        cls.check_schema(schema)
    except SchemaError as e:
        msg = e.message if len(e.message) <= 200 else e.message[:197] + "..."
        return f"{json_path(e.absolute_path)}: {msg}"
    except Exception as e:  # a schema jsonschema chokes on is still just a broken file
        return f": not a usable JSON Schema ({type(e).__name__}: {e})"
    return None


_SIMPLE_TYPES = frozenset(("array", "boolean", "integer", "null", "number", "object", "string"))


def _is_number(v: Any) -> bool:
    return type(v) is int or type(v) is float


def _is_type(v: Any, depth: int) -> bool:
    if type(v) is str:
        return v in _SIMPLE_TYPES
    return type(v) is list and all(type(x) is str for x in v) \
        and 0 < len(v) == len(set(v) & _SIMPLE_TYPES)


def _is_required(v: Any, depth: int) -> bool:
    return type(v) is list and all(type(x) is str for x in v) and len(set(v)) == len(v)


def _compiles(pattern: str) -> bool:
    """jsonschema's check of format "regex" is re.compile; the same here."""
    try:
        re.compile(pattern)
    except (re.error, RecursionError, OverflowError):
        return False
    return True


def _is_schema_map(v: Any, depth: int) -> bool:
    return type(v) is dict and all(_surely_valid(x, depth + 1) for x in v.values())


def _is_schema_list(v: Any, depth: int) -> bool:
    return type(v) is list and len(v) > 0 and all(_surely_valid(x, depth + 1) for x in v)


# Per keyword, what the meta-schemas (both drafts) require, or something stricter: a
# type the value must have exactly, or a check.
_TYPED: dict[str, type] = {
    **dict.fromkeys(("title", "description", "$comment", "format"), str),
    **dict.fromkeys(("uniqueItems", "readOnly", "writeOnly", "deprecated"), bool),
    **dict.fromkeys(("enum", "examples"), list),
}
_RULES: dict[str, Callable[[Any, int], bool]] = {
    **dict.fromkeys(("default", "const"), lambda v, d: True),
    **dict.fromkeys(("minLength", "maxLength", "minItems", "maxItems", "minProperties",
                     "maxProperties"), lambda v, d: type(v) is int and v >= 0),
    **dict.fromkeys(("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"),
                    lambda v, d: _is_number(v)),
    "multipleOf": lambda v, d: _is_number(v) and v > 0,
    "pattern": lambda v, d: type(v) is str and _compiles(v),   # format "regex": re.compile
    "type": _is_type,
    "required": _is_required,
    **dict.fromkeys(("items", "additionalProperties", "not"),
                    lambda v, d: _surely_valid(v, d + 1)),
    **dict.fromkeys(("properties", "$defs", "definitions"), _is_schema_map),
    **dict.fromkeys(("anyOf", "oneOf", "allOf"), _is_schema_list),
}


# Every keyword the 2020-12 or draft-07 meta-schemas constrain: one not handled above
# sends the schema to jsonschema.  Keywords outside this set are unconstrained there.
VOCABULARY = frozenset((
    "$anchor $comment $defs $dynamicAnchor $dynamicRef $id $recursiveAnchor $recursiveRef "
    "$ref $schema $vocabulary additionalItems additionalProperties allOf anyOf const "
    "contains contentEncoding contentMediaType contentSchema default definitions "
    "dependencies dependentRequired dependentSchemas deprecated description else enum "
    "examples exclusiveMaximum exclusiveMinimum format if items maxContains maxItems "
    "maxLength maxProperties maximum minContains minItems minLength minProperties minimum "
    "multipleOf not oneOf pattern patternProperties prefixItems properties propertyNames "
    "readOnly required then title type unevaluatedItems unevaluatedProperties uniqueItems "
    "writeOnly").split())


def _surely_valid(s: Any, depth: int) -> bool:
    """True only if `s` is certainly valid under both the 2020-12 and draft-07
    meta-schemas; False means "ask jsonschema"."""
    if s is True or s is False:
        return True
    if type(s) is not dict or depth > 32:
        return False
    for k, v in s.items():
        t = _TYPED.get(k)
        if t is not None:
            if type(v) is not t:
                return False
        elif k == "type" and type(v) is str:
            if v not in _SIMPLE_TYPES:
                return False
        elif (rule := _RULES.get(k)) is not None:
            if not rule(v, depth):
                return False
        elif k in VOCABULARY and (k != "$schema" or depth > 0):
            return False  # constrained by the meta-schema, not handled here
    return True
