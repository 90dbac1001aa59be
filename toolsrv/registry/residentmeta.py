# toolsrv/registry/residentmeta.py — the `resident` field of a .meta: checked and normalised.
#
# Theory of operation.  `resident` is true, false or an object: a protocol (lines, the
# default; python; mcp; lsp), the idle seconds, the MCP tool or lsp operation, and each
# protocol's own fields (lsp: language, extensions, settings, init; python: script, args).
# check_resident gives the normalised dict that Tool.resident holds (tree/resident/ reads
# it), or None for a tool run per call; anything else is a MetaError naming the field.
from __future__ import annotations

import json
from typing import Any

from .metaerror import MetaError, json_kind

PROTOCOLS = ("lines", "mcp", "lsp", "python")
IDLE = 300.0  # seconds a resident process may sit without a call
LSP_OPS = ("definition", "references", "hover", "diagnostics", "symbols", "rename", "calls")
LSP_FIELDS = ("language", "extensions", "settings", "init")
PYTHON_FIELDS = ("script", "args")


def check_resident(v: Any, where: str) -> dict[str, Any] | None:
    """`true`, `false` or {"protocol", "idle", "tool"} (lsp: also "language", "extensions",
    "settings", "init"): the normalised form, or None (not resident).  "tool" stays None
    when not given (the caller knows the .meta's name)."""
    if v is False:
        return None
    if v is True:
        v = {}
    if not isinstance(v, dict):
        raise MetaError(f"{where}: must be true, false or an object, not {json_kind(v)}")
    proto = v.get("protocol", "lines")
    known = ("protocol", "idle", "tool") + (LSP_FIELDS if proto == "lsp" else
                                            PYTHON_FIELDS if proto == "python" else ())
    for k in v:
        if k not in known:
            raise MetaError(f"{where}.{k}: unknown field ({', '.join(known)})")
    if proto not in PROTOCOLS or not isinstance(proto, str):
        raise MetaError(f"{where}.protocol: must be one of {', '.join(PROTOCOLS)}, "
                        f"not {json.dumps(proto)}")
    idle = v.get("idle", IDLE)
    if isinstance(idle, bool) or not isinstance(idle, (int, float)) or not idle > 0:
        raise MetaError(f"{where}.idle: must be a number of seconds above 0, not "
                        f"{json.dumps(idle)}")
    tool = v.get("tool")
    if tool is not None and (not isinstance(tool, str) or not tool):
        raise MetaError(f"{where}.tool: must be a non-empty string, not {json.dumps(tool)}")
    out = {"protocol": proto, "idle": float(idle), "tool": tool}
    if proto == "python":
        return _python(v, where, out)
    return _lsp(v, where, out) if proto == "lsp" else out


def _python(v: dict[str, Any], where: str, out: dict[str, Any]) -> dict[str, Any]:
    """The python protocol's fields: `script`, a file beside the .meta that the resident
    interpreter runs instead of the tool's command (for a tool whose command is a `cmd`),
    and its `args`."""
    script, args = v.get("script"), v.get("args", [])
    if script is not None and (not isinstance(script, str) or "/" in script
                               or script in ("", ".", "..")):
        raise MetaError(f"{where}.script: must be the name of a file beside the .meta, "
                        f"not {json.dumps(script)}")
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise MetaError(f"{where}.args: must be a list of strings, not {json.dumps(args)}")
    if args and script is None:
        raise MetaError(f"{where}.args: needs a script")
    return {**out, "script": script, "args": list(args)} if script is not None else out


def _lsp(v: dict[str, Any], where: str, out: dict[str, Any]) -> dict[str, Any]:
    """The lsp protocol's fields: `tool` one of LSP_OPS, `language` (the LSP language id),
    `extensions` (the files it serves), `settings` and `init` (any JSON)."""
    if out["tool"] not in LSP_OPS:
        raise MetaError(f"{where}.tool: must be one of {', '.join(LSP_OPS)} for protocol "
                        f"lsp, not {json.dumps(out['tool'])}")
    lang = v.get("language")
    if not isinstance(lang, str) or not lang:
        raise MetaError(f"{where}.language: must be a language id such as \"python\"")
    exts = v.get("extensions", [])
    if not isinstance(exts, list) or not all(isinstance(e, str) and e.startswith(".")
                                             for e in exts):
        raise MetaError(f'{where}.extensions: must be a list of endings such as [".py"]')
    return {**out, "language": lang, "extensions": list(exts),
            "settings": v.get("settings"), "init": v.get("init")}
