"""An agent's tools as a Python module: the agent directory's `tools.py` (issue 45.2).

Theory of operation.  `module` writes the text from the agent's schemas (Calls.schemas:
the tools loaded for it, each as the registry has it now, its timeout argument bounded), so
the file changes, and its qid version moves, when the tools loaded or the registry do.

What it holds: a docstring (the agent, how to use it, the tools whose names had to be
mapped); then one function per tool, named after it (a name that is no Python identifier
mapped: `-` and `.` to `_`, a keyword or a clash given a trailing `_`), its required args as
keyword parameters first, then the optional ones with their defaults (None: left out of the
call), `**more` when the schema takes other properties; its docstring the tool's
description and prompt; returning the result's text, or the parsed JSON where the tool
declares an outputSchema.  Last, the runtime, copied from the bundled script tool:
stdlib only, it speaks 9P on the scoped connection a run is given (fd $TOOLSRV_FD) and
raises `ToolError` with toolsrv's whole reason.  A call made through it is a nested call
(nested.py).
"""
from __future__ import annotations

import keyword
import math
import os
import re
from typing import Any

from ...dirs import bundled
from ...errors import printable

RUNTIME = os.path.join(bundled.TOOLS, "script")   # its runtime, between markers
_TYPES = {"string": "str", "integer": "int", "number": "float", "boolean": "bool",
          "array": "list", "object": "dict"}
_RESERVED = {"ToolError", "call_tool"}
_cache: dict[str, str] = {}     # the runtime's text, read once


def py_name(name: str, taken: set[str]) -> str:
    """A Python identifier for `name` that is not in `taken`."""
    out = re.sub(r"\W", "_", name)
    if not out or out[0].isdigit():
        out = "_" + out
    while keyword.iskeyword(out) or out in taken or out.startswith("__"):
        out += "_"
    return out


def _runtime() -> str:
    if "text" not in _cache:
        with open(RUNTIME, encoding="utf-8") as f:
            text = f.read()
        end = "# -- end of runtime --\n"
        _cache["text"] = text[text.index("# -- runtime --"):text.index(end) + len(end)]
    return _cache["text"]


def _doc(text: str, indent: str) -> str:
    """text as the body of a docstring: no backslash or triple quote can end it early."""
    text = text.replace("\\", "\\\\").replace('"""', '\\"\\"\\"').strip()
    return "\n".join((indent + printable(line)) if line.strip() else ""
                     for line in text.splitlines())


def _annotation(prop: Any) -> str:
    t = prop.get("type") if isinstance(prop, dict) else None
    return _TYPES.get(t, "Any") if isinstance(t, str) else "Any"


def function(entry: dict, name: str, structured: bool) -> str:
    """The function of one tool (an entry of Calls.schemas), as `name`."""
    schema = got if isinstance(got := entry.get("parameters"), dict) else {}
    props = pgot if isinstance(pgot := schema.get("properties"), dict) else {}
    required = [p for p in schema.get("required") or [] if p in props]
    taken: set[str] = set()
    params, pairs = [], []
    for p in required + [p for p in props if p not in required]:
        arg = py_name(p, taken | _RESERVED | {"more"})     # never hides call_tool
        taken.add(arg)
        kind = _annotation(props[p])
        if p in required:
            params.append(f"{arg}: {kind}")
        else:
            default = props[p].get("default") if isinstance(props[p], dict) else None
            params.append(f"{arg}: {kind} | None = {default!r}" if _literal(default)
                          else f"{arg}: {kind} | None = None")
        pairs.append(f"{p!r}: {arg}")
    if schema.get("additionalProperties", True) is not False:
        params.append("**more: Any")
    sig = ", ".join(["*"] + params if pairs else params)
    returns = "Any" if structured else "str"
    doc = entry.get("description") or ""
    if entry.get("prompt"):
        doc += "\n\n" + entry["prompt"]
    args = "{" + ", ".join(pairs) + "}"
    if params and params[-1] == "**more: Any":
        args = f"{args} | more" if pairs else "more"
    return (f"def {name}({sig}) -> {returns}:\n"
            f'    """{_doc(doc, "    ").lstrip()}\n    """\n'
            f"    return call_tool({entry['name']!r}, {args}, {structured})\n")


def _literal(v: Any) -> bool:
    """v's repr is Python source for v."""
    return isinstance(v, (str, int, bool)) or isinstance(v, float) and math.isfinite(v)


def module(agent_path: str, entries: list[dict], structured: set[str]) -> str:
    """tools.py for the agent at agent_path (`session/S/agent/A`): entries are its
    Calls.schemas, `structured` the names of the tools that declare an outputSchema."""
    taken = set(_RESERVED)
    names = {}
    for e in entries:
        names[e["name"]] = py_name(e["name"], taken)
        taken.add(names[e["name"]])
    mapped = [f"    {n} -> {p}" for n, p in names.items() if n != p]
    head = [f"{agent_path}: this agent's tools as Python functions (toolsrv, tools.py).",
            "",
            "Each function calls the tool of its name through the connection toolsrv gives",
            "a run whose profile has general.toolsrv: true (the script tool's, client_9p's),",
            "as a nested call of that run. Arguments are keywords; an optional one left",
            "None is not sent. A function returns the result's text (the parsed JSON where",
            "the tool declares an outputSchema) and raises ToolError with toolsrv's whole",
            "reason. call_tool(name, args) calls any loaded tool by its own name.",
            "", f"Tools: {', '.join(names.values()) or '(none loaded)'}."]
    if mapped:
        head += ["", "Names mapped (tool -> function):"] + mapped
    out = ['"""' + _doc("\n".join(head), "") + '\n"""',
           "from __future__ import annotations  # Any and the rest stay words: no typing",
           "",
           f"_AGENT = {agent_path!r}", "", ""]
    for e in entries:
        out.append(function(e, names[e["name"]], e["name"] in structured))
        out.append("")
    out.append(_runtime())
    return "\n".join(out)
