# toolsrv/tree/resident/lspops.py — what each lsp_* tool asks a language server, and how the answer
# reads: lines of `path:line:col: text` that an agent and grep both read.
#
# Theory of operation.  A call names an operation (the .meta's resident `tool`:
# definition, references, hover, diagnostics, symbols, rename, calls) and its args.
# Positions in args and output are 1-based lines and columns in characters; paths are
# relative to the session's cwd (the workspace root), absolute when a location lies outside
# it (a definition in the standard library).  A position is given as `path`, `line`,
# `column`, or as `symbol` (`Shape.area`): resolved through workspace/symbol, or, when the
# server offers none, through textDocument/documentSymbol of the project's files (listed
# by the bridge); the name's own position is then used.  Every file a request touches is
# synced first (lspproto.Client.sync).  An operation the server does not offer fails
# naming the missing capability.  ToolError is the tool's error (the call fails, the
# server stays); lspproto.LSPError means the process must go.  Rename lives in lspedit.py.
# Bounds: a list of locations shows at most MAX_ROWS rows (sorted on the wire's numbers
# first, so only the rows shown are converted and their files read) and a line at most
# MAX_SHOWN characters of it, around the column; each cut is said on the output.  A
# symbol's name is looked for in NAME_SCAN characters from where the server says it is.
from __future__ import annotations

import asyncio
import os
import re
import time
from typing import Any

from . import lspproto
from .lspproto import Client, Doc, ResponseError, path_uri, under, uri_path

KINDS = ("", "file", "module", "namespace", "package", "class", "method", "property",
         "field", "constructor", "enum", "interface", "function", "variable", "constant",
         "string", "number", "boolean", "array", "object", "key", "null", "enum member",
         "struct", "event", "operator", "type parameter")
SEVERITY = ("", "error", "warning", "information", "hint")
DIAG_WAIT = 10.0    # seconds lsp_diagnostics waits for a push by default
SETTLE = 0.5        # then, seconds without a push before the answer is taken as whole
MAX_FILES = 1000    # files opened for a symbol search or whole-workspace diagnostics
MAX_ROWS = 1000     # rows of a list of locations (references, definitions, calls)
MAX_SHOWN = 200     # characters of a source line a row shows
NAME_SCAN = 65536   # characters searched for a symbol's name from its range's start


class ToolError(Exception):
    """The call's error, told to the caller; the language server is fine."""


class Ctx:
    """One call: the client, the .meta's language settings, the args."""

    def __init__(self, client: Client, lang: dict[str, Any], args: dict[str, Any]) -> None:
        self.client, self.args = client, args
        self.language = str(lang.get("language") or "plaintext")
        self.extensions = tuple(lang.get("extensions") or ())
        self.root = client.root

    def need(self, capability: str, what: str) -> None:
        if not self.client.supports(capability):
            name = (self.client.info.get("serverInfo") or {}).get("name") or "the server"
            raise ToolError(f"{name} does not offer {capability} (this language server "
                            f"cannot do {what})")

    def abspath(self, path: Any) -> str:
        if not isinstance(path, str) or not path:
            raise ToolError("path: give a file, relative to the working directory")
        full = os.path.normpath(os.path.join(self.root, path))
        if full != self.root and not under(full, self.root):
            raise ToolError(f"path: {path} is outside the working directory")
        if self.extensions and not full.endswith(self.extensions):
            raise ToolError(f"path: {path} is not a {self.language} file "
                            f"({', '.join(self.extensions)})")
        return full

    def rel(self, path: str) -> str:
        """A path as output shows it: relative to the root when under it."""
        path = os.path.normpath(path)
        if under(path, self.root):
            return path[len(self.root.rstrip("/")) + 1:]
        return path

    async def doc(self, path: str) -> Doc:
        try:
            return (await self.client.sync(path, self.language))[0]
        except ResponseError as e:
            raise ToolError(f"{self.rel(path)}: {e.args[0].split(' (lsp error')[0]}") from None

    def where(self, doc: Doc, pos: dict[str, Any]) -> str:
        line, col = doc.from_wire(pos)
        return f"{self.rel(doc.path)}:{line}:{col}"


# -- positions --
async def position(ctx: Ctx) -> tuple[Doc, dict[str, Any]]:
    """The document and the wire position the args name (path/line/column or symbol)."""
    a = ctx.args
    if a.get("symbol"):
        sym = await find_symbol(ctx, str(a["symbol"]))
        return sym["doc"], sym["pos"]
    if "line" not in a or "path" not in a:
        raise ToolError("give path, line and column (1-based), or symbol")
    doc = await ctx.doc(ctx.abspath(a["path"]))
    line, col = int(a["line"]), int(a.get("column") or 1)
    count = len(doc.lines) - (len(doc.lines) > 1 and doc.lines[-1] == "")   # "a\nb\n": 2
    if not 1 <= line <= count:
        raise ToolError(f"line: {line} is past the end of {a['path']} "
                        f"({count} line{'s' if count != 1 else ''})")
    width = len(doc.line(line - 1))
    if not 1 <= col <= width + 1:
        raise ToolError(f"column: {col} is past the end of line {line} of {a['path']} "
                        f"({width} characters)")
    return doc, doc.to_wire(line, col)


def _flat(result: Any, uri: str | None = None, container: str = "") -> list[dict[str, Any]]:
    """DocumentSymbol trees or SymbolInformation lists as one list of
    {name, container, kind, uri, range, sel}."""
    out: list[dict[str, Any]] = []
    for s in result if isinstance(result, list) else []:
        if not isinstance(s, dict) or "name" not in s:
            continue
        if "location" in s:
            loc = s["location"]
            out.append({"name": s["name"], "container": s.get("containerName") or "",
                        "kind": s.get("kind", 0), "uri": loc.get("uri"),
                        "range": loc.get("range"), "sel": None})
        else:
            out.append({"name": s["name"], "container": container, "kind": s.get("kind", 0),
                        "uri": uri, "range": s.get("range"), "sel": s.get("selectionRange")})
            inner = f"{container}.{s['name']}" if container else s["name"]
            out += _flat(s.get("children"), uri, inner)
    return out


async def workspace_symbols(ctx: Ctx, query: str) -> list[dict[str, Any]]:
    """Symbols matching `query`: workspace/symbol, or documentSymbol of every file."""
    c = ctx.client
    if c.supports("workspaceSymbolProvider"):
        return _flat(await c.request("workspace/symbol", {"query": query}))
    ctx.need("documentSymbolProvider", "symbol search")
    res = await c.request("toolsrv/files", {"root": ctx.root, "extensions": ctx.extensions,
                                            "limit": MAX_FILES})
    out = []
    for path in res.get("paths", []):
        uri = path_uri(path)       # asked unopened first: opening a thousand files would
        try:                       # make the server analyse them all
            if uri in c.docs:      # but one it has open answers from the text it was
                await ctx.doc(path)   # given: synced first, or an edit on disk is unseen
            got = await c.request("textDocument/documentSymbol", {"textDocument": {"uri": uri}})
        except ResponseError:      # a server that answers for open files only
            try:
                await ctx.doc(path)
            except ToolError:
                continue
            got = await c.request("textDocument/documentSymbol", {"textDocument": {"uri": uri}})
        out += [s for s in _flat(got, uri) if query.lower() in s["name"].lower()]
    return out


def _matches(sym: dict[str, Any], name: str, container: str) -> bool:
    if sym["name"] != name:
        return False
    if not container:
        return True
    have = sym["container"] or ""
    return have == container or have.endswith("." + container) or \
        have.split(".")[-1] == container.split(".")[-1] and container.endswith(have)


async def find_symbol(ctx: Ctx, symbol: str) -> dict[str, Any]:
    """The one symbol `symbol` (`name` or `Container.name`) names, with the doc and the
    wire position of its name; ToolError when none or several match."""
    container, _, name = symbol.strip().rpartition(".")
    if not name:
        raise ToolError(f"symbol: {symbol!r} names nothing")
    found = [s for s in await workspace_symbols(ctx, name) if _matches(s, name, container)]
    found = [s for s in found if isinstance(s["uri"], str) and uri_path(s["uri"])]
    seen, unique = set(), []
    for s in found:
        key = (s["uri"], str((s["sel"] or s["range"] or {}).get("start")))
        if key not in seen:
            seen.add(key)
            unique.append(s)
    if not unique:
        raise ToolError(f"symbol: no symbol {symbol} in the workspace; lsp_symbols "
                        "with a query lists names")
    if len(unique) > 1:
        unique = await _same_definition(ctx, unique)
    if len(unique) > 1:
        lines = [await _symbol_line(ctx, s) for s in unique[:20]]
        raise ToolError(f"symbol: {symbol} is ambiguous ({len(unique)} matches); name it "
                        "as Container.name or give path, line and column:\n" + "\n".join(lines))
    s = unique[0]
    doc = await ctx.doc(uri_path(s["uri"]) or "")
    s["doc"], s["pos"] = doc, _name_position(doc, s)
    return s


async def _same_definition(ctx: Ctx, found: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Candidates that are one symbol seen twice (an import of a class is a symbol of the
    importing module too) folded into the one they define: each candidate's own
    definition is asked for, and those whose definition is another candidate of another
    file go (in one file, a method and its override are two symbols: a server may give
    the base's as the override's definition)."""
    if not ctx.client.supports("definitionProvider"):
        return found
    keep = []
    for s in found:
        doc = await ctx.doc(uri_path(s["uri"]) or "")
        pos = _name_position(doc, s)
        got = locations(await ctx.client.request("textDocument/definition", {
            "textDocument": {"uri": doc.uri}, "position": pos}))
        elsewhere = [(u, r) for u, r in got if (u, r.get("start", {}).get("line")) !=
                     (doc.uri, pos["line"])]
        if not any(u == o["uri"] != s["uri"] and r.get("start", {}).get("line") ==
                   ((o["sel"] or o["range"] or {}).get("start") or {}).get("line")
                   for u, r in elsewhere for o in found if o is not s):
            keep.append(s)
    return keep or found


def _name_position(doc: Doc, s: dict[str, Any]) -> dict[str, Any]:
    """Where the symbol's name is: its selectionRange, else the first whole-word match of
    the name in the NAME_SCAN characters from the start of its range, on at most 50 lines
    (SymbolInformation's range covers the whole definition)."""
    if s.get("sel"):
        return dict(s["sel"]["start"])
    start = (s.get("range") or {}).get("start") or {"line": 0, "character": 0}
    name, left = re.compile(r"\b%s\b" % re.escape(s["name"])), NAME_SCAN
    for n0 in range(int(start.get("line", 0)), min(len(doc.lines), int(start.get("line", 0)) + 50)):
        text = doc.line(n0)
        skip = doc.from_wire(start)[1] - 1 if n0 == start.get("line") else 0
        m = name.search(text, skip, skip + left)
        if m:
            return doc.to_wire(n0 + 1, m.start() + 1)
        left -= max(0, len(text) - skip)
        if left <= 0:
            break
    return dict(start)


async def _symbol_line(ctx: Ctx, s: dict[str, Any]) -> str:
    """`path:line:col: kind Container.name [first-last]`, the position being the name's."""
    path = uri_path(s["uri"]) or s["uri"]
    doc = await ctx.client.peek(path)
    rng = s.get("range") or {}
    start = rng.get("start") or {"line": 0, "character": 0}
    if doc is not None:
        line, col = doc.from_wire(_name_position(doc, s))
    else:
        line, col = int(start["line"]) + 1, int(start["character"]) + 1
    qual = f"{s['container']}.{s['name']}" if s["container"] else s["name"]
    text = f"{_kind(s['kind'])} {qual}"
    end = rng.get("end")
    if isinstance(end, dict):
        last = int(end["line"]) + (0 if end.get("character") or end["line"] ==
                                   start["line"] else -1)     # an end is exclusive
        text += f" [{int(start['line']) + 1}-{last + 1}]"
    return f"{ctx.rel(path)}:{line}:{col}: {text}"


def _kind(k: Any) -> str:
    return KINDS[k] if isinstance(k, int) and 0 < k < len(KINDS) else "symbol"


# -- locations --
def locations(result: Any) -> list[tuple[str, dict[str, Any]]]:
    """Location | Location[] | LocationLink[] | None as [(uri, range)]."""
    items = result if isinstance(result, list) else [result] if result else []
    out = []
    for it in items:
        if not isinstance(it, dict):
            continue
        if "targetUri" in it:
            out.append((it["targetUri"], it.get("targetSelectionRange") or it.get("targetRange")))
        elif "uri" in it:
            out.append((it["uri"], it.get("range")))
    return [(u, r) for u, r in out if isinstance(u, str) and isinstance(r, dict)]


async def location_lines(ctx: Ctx, locs: list[tuple[str, dict[str, Any]]],
                         labels: list[str] | None = None) -> list[str]:
    """`path:line:col: text` per location (then its label), sorted, duplicates dropped;
    at most MAX_ROWS, and a last line saying how many more there were."""
    keys = set()
    for i, (uri, rng) in enumerate(locs):
        start: Any = rng.get("start")   # not a dict: TypeError, below
        try:
            n0, units = int(start["line"]), int(start["character"])
        except (TypeError, KeyError, ValueError):
            continue
        path = uri_path(uri) or uri
        keys.add((ctx.rel(path), n0, units, labels[i] if labels else "", path))
    rows, docs = [], {}
    for rel, n0, units, label, path in sorted(keys)[:MAX_ROWS]:
        if path not in docs:
            docs[path] = await ctx.client.peek(path)
        doc = docs[path]
        if doc is None:
            rows.append(f"{rel}:{n0 + 1}:{units + 1}: {label}")
            continue
        line, col = doc.from_wire({"line": n0, "character": units})
        rows.append(f"{rel}:{line}:{col}: {shown(doc.line(line - 1), col)}{label}")
    if len(keys) > MAX_ROWS:
        rows.append(f"[{len(keys) - MAX_ROWS} more locations not shown (limit {MAX_ROWS})]")
    return rows


def shown(text: str, col: int) -> str:
    """A source line as a row shows it: stripped, and when longer than MAX_SHOWN, the
    MAX_SHOWN characters around column `col` (1-based), saying it was cut."""
    if len(text) <= MAX_SHOWN:
        return text.strip()
    start = max(0, min(col - 1 - MAX_SHOWN // 4, len(text) - MAX_SHOWN))
    part = text[start:start + MAX_SHOWN].strip()
    return f"{'…' if start else ''}{part}… [line cut: {len(text)} characters]"


# -- the operations --
async def definition(ctx: Ctx) -> str:
    ctx.need("definitionProvider", "lsp_definition")
    doc, pos = await position(ctx)
    got = locations(await ctx.client.request("textDocument/definition", {
        "textDocument": {"uri": doc.uri}, "position": pos}))
    if ctx.args.get("symbol") and all(uri == doc.uri for uri, _ in got):
        # a symbol found is a definition itself (an override's name may lead a server to
        # the base's): only an import's leads to another file, where it is defined
        got = [(doc.uri, {"start": pos, "end": pos})]
    lines = await location_lines(ctx, got)
    return "\n".join(lines) + "\n" if lines else \
        f"no definition found at {ctx.where(doc, pos)}\n"


async def references(ctx: Ctx) -> str:
    ctx.need("referencesProvider", "lsp_references")
    doc, pos = await position(ctx)
    got = await ctx.client.request("textDocument/references", {
        "textDocument": {"uri": doc.uri}, "position": pos,
        "context": {"includeDeclaration": bool(ctx.args.get("include_declaration", True))}})
    lines = await location_lines(ctx, locations(got))
    return "\n".join(lines) + "\n" if lines else \
        f"no references found at {ctx.where(doc, pos)}\n"


async def hover(ctx: Ctx) -> str:
    ctx.need("hoverProvider", "lsp_hover")
    doc, pos = await position(ctx)
    got = await ctx.client.request("textDocument/hover", {
        "textDocument": {"uri": doc.uri}, "position": pos})
    text = _markup((got or {}).get("contents") if isinstance(got, dict) else None).strip()
    return (text + "\n") if text else f"nothing to show at {ctx.where(doc, pos)}\n"


def _markup(c: Any) -> str:
    if isinstance(c, str):
        return c
    if isinstance(c, list):
        return "\n\n".join(_markup(x) for x in c if _markup(x))
    if isinstance(c, dict):
        if "language" in c:
            return f"```{c['language']}\n{c.get('value', '')}\n```"
        return str(c.get("value", ""))
    return ""


async def symbols(ctx: Ctx) -> str:
    a = ctx.args
    if a.get("path"):
        ctx.need("documentSymbolProvider", "lsp_symbols")
        doc = await ctx.doc(ctx.abspath(a["path"]))
        got = _flat(await ctx.client.request("textDocument/documentSymbol",
                                             {"textDocument": {"uri": doc.uri}}), doc.uri)
        got.sort(key=lambda s: (int(((s["sel"] or s["range"] or {}).get("start") or {})
                                    .get("line", 0))))
    elif a.get("query"):
        got = await workspace_symbols(ctx, str(a["query"]))
    else:
        raise ToolError("give path (an outline of one file) or query (a workspace search)")
    lines = [await _symbol_line(ctx, s) for s in got[:int(a.get("limit") or 500)]]
    return "\n".join(lines) + "\n" if lines else "no symbols found\n"


async def diagnostics(ctx: Ctx) -> str:
    c, a = ctx.client, ctx.args
    wait = min(30.0, float(a.get("wait", DIAG_WAIT)))
    if a.get("path"):
        paths = [ctx.abspath(a["path"])]
    else:
        res = await c.request("toolsrv/files", {"root": ctx.root, "extensions":
                                                ctx.extensions, "limit": MAX_FILES})
        paths = res.get("paths", [])
    mark = c.pushes
    fresh = []
    for p in paths:
        try:
            doc, sent = await c.sync(p, ctx.language)
        except ResponseError as e:
            raise ToolError(f"{ctx.rel(p)}: {e.args[0].split(' (lsp error')[0]}") from None
        if sent or doc.uri not in c.diagnostics:
            fresh.append(doc.uri)
    late = await _wait_pushes(c, fresh, mark, wait)
    rows, cut = [], []
    for p in paths:
        uri = path_uri(p)
        kept, pushed = c.docs.get(uri), c.diagnostics.get(uri)
        if kept is None or pushed is None:
            continue
        if pushed.dropped:
            cut.append(f"[lsp_diagnostics: {pushed.dropped} more diagnostics of "
                       f"{ctx.rel(p)} not kept (limit {lspproto.MAX_DIAGNOSTICS})]")
        for d in pushed.items:
            line, col = kept.from_wire(d["start"])
            sev = d["severity"]
            sev = SEVERITY[sev] if isinstance(sev, int) and 0 < sev < 5 else "error"
            src = f" [{d['source']}]" if d["source"] else ""
            msg = " ".join(d["message"].split())
            rows.append((ctx.rel(p), line, col, f"{sev}: {msg}{src}"))
    out = [f"{p}:{n}:{col}: {t}" for p, n, col, t in sorted(rows)] + cut
    if late:
        out.append(f"[lsp_diagnostics: no diagnostics pushed within {wait:g}s for "
                   f"{len(late)} file{'s' if len(late) > 1 else ''}: "
                   f"{', '.join(ctx.rel(uri_path(u) or u) for u in late[:5])}]")
    return "\n".join(out) + "\n" if out else "no diagnostics\n"


async def _wait_pushes(c: Client, uris: list[str], mark: int, wait: float) -> list[str]:
    """Wait (bounded by `wait`) until each uri has a push newer than `mark`, then for the
    server to be quiet for SETTLE seconds (servers such as tsserver push the syntactic
    diagnostics first and the semantic ones a moment later); the uris never pushed."""
    deadline = time.monotonic() + wait

    def left() -> list[str]:
        return [u for u in uris if u not in c.diagnostics or c.diagnostics[u].n <= mark]

    async def until(pred: Any, end: float) -> None:
        async with c.pushed:
            while not pred() and time.monotonic() < end and not c.broken:
                try:
                    await asyncio.wait_for(c.pushed.wait(), end - time.monotonic())
                except asyncio.TimeoutError:
                    return
    await until(lambda: not left(), deadline)
    if uris and not left():
        while time.monotonic() < deadline:
            seen = c.pushes
            await until(lambda: c.pushes != seen, min(deadline, time.monotonic() + SETTLE))
            if c.pushes == seen:
                break
    return left()
