# toolsrv/tree/resident/lspedit.py — lsp_rename (a workspace edit applied within the cwd), lsp_calls
# (the call hierarchy), and `run`, the one entry an lsp_* call goes through.
#
# Theory of operation.  Rename asks textDocument/rename for a WorkspaceEdit (`changes` or
# `documentChanges`), refuses it whole if it creates, renames or deletes files or touches
# a file outside the cwd (its path normalised first: no `..` passes), reads each file
# through the bridge, applies the edits, writes each file back through the bridge (which
# refuses a file changed on disk since it was read), tells the server (didChange) and
# prints a unified diff of what changed.  Nothing is written before every edit has been
# checked.  Bounds: at most MAX_EDITS edits, sorted by position and refused whole when two
# overlap; a file's new text is one join of the text between the edits and theirs, at
# most MAX_TEXT characters; the unified diff is made from the edits (the lines each
# touches, lines alike at its ends left out, CONTEXT lines around), so it costs the edits'
# lines and not the file's (difflib over a whole 4 MB file took seconds); its lines are
# cut at MAX_DIFF_LINE characters.  Texts and diffs are made in a worker thread.
# `run` maps an operation name to its function and turns failures into a Reply.
from __future__ import annotations

import asyncio
import keyword
from typing import Any

from . import lspops
from .lspops import Ctx, ToolError
from .lspproto import Doc, LSPError, ResponseError, split_lines, under, uri_path
from .process import Ended, Reply, answer

MAX_EDITS = 10000        # text edits of one rename, all files together
MAX_TEXT = 8 * 2**20     # characters of a file's new text (the bridge reads 8 MiB files)
MAX_DIFF_LINE = 1000     # characters of a diff line shown
CONTEXT = 3              # lines of context around a change, as diff -u
Place = tuple[int, int]  # (line, column in characters), both 0-based


def _place(doc: Doc, pos: Any) -> Place:
    """An LSP Position in `doc`, clamped as the protocol says: past a line's end is its
    end, past the last line is the end of the text."""
    line, col = doc.from_wire(pos if isinstance(pos, dict) else {})
    last = len(doc.lines) - 1
    if line - 1 > last:
        return last, len(doc.lines[last])
    return max(0, line - 1), min(col - 1, len(doc.line(line - 1)))


def _between(doc: Doc, a: Place, b: Place) -> str:
    if a[0] == b[0]:
        return doc.lines[a[0]][a[1]:b[1]]
    return "\n".join([doc.lines[a[0]][a[1]:], *doc.lines[a[0] + 1:b[0]],
                      doc.lines[b[0]][:b[1]]])


def _spans(doc: Doc, rel: str, edits: list[Any]) -> list[tuple[Place, Place, str]]:
    """The edits as (start, end, new text), sorted; ToolError when two overlap."""
    spans = []
    for e in edits:
        r = e.get("range") if isinstance(e, dict) else None
        if not isinstance(r, dict):
            raise ToolError(f"lsp_rename: an edit of {rel} has no range; refused, nothing "
                            "changed")
        a, b = _place(doc, r.get("start")), _place(doc, r.get("end"))
        if b < a:
            raise ToolError(f"lsp_rename: an edit of {rel} ends before it starts (line "
                            f"{a[0] + 1}); refused, nothing changed")
        spans.append((a, b, str(e.get("newText", ""))))
    spans.sort(key=lambda s: (s[0], s[1]))    # stable: inserts at one place keep order
    for (_, end, _), (start, _, _) in zip(spans, spans[1:]):
        if start < end:
            raise ToolError(f"lsp_rename: the server's edits of {rel} overlap (line "
                            f"{start[0] + 1}); refused, nothing changed")
    return spans


def _apply(doc: Doc, spans: list[tuple[Place, Place, str]]) -> str:
    """The new text: one join of the text between the edits and the edits' text."""
    pieces, at = [], (0, 0)
    for start, end, new in spans:
        pieces += [_between(doc, at, start), new]
        at = end
    last = len(doc.lines) - 1
    pieces.append(_between(doc, at, (last, len(doc.lines[last]))))
    return "".join(pieces)


def _blocks(doc: Doc, spans: list[tuple[Place, Place, str]], new: list[str]
            ) -> list[tuple[int, int, int, int]]:
    """The changed lines as (old from, old to, new from, new to) blocks, in order: the
    lines each edit touches (edits sharing a line, one block), lines alike at either
    end left out."""
    out: list[list[int]] = []
    delta = 0                   # new line - old line, past the edits so far
    for start, end, text in spans:
        before = delta
        delta += text.count("\n") - (end[0] - start[0])
        if out and start[0] <= out[-1][1] - 1:
            out[-1][1], out[-1][3] = end[0] + 1, end[0] + 1 + delta
        else:
            out.append([start[0], end[0] + 1, start[0] + before, end[0] + 1 + delta])
    last_old, last_new = len(doc.lines) - 1, len(new) - 1

    def same(i: int, j: int) -> bool:         # the last has no newline
        return doc.lines[i] == new[j] and (i == last_old) == (j == last_new)
    blocks = []
    for a, b, c, d in out:
        while a < b and c < d and same(a, c):
            a, c = a + 1, c + 1
        while a < b and c < d and same(b - 1, d - 1):
            b, d = b - 1, d - 1
        if a < b or c < d:
            blocks.append((a, b, c, d))
    return blocks


def _range(start: int, n: int) -> str:
    """A hunk's side as diff -u writes it (an empty side names the line before)."""
    return str(start + 1) if n == 1 else f"{start + (n > 0)},{n}"


def _diff(doc: Doc, spans: list[tuple[Place, Place, str]], new: list[str], rel: str
          ) -> list[str]:
    """A unified diff of `doc` -> `text` (CONTEXT lines around each change, changes
    closer than twice that in one hunk), from the edits: its cost is the edits' lines,
    not the file's; `new` is the new text's lines."""
    old_n = len(doc.lines) - (doc.lines[-1] == "")      # "a\n": one line
    hunks: list[list[tuple[int, int, int, int]]] = []
    for blk in _blocks(doc, spans, new):
        if hunks and blk[0] - hunks[-1][-1][1] <= 2 * CONTEXT:
            hunks[-1].append(blk)
        else:
            hunks.append([blk])
    out = [f"--- a/{rel}\n", f"+++ b/{rel}\n"] if hunks else []
    for hunk in hunks:
        lo = max(0, hunk[0][0] - CONTEXT)
        hi = min(old_n, hunk[-1][1] + CONTEXT)
        shift = hunk[0][2] - hunk[0][0]
        body, at = [], lo
        for a, b, c, d in hunk:
            body += [" " + x for x in _lines(doc.lines, at, a)]
            body += ["-" + x for x in _lines(doc.lines, a, b)]
            body += ["+" + x for x in _lines(new, c, d)]
            at = b
        body += [" " + x for x in _lines(doc.lines, at, hi)]
        n_old = sum(1 for x in body if x[0] != "+")
        n_new = sum(1 for x in body if x[0] != "-")
        out.append(f"@@ -{_range(lo, n_old)} +{_range(lo + shift, n_new)} @@\n")
        out += [x if len(x) <= MAX_DIFF_LINE else
                f"{x[:MAX_DIFF_LINE]}… [line cut: {len(x.rstrip())} characters]\n"
                for x in body]
    return out


def _lines(lines: list[str], lo: int, hi: int) -> list[str]:
    out = [x + "\n" for x in lines[lo:hi]]
    if hi >= len(lines) and out:      # the text after the last newline
        tail = out.pop()[:-1]
        if tail:
            out.append(tail)
    return out


def _plan(docs: list[tuple[str, Doc, list[Any]]]
          ) -> list[tuple[Doc, str, list[str], list[str]]]:
    """Each file's new text, its lines and its diff, or ToolError (nothing written yet);
    in a thread."""
    out = []
    for rel, doc, edits in docs:
        spans = _spans(doc, rel, edits)
        text = _apply(doc, spans)
        if len(text) > MAX_TEXT:
            raise ToolError(f"lsp_rename: {rel} would grow to {len(text)} characters (limit "
                            f"{MAX_TEXT}); refused, nothing changed")
        if text != doc.text:
            lines = split_lines(text)
            out.append((doc, text, lines, _diff(doc, spans, lines, rel)))
    return out


def _edits(edit: Any) -> dict[Any, list[dict[str, Any]]]:
    """A WorkspaceEdit as {uri: [TextEdit]}, each uri as the server sent it (rename checks
    it is a string); ToolError for file operations."""
    out: dict[Any, list[dict[str, Any]]] = {}
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
    count = sum(len(e) for e in changes.values())
    if count > MAX_EDITS:
        raise ToolError(f"lsp_rename: the server's rename makes {count} edits (limit "
                        f"{MAX_EDITS}); refused, nothing changed")
    plan: dict[str, list[Any]] = {}
    for uri, edits in changes.items():
        path = uri_path(uri) if isinstance(uri, str) else None   # normalised: no ..
        if path is None or not under(path, ctx.root):
            raise ToolError(f"lsp_rename: the edit reaches {path or uri}, outside the "
                            "working directory; nothing changed")
        plan.setdefault(path, []).extend(edits)
    docs = [(ctx.rel(path), await ctx.doc(path), plan[path]) for path in sorted(plan)]
    out: list[str] = []
    for d, text, lines, diff in await asyncio.to_thread(_plan, docs):
        try:
            await ctx.client.write(d, text, lines)
        except ResponseError as e:
            done = f" (already changed: {', '.join(x[:-1] for x in out if x.startswith('+++'))})"
            raise ToolError(f"{ctx.rel(d.path)}: {e.args[0].split(' (lsp error')[0]}" +
                            (done if out else "")) from None
        out += diff
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
    locs, labels = [], []
    for item in items[:1]:
        got = await ctx.client.request(f"callHierarchy/{way}Calls", {"item": item})
        for c in got or []:
            other = c.get("from" if way == "incoming" else "to") or {}
            name = f"{lspops._kind(other.get('kind'))} {other.get('name', '?')}"
            if way == "incoming":      # where the caller calls us
                mine = [(other.get("uri"), r) for r in c.get("fromRanges") or []]
            else:                      # the callee's own place
                mine = [(other.get("uri"), other.get("selectionRange") or other.get("range"))]
            for u, r in mine:
                if isinstance(u, str) and isinstance(r, dict):
                    locs.append((u, r))
                    labels.append(f"  <- {name}" if way == "incoming" else f"  -> {name}")
    lines = await lspops.location_lines(ctx, locs, labels)
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
    client.begin()

    async def one() -> tuple[str | None, str | None]:
        try:
            return await fn(ctx), None
        except ToolError as e:
            return None, str(e)
        except ResponseError as e:
            return None, f"lsp_{op}: the language server refused: {e}"
        except (LSPError, ValueError, TypeError, KeyError, AttributeError,
                RecursionError) as e:     # an answer nested past the stack: it must go
            raise Ended(f"lsp: {type(e).__name__}: {e}") from None
    value, rep = await answer(proc, timeout, kill, one)
    if value is not None:
        rep.output, rep.error = value
        proc.calls += 1
    return rep
