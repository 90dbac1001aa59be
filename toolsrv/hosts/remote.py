"""A tool another host serves, as this server's registry holds it: `NAME.TOOL`.

Theory of operation.  An import (imports.py) reads the remote's tools/index and each
tool's meta, schema and prompt, and makes a `RemoteTool` of them: a registry Tool whose
texts are the remote's bytes as served (its variants were evaluated on its host), whose
`remote` is the import that runs its calls, and which holds nothing this host acts on by
itself.  What the remote sent is data only: the command is never resolved or run here
(calls.py hands a tool with `remote` to its import), no resident or warm setting and no
sandbox name is taken from it (`extra` stays empty), nor its `secrets` (the remote reads
its own for its run; the front sends it no value), and no path in it is opened.  The
schema is used as the local validator's input, which resolves no reference (jsonargs).

Everything is checked and bounded before it is served: names (registry/names.py), each
text's size (MAX_TEXT), the JSON values a tool keeps (MAX_NODES), and the fields' types;
a tool that fails is left out and its reason is a tools/errors line.  Of the meta only the
fields this host uses are kept (KEPT): the rest is in the served text alone, whose bytes
count.  An import's tools together keep at most IMPORT_BYTES of text and IMPORT_NODES
JSON values (`Budget`): a remote's `{}` is a few bytes on the wire and ~70 in memory.
"""
from __future__ import annotations

import json
from typing import Any

from ..registry.metafile import HINTS, MetaError, check_args
from ..registry.names import NAME_MAX, valid_name
from ..registry.resolve import Command, Tool

MAX_TEXT = 1 << 20          # bytes of a remote tool's meta, schema or prompt
MAX_NODES = 50_000          # JSON values of one tool's schema and kept meta fields
MAX_TOOLS = 10000           # tools one import serves
IMPORT_BYTES = 32 << 20     # bytes of the texts all of one import's tools keep
IMPORT_NODES = 500_000      # JSON values all of one import's tools keep
KEPT = ("description", "keywords", "tier", "readOnly", "resetsCounter", "cmd", "scope",
        "outputFormat") + HINTS       # the meta fields a RemoteTool keeps (meta_json)
TIERS = ("hot", "warm", "cold")


class BadRemoteTool(ValueError):
    """What is wrong with a tool the remote served."""


def local_name(prefix: str, tool: str) -> str:
    """NAME.TOOL, checked: both plain names, together short enough."""
    if not valid_name(tool):
        raise BadRemoteTool(f"bad tool name {tool[:40]!r}")
    name = f"{prefix}.{tool}"
    if len(name) > NAME_MAX:
        raise BadRemoteTool(f"{name[:40]}...: name longer than {NAME_MAX} characters")
    return name


class RemoteTool(Tool):
    """A Tool served by an import; `remote` is the import, `remote_name` its name there,
    `cost` the (bytes, JSON values) it keeps."""
    remote: Any                 # the hosts.imports.Import (it imports this module)
    remote_name: str
    source: str
    cost: tuple[int, int]

    def meta_json(self) -> dict[str, Any]:
        """The remote's meta as far as it is kept (KEPT), with the schema as `args`."""
        return {**self.__dict__["_meta"], "args": self.schema}


class Budget:
    """What one load of an import's tools has kept so far, against IMPORT_BYTES and
    IMPORT_NODES."""

    def __init__(self) -> None:
        self.bytes = self.nodes = 0
        self.most = (IMPORT_BYTES, IMPORT_NODES)

    def take(self, t: RemoteTool) -> bool:
        """Count t in, or False (nothing counted) when it would pass either bound."""
        b, n = t.cost
        if self.bytes + b > self.most[0] or self.nodes + n > self.most[1]:
            return False
        self.bytes, self.nodes = self.bytes + b, self.nodes + n
        return True

    def left_out(self, tool: str, after: int) -> str:
        """The tools/errors reason of the import when `tool`, and the `after` tools after
        it in its index, are left out."""
        return (f"its tools' metadata passes the import's budget of {self.most[0]} bytes "
                f"and {self.most[1]} JSON values at {tool}: it and the {after} tools after "
                "it are not imported")


def nodes(value: Any, most: int) -> int:
    """The JSON values in `value`, itself included (a key goes with its value); the
    count stops once it passes `most`."""
    n, todo = 0, [value]
    while todo and n <= most:
        v = todo.pop()
        n += 1
        if isinstance(v, dict):
            todo.extend(v.values())
        elif isinstance(v, list):
            todo.extend(v)
    return n


def _str(meta: dict, key: str, default: str = "") -> str:
    v = meta.get(key, default)
    if not isinstance(v, str):
        raise BadRemoteTool(f"meta field {key!r} is not a string")
    return v


def make(prefix: str, tool: str, remote: Any, where: str, meta_text: bytes,
         schema_text: bytes, prompt_text: bytes) -> RemoteTool:
    """The RemoteTool of the remote's three texts; raises BadRemoteTool."""
    name = local_name(prefix, tool)
    for what, text in (("meta", meta_text), ("schema", schema_text), ("prompt", prompt_text)):
        if len(text) > MAX_TEXT:
            raise BadRemoteTool(f"{what} longer than {MAX_TEXT} bytes")
    try:
        meta = json.loads(meta_text)
        schema = json.loads(schema_text)
        prompt = prompt_text.decode()
    except (ValueError, UnicodeDecodeError) as e:
        raise BadRemoteTool(f"unreadable meta or schema: {str(e)[:80]}") from None
    if not isinstance(meta, dict) or not isinstance(schema, dict):
        raise BadRemoteTool("meta and schema must be JSON objects")
    try:
        check_args(schema, "schema")    # as a local tool's args are: draft, refs, cost
    except MetaError as e:
        raise BadRemoteTool(str(e)) from None
    keywords = meta.get("keywords", [])
    if not isinstance(keywords, list) or not all(isinstance(k, str) for k in keywords):
        raise BadRemoteTool("meta field 'keywords' is not a list of strings")
    tier = _str(meta, "tier", "hot")
    kept = {k: meta[k] for k in KEPT if k in meta}
    cost = nodes(schema, MAX_NODES) + nodes(kept, MAX_NODES)
    if cost > MAX_NODES:
        raise BadRemoteTool(f"schema and meta hold more than {MAX_NODES} JSON values")
    t = object.__new__(RemoteTool)
    t.__dict__.update(
        name=name, file=f"{where} {tool}", dir="", description=_str(meta, "description"),
        prompt=prompt, keywords=tuple(keywords), schema=schema,
        tier=tier if tier in TIERS else "hot", read_only=meta.get("readOnly") is True,
        scope=None, output_format=None, resets_counter=meta.get("resetsCounter") is True,
        extra={}, command=Command("remote", (), "remote"), variant=None, cmd=None,
        resident=None, remote=remote, remote_name=tool, source=remote.source,
        meta_text=meta_text.decode("utf-8", "replace"),
        schema_text=schema_text.decode("utf-8", "replace"), prompt_text=prompt,
        _meta={**kept, "name": name, "host": where}, hints=_hints(meta),
        secrets=(),     # the remote's own, read there: the front sends no value (issue 50)
        cost=(len(meta_text) + len(schema_text) + len(prompt_text), cost))
    return t


def _hints(meta: dict) -> dict[str, Any]:
    """The MCP hints of the remote's meta (metafile.HINTS) that have their right types:
    anything else is left out, never trusted.  A remote's `confirm` is kept: it can only
    make the front ask a person too (tree/policy/consent.py), never spare a question."""
    kinds = {"title": str, "destructive": bool, "idempotent": bool, "outputSchema": dict,
             "confirm": bool}
    return {k: meta[k] for k in HINTS if isinstance(meta.get(k), kinds[k])}
