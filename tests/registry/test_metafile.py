"""One .meta file: parsing, type checks, unknown fields, args schema validity."""

import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft7Validator, Draft202012Validator
from jsonschema.exceptions import SchemaError

from toolsrv.registry import metafile
from toolsrv.registry.metafile import MetaError, parse_meta

DRAFT7 = "http://json-schema.org/draft-07/schema#"


def meta(**fields):
    return json.dumps(fields).encode()


# (file bytes, the reason tools/errors shows)
BROKEN = [
    (b"", "empty file"),
    (b"  \n", "empty file"),
    (b"\xff{}", "not UTF-8: byte 0xff at offset 0"),
    (b'{\n  "description": "x"\n  "tier": "hot"\n}', "line 3 column 3: Expecting ',' delimiter"),
    (b'{"description": "x",}', "line 1 column 21: "),  # wording varies by Python version
    (b'{"x": NaN}', "line 1 column 7: NaN is not valid JSON"),
    (b'{"s": "NaN \\" Infinity",\n "b": [1, -Infinity]}',
     "line 2 column 11: -Infinity is not valid JSON"),              # not inside a string
    (b"[]", "must be a JSON object, not an array"),
    (b'"tool"', "must be a JSON object, not a string"),
    (meta(description=3), "description: must be a string, not a number"),
    (meta(prompt=None), "prompt: must be a string, not null"),
    (meta(keywords="grep"), "keywords: must be an array of strings, not a string"),
    (meta(keywords=["a", 1]), "keywords[1]: must be a string, not a number"),
    (meta(tier="hotter"), 'tier: must be one of hot, warm, cold, not "hotter"'),
    (meta(tier=1), "tier: must be one of hot, warm, cold, not 1"),
    (meta(cmd=""), "cmd: must not be empty"),
    (meta(cmd=["rg"]), "cmd: must be a string, not an array"),
    (meta(scope=1), "scope: must be a string, not a number"),
    (meta(outputFormat=True), "outputFormat: must be a string, not a boolean"),
    (meta(resetsCounter="yes"), "resetsCounter: must be a boolean, not a string"),
    (meta(readOnly=1), "readOnly: must be a boolean, not a number"),
    (meta(args=[]), "args: must be an object (a JSON Schema), not an array"),
    (meta(args={"type": "object", "properties": {"path": {"type": "strin"}}}),
     "args.properties.path.type: 'strin' is not valid under any of the given schemas"),
    (meta(args={"type": "object", "required": "path"}),
     "args.required: 'path' is not of type 'array'"),
    (meta(args={"properties": {"a b": {"pattern": "("}}}),
     "args.properties[\"a b\"].pattern: '(' is not a 'regex'"),
    (meta(args={"$schema": DRAFT7, "properties": {"a": {"minLength": -1}}}),
     "args.properties.a.minLength: -1 is less than the minimum of 0"),
    (meta(args={"$schema": "https://example.com/my-draft"}),
     'args.$schema: unknown JSON Schema draft "https://example.com/my-draft"'),
    (meta(args={"$schema": 7}), "args.$schema: must be a string, not a number"),
    (meta(args={"type": "string"}),
     'args.type: must be "object" (a tool reads one JSON object on stdin), not "string"'),
    (meta(variants="x"), "variants: must be an array, not a string"),
    (meta(variants=[1]), "variants[0]: must be an object, not a number"),
    (meta(variants=[{"match": []}]), "variants[0].match: must be an object, not an array"),
    (meta(variants=[{"match": {"distro": "debian"}}]),
     'variants[0].match: unknown condition "distro" (known: binary, file, os, arch, env, nenv)'),
    (meta(variants=[{"match": {"os": "Linux"}}]),
     'variants[0].match.os: "Linux" is not a Go GOOS name'),
    (meta(variants=[{"match": {"arch": ["amd64", "x86_64"]}}]),
     'variants[0].match.arch[1]: "x86_64" is not a Go GOARCH name'),
    (meta(variants=[{"match": {"file": "var/log/syslog"}}]),
     'variants[0].match.file: "var/log/syslog" must be an absolute path'),
    (meta(variants=[{"match": {"binary": "bin/rg"}}]),
     'variants[0].match.binary: "bin/rg" must be a name looked up on $PATH or an absolute path'),
    (meta(variants=[{"match": {"env": []}}]),
     "variants[0].match.env: must be a string or a non-empty array of strings, not an empty"),
    (meta(variants=[{"match": {"nenv": ["A", 2]}}]),
     "variants[0].match.nenv[1]: must be a non-empty string"),
    (meta(variants=[{"variants": []}]), "variants[0].variants: variants cannot nest"),
    (meta(variants=[{"match": {}}, {"cmd": 3}]), "variants[1].cmd: must be a string, not a number"),
    (meta(variants=[{"args": {"properties": {"n": {"type": "int"}}}}]),
     "variants[0].args.properties.n.type: 'int' is not valid under any of the given schemas"),
    (b"{" + b" " * metafile.MAX_META_BYTES + b"}", "too large: 1048578 bytes, at most 1048576"),
]


@pytest.mark.parametrize("data,reason", BROKEN, ids=[r for _, r in BROKEN])
def test_broken_meta_reason(data, reason):
    with pytest.raises(MetaError) as e:
        parse_meta(data)
    assert str(e.value).startswith(reason)
    assert "\n" not in str(e.value)


def test_defaults_and_known_fields():
    m = parse_meta(b"{}")
    assert (m.fields, m.extra, m.variants) == ({}, {}, ())
    m = parse_meta(meta(description="d", prompt="p", keywords=["k"], tier="warm", cmd="rg",
                        scope="read", outputFormat="text", resetsCounter=True, readOnly=True,
                        args={"type": "object"}, resident=True, title="T", destructive=True,
                        idempotent=False, outputSchema={"type": "object"},
                        secrets=["GITHUB_TOKEN"], confirm=True))
    assert m.fields["tier"] == "warm" and m.fields["keywords"] == ("k",)
    assert set(m.fields) == set(metafile.FIELDS)


def test_resident_defaults_and_checks():
    """Issue 17: `true`, or {"protocol", "idle", "tool"} with lines, 300 s, the name."""
    assert parse_meta(meta(resident=True)).fields["resident"] == {
        "protocol": "lines", "idle": 300.0, "tool": None}
    assert parse_meta(meta(resident=False)).fields["resident"] is None
    r = parse_meta(meta(resident={"protocol": "mcp", "idle": 5, "tool": "get_time"}))
    assert r.fields["resident"] == {"protocol": "mcp", "idle": 5.0, "tool": "get_time"}
    for bad, words in ((1, "resident: must be true, false or an object, not a number"),
                       ({"protocol": "grpc"}, "resident.protocol: must be one of lines, mcp"),
                       ({"idle": 0}, "resident.idle: must be a number of seconds above 0"),
                       ({"idle": True}, "resident.idle: must be a number"),
                       ({"tool": ""}, "resident.tool: must be a non-empty string"),
                       ({"procotol": "mcp"}, "resident.procotol: unknown field")):
        with pytest.raises(MetaError, match=re.escape(words)):
            parse_meta(meta(resident=bad))


def test_unknown_fields_are_kept_not_rejected():
    m = parse_meta(meta(description="d", name="ignored", **{"x-owner": {"team": "infra"}},
                        variants=[{"match": {"os": "linux"}, "cmd": "a", "note": 1}]))
    assert m.extra == {"name": "ignored", "x-owner": {"team": "infra"}}
    assert m.variants[0].extra == {"note": 1}
    fields, extra = m.effective(0)
    assert fields == {"description": "d", "cmd": "a"}
    assert extra == {"name": "ignored", "x-owner": {"team": "infra"}, "note": 1}


def test_variant_fields_override_and_unset_inherit():
    m = parse_meta(meta(description="top", cmd="top", tier="cold",
                        variants=[{"match": {"env": "X"}, "cmd": "v0", "tier": "hot"},
                                  {"description": "v1"}]))
    assert m.variants[0].match == {"env": ("X",)}
    assert m.variants[1].match == {}
    assert m.effective(0)[0] == {"description": "top", "cmd": "v0", "tier": "hot"}
    assert m.effective(1)[0] == {"description": "v1", "cmd": "top", "tier": "cold"}
    assert m.effective(None)[0] == {"description": "top", "cmd": "top", "tier": "cold"}


def test_utf8_bom_and_non_ascii():
    m = parse_meta("\ufeff{\"description\": \"Größe prüfen\"}".encode())
    assert m.fields["description"] == "Größe prüfen"


def test_schema_drafts_declared():
    for uri in (DRAFT7, "http://json-schema.org/draft-07/schema",
                "https://json-schema.org/draft/2020-12/schema",
                "http://json-schema.org/draft-04/schema#",
                "https://json-schema.org/draft/2019-09/schema"):
        parse_meta(meta(args={"$schema": uri, "type": "object"}))
    # draft-04 rules apply when declared: exclusiveMinimum is a boolean there
    parse_meta(meta(args={"$schema": "http://json-schema.org/draft-04/schema#",
                          "properties": {"n": {"minimum": 1, "exclusiveMinimum": True}}}))
    with pytest.raises(MetaError, match="exclusiveMinimum"):
        parse_meta(meta(args={"properties": {"n": {"minimum": 1, "exclusiveMinimum": True}}}))


def test_slow_path_verdicts_are_memoised(monkeypatch):
    bad = {"properties": {"x": {"type": "nope"}}, "$comment": "memo-test"}
    with pytest.raises(MetaError) as first:
        metafile.check_schema(bad)
    monkeypatch.setattr(metafile, "_slow_check", lambda *a: pytest.fail("not memoised"))
    with pytest.raises(MetaError) as second:
        metafile.check_schema(bad, "variants[2].args")
    assert str(second.value) == "variants[2]." + str(first.value)


def _meta_keywords(validator):
    from jsonschema_specifications import REGISTRY
    base = validator.META_SCHEMA
    keys = set(base.get("properties", {}))
    for uri in REGISTRY:
        if "2020-12/meta/" in uri and validator is Draft202012Validator:
            keys |= set(REGISTRY[uri].contents.get("properties", {}))
    return keys


@pytest.mark.parametrize("validator", [Draft202012Validator, Draft7Validator])
def test_fast_path_knows_every_meta_schema_keyword(validator):
    # A keyword missing from VOCABULARY would be waved through unchecked.
    assert _meta_keywords(validator) <= metafile.VOCABULARY


_values = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.floats(-2, 2),
                    st.sampled_from(["string", "object", "x", "", "integer", "(", "a"]),
                    st.lists(st.sampled_from(["a", "string", "number", "a"]), max_size=3))
_keywords = st.sampled_from(sorted(
    {"type", "required", "properties", "items", "enum", "description", "title", "default",
     "minimum", "maxLength", "minItems", "multipleOf", "uniqueItems", "anyOf", "not",
     "additionalProperties", "format", "examples", "const", "readOnly", "deprecated",
     "$defs", "pattern", "x-extension", "$ref"}))
_schemas = st.recursive(
    st.dictionaries(_keywords, _values, max_size=4),
    lambda inner: st.one_of(
        st.dictionaries(_keywords, st.one_of(_values, inner, st.lists(inner, max_size=2),
                                             st.dictionaries(st.text("ab", max_size=2),
                                                             inner, max_size=2)),
                        max_size=4),
        st.booleans()),
    max_leaves=8)


# Mostly well-typed schemas, a few values off: the fast path must accept the valid ones
# it can and never one that jsonschema rejects.
_types = st.sampled_from(["string", "object", "integer", "number", "array", "boolean", "null",
                          "strin"])
_leaf = {
    "type": st.one_of(_types, st.lists(_types, max_size=3)),
    "required": st.lists(st.sampled_from(["a", "b", "c"]), max_size=3),
    "description": st.one_of(st.text(max_size=3), st.integers()),
    "minimum": st.one_of(st.integers(), st.floats(allow_nan=False), st.just("1")),
    "maxLength": st.one_of(st.integers(-1, 3), st.just(1.0)),
    "multipleOf": st.one_of(st.integers(-1, 2), st.floats(0, 1)),
    "uniqueItems": st.one_of(st.booleans(), st.none()),
    "enum": st.one_of(st.lists(st.integers(), max_size=2), st.none()),
    "format": st.one_of(st.sampled_from(["uri", "date"]), st.integers()),
    "default": st.integers(),
    "pattern": st.sampled_from(["^a", "("]),
    "x-extension": st.integers(),
}


def _shaped(inner):
    nested = {
        "properties": st.dictionaries(st.sampled_from(["a", "b"]), inner, max_size=2),
        "items": inner, "not": inner, "additionalProperties": inner,
        "anyOf": st.lists(inner, max_size=2), "$defs": st.dictionaries(st.just("d"), inner),
    }
    both = {**_leaf, **nested}
    pairs = st.sampled_from(sorted(both)).flatmap(lambda k: st.tuples(st.just(k), both[k]))
    return st.lists(pairs, max_size=4).map(dict)


_shaped_schemas = st.recursive(st.lists(st.sampled_from(sorted(_leaf)).flatmap(
    lambda k: st.tuples(st.just(k), _leaf[k])), max_size=3).map(dict),
    lambda inner: st.one_of(_shaped(inner), st.booleans()), max_leaves=10)


@settings(max_examples=150, deadline=None)
@given(st.one_of(_schemas, _shaped_schemas),
       st.sampled_from([Draft202012Validator, Draft7Validator]))
def test_fast_path_only_accepts_valid_schemas(schema, validator):
    if metafile._surely_valid(schema, 0):
        try:
            validator.check_schema(schema)
        except SchemaError as e:
            pytest.fail(f"fast path accepted an invalid schema: {e.message}")


_json = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-2, 2), st.sampled_from(["", "a", "/x"])),
    lambda inner: st.one_of(st.lists(inner, max_size=2),
                            st.dictionaries(st.sampled_from(["a", "type"]), inner, max_size=2)),
    max_leaves=4)
_variant = st.dictionaries(st.sampled_from(["match", "cmd", "tier", "variants"]), st.one_of(
    _json, st.dictionaries(st.sampled_from(list(metafile.MATCH_KEYS) + ["y"]), _json,
                           max_size=2)), max_size=2)
_docs = st.dictionaries(st.sampled_from(list(metafile.FIELDS) + ["variants", "x"]),
                        st.one_of(_json, st.lists(_variant, max_size=2)), max_size=4)


@settings(max_examples=100, deadline=None)
@given(st.one_of(_docs.map(lambda d: json.dumps(d).encode()), st.binary(max_size=40)))
def test_any_input_parses_or_raises_meta_error(data):
    try:
        parse_meta(data)
    except MetaError as e:
        assert str(e) and "\n" not in str(e)


@pytest.mark.parametrize("field, value, why", [
    ("title", 3, "title: must be a string"),
    ("destructive", "yes", "destructive: must be a boolean"),
    ("idempotent", 1, "idempotent: must be a boolean"),
    ("outputSchema", [], "outputSchema: must be an object (a JSON Schema), not an array"),
    ("outputSchema", {"type": "string"}, 'outputSchema.type: must be "object"'),
    ("outputSchema", {"type": "object", "properties": 3}, "outputSchema"),
])
def test_the_mcp_hint_fields_are_checked(field, value, why):
    with pytest.raises(metafile.MetaError) as e:
        parse_meta(meta(**{field: value}))
    assert why in str(e.value)


@pytest.mark.parametrize("value, why", [
    ("TOKEN", "secrets: must be an array of names, not a string"),
    ([3], "secrets[0]: 3 is not an environment variable name"),
    (["1TOKEN"], "secrets[0]: '1TOKEN' is not an environment variable name"),
    (["A", "B-C"], "secrets[1]: 'B-C' is not"),
    (["../x"], "is not an environment variable name"),
    (["X" * 129], "is not an environment variable name"),
    (["A", "A"], "secrets[1]: 'A' named twice"),
    (["PATH"], "secrets[0]: 'PATH' is reserved"),
    (["PYTHONPATH"], "'PYTHONPATH' is reserved"),
    (["LD_PRELOAD"], "reserved"), (["OLLIE_AGENT"], "reserved"), (["LC_ALL"], "reserved"),
    ([f"S{i}" for i in range(33)], "secrets: 33 names, at most 32"),
])
def test_secrets_are_distinct_environment_names_none_reserved(value, why):
    """Issue 50: a `.meta`'s secrets name environment variables (and files of the secrets
    directory); a bad one is the file's error, as any bad field is."""
    with pytest.raises(metafile.MetaError) as e:
        parse_meta(meta(secrets=value))
    assert why in str(e.value)
    assert parse_meta(meta(secrets=["GITHUB_TOKEN", "_x9"])).fields["secrets"] == (
        "GITHUB_TOKEN", "_x9")
    v = parse_meta(meta(variants=[{"match": {"os": "linux"}, "secrets": ["A_B"]}]))
    assert v.variants[0].fields["secrets"] == ("A_B",)


@pytest.mark.parametrize("field", ["description", "prompt"])
def test_prose_is_at_most_64_kib_of_utf8(field):
    limit = metafile.MAX_TEXT_BYTES
    assert parse_meta(json.dumps({field: "a" * limit}).encode()).fields[field] == "a" * limit
    with pytest.raises(MetaError, match=rf"^{field}: too long: {limit + 1} bytes, at most "
                       rf"{limit} \(64 KiB\)"):
        parse_meta(json.dumps({field: "a" * (limit + 1)}).encode())
    # bytes, not characters: 3 bytes each
    with pytest.raises(MetaError, match=rf"^{field}: too long: {3 * (limit // 2)} bytes"):
        parse_meta(json.dumps({field: "\u20ac" * (limit // 2)}).encode())
    with pytest.raises(MetaError, match=rf"^variants\[0\]\.{field}: too long"):
        parse_meta(json.dumps({"variants": [{field: "a" * (limit + 1)}]}).encode())


def test_keywords_are_at_most_64_kib_in_all():
    limit = metafile.MAX_TEXT_BYTES
    parse_meta(json.dumps({"keywords": ["a" * (limit // 2)] * 2}).encode())
    with pytest.raises(MetaError, match=rf"^keywords: too long: {limit + 1} bytes in all"):
        parse_meta(json.dumps({"keywords": ["a" * (limit // 2)] * 2 + ["b"]}).encode())
