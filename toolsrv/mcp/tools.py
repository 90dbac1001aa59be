"""A listed tool and a call's result, as MCP spells them (no SDK types: server.py makes
those), from what the tree says: tools/<name>/meta and the bytes a call read back.

Theory of operation.  `tool_of` reads a tool's resolved `.meta` JSON: its description
then its prompt, its `args` as an object schema (`object_schema`), and annotations
derived from facts: `readOnlyHint` from `readOnly`, `destructiveHint`/`idempotentHint`
from the .meta's `destructive`/`idempotent`, `title` from its `title` or the name, and
`openWorldHint` from whether the sandbox profile its calls run under has a network;
`icons` from its `icons` (`icons`: the entries MCP's Icon allows).
`call_result` turns a call's stdout into content (and structuredContent, when the tool
declares an outputSchema and printed a JSON object that fits it).
"""
from __future__ import annotations

import json
from typing import Any, Callable

SEARCH_TOOL, CALL_TOOL = "search_tools", "call_tool"
SEARCH_LIMIT = 10
META = "meta"       # the tier of the search mode's two tools (a .meta's is hot, warm or cold)


class Tool:
    """One listed tool, from tools/index and tools/<name>/meta."""
    __slots__ = ("name", "description", "schema", "read_only", "tier", "title",
                 "destructive", "idempotent", "output_schema", "open_world", "prompt",
                 "icons")

    def __init__(self, name: str, description: str, schema: dict[str, Any],
                 read_only: bool = False, tier: str = "", *, title: str | None = None,
                 destructive: bool | None = None, idempotent: bool | None = None,
                 output_schema: dict[str, Any] | None = None,
                 open_world: bool | None = None, prompt: str = "",
                 icons: list[dict[str, Any]] | None = None) -> None:
        self.name, self.description, self.schema = name, description, schema
        self.read_only, self.tier = read_only, tier
        self.title, self.destructive, self.idempotent = title, destructive, idempotent
        self.output_schema, self.open_world, self.prompt = output_schema, open_world, prompt
        self.icons = icons or []

    def wire(self) -> dict[str, Any]:
        """The tool as MCP's tools/list spells it: annotations from what toolsrv knows
        (readOnly, the .meta's destructive/idempotent/title, the profile's network)."""
        title = self.title or self.name
        out: dict[str, Any] = {"name": self.name, "title": title,
                               "description": self.description, "inputSchema": self.schema}
        ann: dict[str, Any] = {"title": title, "readOnlyHint": self.read_only}
        if not self.read_only:          # the spec: meaningful only when not read-only
            if self.destructive is not None:
                ann["destructiveHint"] = self.destructive
            if self.idempotent is not None:
                ann["idempotentHint"] = self.idempotent
        if self.open_world is not None:
            ann["openWorldHint"] = self.open_world
        out["annotations"] = ann
        if self.output_schema is not None:
            out["outputSchema"] = self.output_schema
        if self.icons:
            out["icons"] = self.icons
        return out


def tool_of(name: str, meta: dict[str, Any], tier: str = "",
            open_world: Callable[[str], bool | None] | None = None,
            profile: str = "default") -> Tool:
    """A Tool from the JSON of tools/<name>/meta: its description, then its prompt (the
    model-facing documentation) when it has one; its args schema, as an object schema;
    `open_world(profile)` says whether the profile its calls run under has a network
    (the tool's own `sandbox`, else the session's `profile`)."""
    desc = str(meta.get("description") or "").strip()
    prompt = str(meta.get("prompt") or "").strip()
    if prompt and prompt != desc:
        desc = f"{desc}\n\n{prompt}" if desc else prompt
    extra = e if isinstance(e := meta.get("extra"), dict) else {}
    declared = extra.get("sandbox")
    out = meta.get("outputSchema")

    def flag(k: str) -> bool | None:
        v = meta.get(k)
        return v if isinstance(v, bool) else None
    return Tool(name, desc, object_schema(meta.get("args")), bool(meta.get("readOnly")), tier,
                title=meta["title"] if isinstance(meta.get("title"), str) else None,
                destructive=flag("destructive"), idempotent=flag("idempotent"),
                output_schema=out if isinstance(out, dict) else None, prompt=prompt,
                icons=icons(meta.get("icons", extra.get("icons"))),
                open_world=open_world(declared if isinstance(declared, str) else profile)
                if open_world else None)


ICON_KEYS = {"src": str, "mimeType": str, "sizes": list, "theme": str}
ICONS_MAX = 8


def icons(v: Any) -> list[dict[str, Any]]:
    """A `.meta` `icons` field as MCP's Tool.icons: the entries whose `src` is an https,
    http or data URI and whose other fields have MCP's types (mimeType, sizes of strings,
    theme light or dark), ICONS_MAX at most; anything else is left out, never guessed."""
    out: list[dict[str, Any]] = []
    for i in v if isinstance(v, list) else []:
        if not isinstance(i, dict) or not isinstance(i.get("src"), str) or \
                not i["src"].startswith(("https:", "http:", "data:")):
            continue
        kept = {k: i[k] for k in ICON_KEYS if isinstance(i.get(k), ICON_KEYS[k])}
        if "sizes" in kept and not all(isinstance(x, str) for x in kept["sizes"]) or \
                kept.get("theme", "light") not in ("light", "dark"):
            continue
        out.append(kept)
    return out[:ICONS_MAX]


def object_schema(schema: Any) -> dict[str, Any]:
    """An args schema as MCP's inputSchema (`"type": "object"`, which clients rely on):
    as written when it says so; `"type": ["object", ...]` (which .meta allows) as
    `"type": "object"` with everything else kept; no type at all, an object schema with
    the rest kept; anything else (not an object schema) one that takes any object."""
    if not isinstance(schema, dict):
        return {"type": "object", "properties": {}}
    t = schema.get("type", "object")
    if t == "object":
        return schema if "type" in schema else {"type": "object", **schema}
    if isinstance(t, list) and "object" in t:
        return {**schema, "type": "object"}
    return {"type": "object", "properties": {}}


SEARCH_TOOLS = [
    Tool(SEARCH_TOOL, "Find the tools for a need, described in words. Returns the best "
         "matching tools, best first, each with its name, score, description and "
         "inputSchema; call one with call_tool.",
         {"type": "object", "properties": {
             "need": {"type": "string", "description": "what you want to do, in words"},
             "limit": {"type": "integer", "minimum": 1, "maximum": 100,
                       "description": f"how many tools at most (default {SEARCH_LIMIT})"}},
          "required": ["need"], "additionalProperties": False}, read_only=True,
         title="Search the tools",
         output_schema={"type": "object", "required": ["tools"], "properties": {
             "tools": {"type": "array", "items": {
                 "type": "object", "required": ["name", "description", "inputSchema"],
                 "properties": {"name": {"type": "string"}, "score": {"type": "number"},
                                "description": {"type": "string"},
                                "inputSchema": {"type": "object"}}}}}}, tier=META),
    Tool(CALL_TOOL, "Call a tool found with search_tools, by name, with its arguments "
         "(an object valid against that tool's inputSchema).",
         {"type": "object", "properties": {
             "name": {"type": "string", "description": "the tool's name"},
             "arguments": {"type": "object", "description": "the tool's arguments"}},
          "required": ["name"], "additionalProperties": False}, tier=META),
]


def closest(name: str, names: list[str], n: int = 5) -> str:
    """The tools whose names are closest to `name`, said for a model to pick from."""
    import difflib
    near = difflib.get_close_matches(name, names, n=n, cutoff=0.5)
    near += [t for t in names if name.lower() in t.lower() and t not in near][:n - len(near)]
    if not near:
        return "no tool has a name like it (search_tools finds tools by what they do)"
    return "the closest: " + ", ".join(near) + " (search_tools finds tools by what they do)"


def error_result(why: str, log_line: str = "") -> dict[str, Any]:
    """An isError result: toolsrv's error string, and its log line when there is one."""
    text = why if not log_line else f"{why}\nlog: {log_line}"
    return {"content": [{"type": "text", "text": text}], "isError": True}


def call_result(out: bytes, tool: Tool | None = None) -> dict[str, Any]:
    """A tool's stdout as an MCP result: text content, or, when the output is a JSON
    object with a `content` list, that object passed through (its content blocks, and
    its isError and structuredContent when present); server.py checks its shape.  A
    tool that declares an outputSchema and prints a JSON object gets it back as
    structuredContent too, once it fits the schema; output that does not fit is an
    error result saying where."""
    text = out.decode(errors="replace")
    obj = None
    if text.lstrip().startswith("{"):
        try:
            obj = json.loads(text)
        except ValueError:
            obj = None
        if isinstance(obj, dict) and isinstance(obj.get("content"), list):
            res: dict[str, Any] = {"content": obj["content"],
                                   "isError": obj.get("isError") is True}
            if isinstance(obj.get("structuredContent"), dict):
                res["structuredContent"] = obj["structuredContent"]
            res["_text"] = text                 # the fallback, should the shape be wrong
            return res
    schema = tool.output_schema if tool is not None else None
    if schema is None:
        return {"content": [{"type": "text", "text": text}], "isError": False}
    if not isinstance(obj, dict):
        return error_result(f"output: {tool.name} declares an outputSchema, but printed "  # type: ignore[union-attr]
                            f"no JSON object: {text[:200]}")
    why = misfit(schema, obj)
    if why:
        return error_result(f"output does not fit {tool.name}'s outputSchema: {why}\n"  # type: ignore[union-attr]
                            f"{text[:2000]}")
    return {"content": [{"type": "text", "text": text}], "structuredContent": obj,
            "isError": False}


def misfit(schema: dict[str, Any], value: Any) -> str:
    """Why `value` does not fit `schema` ("" when it does), with the validator the
    server builds for args (tree/calls/jsonargs.py: it resolves no $ref outside the schema)."""
    from ..tree.calls.jsonargs import error_path, validator
    v = validator(schema)
    if v.is_valid(value):
        return ""
    from jsonschema.exceptions import best_match
    err = best_match(v.iter_errors(value))
    if err is None:
        return "not valid"
    where = error_path(err)
    return (f"{where}: " if where else "") + err.message
