# toolsrv/tree/resident/lspedit.py — lsp_rename (a workspace edit applied within the cwd), lsp_calls
# (the call hierarchy), and `run`, the one entry an lsp_* call goes through.
#
# Theory of operation.  Rename asks textDocument/rename for a WorkspaceEdit (`changes` or
# `documentChanges`), refuses it whole if it creates, renames or deletes files or touches
# a file outside the cwd, reads each file through the bridge, applies the edits (from the
# end, so earlier offsets hold), writes each file back through the bridge (which refuses a
# file changed on disk since it was read), tells the server (didChange) and prints a
# unified diff of what changed.  Nothing is written before every edit has been checked.
# `run` maps an operation name to its function and turns failures into a Reply.
from __future__ import annotations

import difflib
import keyword
from typing import Any

from . import lspops
from .lspops import Ctx, ToolError
from .lspproto import Doc, LSPError, ResponseError, uri_path
from .process import Ended, Reply, answer


def _offset(doc: Doc, pos: dict[str, Any]) -> int:
    line, col = doc.from_wire(pos)
    lines = doc.text.split("\n")
    line = min(line, len(lines))
    return sum(len(x) + 1 for x in lines[:line - 1]) + min(col - 1, len(lines[line - 1]))


def _apply(doc: Doc, edits: list[dict[str, Any]]) -> str:
    spans = []
    for e in edits:
        r = e.get("range") or {}
        spans.append((_offset(doc, r.get("start") or {}), _offset(doc, r.get("end") or {}),
                      str(e.get("newText", ""))))
    text = doc.text
    for start, end, new in sorted(spans, reverse=True):
        text = text[:start] + new + text[end:]
    return text


def _edits(edit: Any) -> dict[str, list[dict[str, Any]]]:
    """A WorkspaceEdit as {uri: [TextEdit]}; ToolError for file operations."""
    out: dict[str, list[dict[str, Any]]] = {}
    if not isinstance(edit, dict):
        return out
    for ch in edit.get("documentChanges") or []:
        if not isinstance(ch, dict) or "kind" in ch:
            raise ToolError(f"lsp_rename: the edit would {ch.get('kind', 'change')} a file; "
                            "refused, nothing changed")
        uri = (ch.get("textDocument") or {}).get("uri")
        out.setdefault(uri, []).extend(ch.get("edits") or [])
    if not out:
        for uri, edits in (edit.get("changes") or {}).items():
            out.setdefault(uri, []).extend(edits or [])
    return out


async def rename(ctx: Ctx) -> str:
    ctx.need("renameProvider", "lsp_rename")
    new = ctx.args.get("new_name")
    if not isinstance(new, str) or not new.strip() or "\n" in new:
        raise ToolError("new_name: give the new name, one line")
    if any(c.isspace() for c in new):   # no language's identifier holds a blank
        raise ToolError(f"new_name: {new!r} is not a name (it has a blank); nothing changed")
    doc, pos = await lspops.position(ctx)
    if doc.path.endswith((".py", ".pyi")) and (not new.isidentifier() or keyword.iskeyword(new)):
        raise ToolError(f"new_name: {new!r} is not a Python identifier; nothing changed")
    got = await ctx.client.request("textDocument/rename", {
        "textDocument": {"uri": doc.uri}, "position": pos, "newName": new})
    changes = _edits(got)
    if not changes:
        return f"nothing to rename at {ctx.where(doc, pos)}\n"
    plan = []
    for uri, edits in sorted(changes.items()):
        path = uri_path(uri) if isinstance(uri, str) else None
        if path is None or not path.startswith(ctx.root.rstrip("/") + "/"):
            raise ToolError(f"lsp_rename: the edit reaches {path or uri}, outside the "
                            "working directory; nothing changed")
        plan.append((path, edits))
    docs = [(path, await ctx.doc(path), edits) for path, edits in plan]
    out = []
    for path, d, edits in docs:
        old, text = d.text, _apply(d, edits)
        if text == old:
            continue
        try:
            await ctx.client.write(d, text)
        except ResponseError as e:
            done = f" (already changed: {', '.join(x[:-1] for x in out if x.startswith('+++'))})"
            raise ToolError(f"{ctx.rel(path)}: {e.args[0].split(' (lsp error')[0]}" +
                            (done if out else "")) from None
        rel = ctx.rel(path)
        out += difflib.unified_diff(old.splitlines(True), text.splitlines(True),
                                    f"a/{rel}", f"b/{rel}")
    return "".join(x if x.endswith("\n") else x + "\n" for x in out) or "no change\n"


async def calls(ctx: Ctx) -> str:
    ctx.need("callHierarchyProvider", "lsp_calls")
    way = ctx.args.get("direction", "incoming")
    if way not in ("incoming", "outgoing"):
        raise ToolError('direction: "incoming" or "outgoing"')
    doc, pos = await lspops.position(ctx)
    items = await ctx.client.request("textDocument/prepareCallHierarchy", {
        "textDocument": {"uri": doc.uri}, "position": pos})
    if not items:
        return f"no function or method at {ctx.where(doc, pos)}\n"
    lines = []
    for item in items[:1]:
        got = await ctx.client.request(f"callHierarchy/{way}Calls", {"item": item})
        for c in got or []:
            other = c.get("from" if way == "incoming" else "to") or {}
            name = f"{lspops._kind(other.get('kind'))} {other.get('name', '?')}"
            if way == "incoming":      # where the caller calls us
                locs = [(other.get("uri"), r) for r in c.get("fromRanges") or []]
            else:                      # the callee's own place
                locs = [(other.get("uri"), other.get("selectionRange") or other.get("range"))]
            for ln in await lspops.location_lines(ctx, [(u, r) for u, r in locs if u and r]):
                lines.append(f"{ln}  <- {name}" if way == "incoming" else f"{ln}  -> {name}")
    return "\n".join(lines) + "\n" if lines else f"no {way} calls\n"


OPS = {"definition": lspops.definition, "references": lspops.references,
       "hover": lspops.hover, "diagnostics": lspops.diagnostics, "symbols": lspops.symbols,
       "rename": rename, "calls": calls}


async def run(proc: Any, client: Any, op: str, lang: dict[str, Any], args: dict[str, Any],
              timeout: float, kill: Any) -> Reply:
    """One lsp_* call under the call's timeout and kill: the Reply (output, the tool's
    error, or a failure that ends the process)."""
    fn = OPS.get(op)
    if fn is None:
        return Reply(error=f"lsp: no operation {op!r} ({', '.join(OPS)})")
    ctx = Ctx(client, lang, args)

    async def one() -> tuple[str | None, str | None]:
        try:
            return await fn(ctx), None
        except ToolError as e:
            return None, str(e)
        except ResponseError as e:
            return None, f"lsp_{op}: the language server refused: {e}"
        except (LSPError, ValueError, TypeError, KeyError, AttributeError) as e:
            raise Ended(f"lsp: {type(e).__name__}: {e}") from None
    value, rep = await answer(proc, timeout, kill, one)
    if value is not None:
        rep.output, rep.error = value
        proc.calls += 1
    return rep
