# toolsrv/tree/resident/lspproto.py — the client side of the Language Server Protocol, spoken by
# toolsrv to a resident language server (through tree/resident/lspbridge.py, its parent in the sandbox).
#
# Theory of operation.  LSP is JSON-RPC 2.0 in frames: `Content-Length: N\r\n\r\n` and N
# bytes of UTF-8 JSON.  `Deframer` is the pure half (bytes in, messages out, LSPError on
# malformed framing); `Client` drives one server over a resident Process (`send(bytes)`,
# `async chunk() -> bytes`).  Unlike MCP, a language server talks when it likes
# (diagnostics, progress, requests of its own), so a reader task runs for the life of the
# process and dispatches every message:
#   - a response resolves the future of our request with that id;
#   - a request of the server is answered at once, so no server ever waits on us:
#     workspace/configuration -> the .meta's `settings` (or null) per item;
#     window/workDoneProgress/create, client/(un)registerCapability, */refresh,
#     window/showMessageRequest -> null; workspace/workspaceFolders -> the root;
#     workspace/applyEdit -> not applied (edits are toolsrv's, made by lsp_rename);
#     anything else -> "method not found";
#   - textDocument/publishDiagnostics is kept (the latest) for a document we have open
#     under the root only, cut to MAX_DIAGNOSTICS of MAX_MESSAGE characters, with a
#     condition for lsp_diagnostics to wait on; other notifications are dropped.
# Bounds (the server is untrusted; its bytes must not stall the loop or grow toolsrv):
# a message is at most MAX_FRAME bytes and MAX_VALUES JSON values (counted in C before it
# is parsed on the loop); from one call's start to the next the server may send MAX_SENT
# bytes; the documents' text and the diagnostics held for it are at most MAX_HELD
# characters; what we send and it has not read, MAX_QUEUED bytes (its requests are answered
# whether it reads or not).  Past any, the server is ended (Client.stop) and the call says
# why.
# Documents: `sync(path)` reads the file through the bridge (toolsrv/read, which answers
# "unchanged" on an unchanged mtime and size; the text comes as base64, so the values of a
# file's text are not counted as JSON values) and sends didOpen the first time, didChange
# (full text, next version) when the file changed on disk since.  Positions on the wire are
# UTF-16 code units (the protocol's default); `Doc` converts to and from 1-based columns in
# characters, in C (one encode of a line that has characters past U+FFFF, kept).  lsprotocol is used for the method names and enums only (see doc/tools.md,
# "Language servers": its cattrs converters cost more start-up than they save here).
from __future__ import annotations

import asyncio
import base64
import itertools
import json
import os
from typing import Any

MAX_FRAME = 64 * 2**20     # bytes of one message
MAX_VALUES = 2**20         # JSON values of one message (json.loads takes ~0.1 s on these)
MAX_SENT = 256 * 2**20     # bytes a server may send from one call's start to the next's
MAX_HELD = 256 * 2**20     # characters of documents and diagnostics held for one server
MAX_DIAGNOSTICS = 1000     # diagnostics kept per document
MAX_MESSAGE = 1000         # characters of a diagnostic's message (or source) kept
MAX_QUEUED = 320 * 2**20   # bytes sent to a server and not yet read by it
SPLIT = 2**20              # characters split into lines at once (one C call, ~10 ms)


class LSPError(Exception):
    """The server broke the protocol or ended: the process must go."""


class ResponseError(Exception):
    """A JSON-RPC error response: the request failed, the server is fine."""

    def __init__(self, code: Any, message: str) -> None:
        super().__init__(f"{message} (lsp error {code})")
        self.code = code


def frame(msg: dict[str, Any]) -> bytes:
    """One message as a frame."""
    body = json.dumps(msg, ensure_ascii=False, separators=(",", ":")).encode()
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


class Deframer:
    """Bytes in, messages out: feed(data), then messages() until it returns []."""

    def __init__(self, max_frame: int = MAX_FRAME) -> None:
        self.buf = bytearray()
        self.max_frame = max_frame

    def feed(self, data: bytes) -> list[Any]:
        self.buf += data
        out: list[Any] = []
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                if len(self.buf) > 8192:
                    raise LSPError("header over 8192 bytes without an end")
                return out
            length = None
            for line in bytes(self.buf[:end]).split(b"\r\n"):
                name, colon, value = line.partition(b":")
                if not colon:
                    raise LSPError(f"bad header line {line[:40]!r}")
                if name.strip().lower() == b"content-length":
                    try:
                        length = int(value.strip())
                    except ValueError:
                        raise LSPError(f"bad Content-Length {value[:20]!r}") from None
            if length is None or not 0 <= length <= self.max_frame:
                raise LSPError(f"no usable Content-Length (limit {self.max_frame} bytes)")
            if len(self.buf) < end + 4 + length:
                return out
            body = bytes(self.buf[end + 4:end + 4 + length])
            del self.buf[:end + 4 + length]
            values = body.count(b",") + body.count(b"[") + body.count(b"{")
            if values > MAX_VALUES:     # a value past a container's first follows a comma
                raise LSPError(f"a message of {length} bytes holds up to {values} JSON "
                               f"values (limit {MAX_VALUES})")
            try:
                out.append(json.loads(body))
            except (ValueError, RecursionError):
                raise LSPError(f"not JSON: {body[:40]!r}") from None


def split_lines(text: str) -> list[str]:
    """text.split("\n"), about SPLIT characters at a time: in a worker thread the loop
    gets its turns between the pieces (one split of 8 MiB of short lines holds the GIL
    for a third of a second)."""
    out: list[str] = []
    at = 0
    while True:
        end = text.find("\n", at + SPLIT) if len(text) - at > SPLIT else -1
        if end < 0:
            return out + text[at:].split("\n")
        out += text[at:end].split("\n")
        at = end + 1


async def lines_of(text: str) -> list[str]:
    """A text's lines: split here when short, else in a worker thread."""
    return split_lines(text) if len(text) <= SPLIT else \
        await asyncio.to_thread(split_lines, text)


class Doc:
    """One synced file: its text, lines, version, stamp on disk."""

    def __init__(self, uri: str, path: str, text: str, stamp: Any, version: int = 1,
                 lines: list[str] | None = None) -> None:
        self.uri, self.path, self.stamp, self.version = uri, path, stamp, version
        self.set(text, lines)

    def set(self, text: str, lines: list[str] | None = None) -> None:
        """The text, and its lines when they are known (split_lines)."""
        self.text = text
        self.lines = split_lines(text) if lines is None else lines
        self.wide: dict[int, bytes | None] = {}   # line -> its UTF-16, or None: all BMP

    def line(self, n0: int) -> str:
        """Line n0 (0-based) without its end of line; "" past the end."""
        return self.lines[n0].rstrip("\r") if 0 <= n0 < len(self.lines) else ""

    def to_wire(self, line1: int, col1: int) -> dict[str, int]:
        """1-based line and column in characters -> an LSP Position (UTF-16)."""
        text = self.line(line1 - 1)[:max(0, col1 - 1)]
        return {"line": line1 - 1, "character": utf16_len(text) + max(0, col1 - 1 - len(text))}

    def from_wire(self, pos: dict[str, Any]) -> tuple[int, int]:
        """An LSP Position -> 1-based (line, column in characters); a column past the end
        of its line counts on (as the old walk did), a surrogate half rounds up."""
        n0, units = int(pos.get("line", 0)), int(pos.get("character", 0))
        if n0 not in self.wide:
            text = self.line(n0)
            self.wide[n0] = text.encode("utf-16-le", "surrogatepass") \
                if text and max(text) > "\uffff" else None
        wide = self.wide[n0]
        if wide is None or units <= 0:
            return n0 + 1, max(0, units) + 1
        have = len(wide) // 2
        if units >= have:
            return n0 + 1, len(self.line(n0)) + 1 + units - have
        return n0 + 1, len(wide[:2 * units].decode("utf-16-le", "surrogatepass")) + 1


def utf16_len(text: str) -> int:
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def path_uri(path: str) -> str:
    from urllib.parse import quote
    return "file://" + quote(path)


def uri_path(uri: str) -> str | None:
    """A file uri's path, normalised (no `..`, links not followed); None for another."""
    from urllib.parse import unquote, urlparse
    u = urlparse(uri)
    return os.path.normpath(unquote(u.path)) if u.scheme == "file" and u.path else None


def under(path: str, root: str) -> bool:
    """Whether normalised `path` lies inside directory `root` (not the root itself)."""
    return path.startswith(root.rstrip("/") + "/")


class Pushed:
    """The latest diagnostics a server pushed for one document, as kept: at most
    MAX_DIAGNOSTICS (`dropped` more were sent), each cut to what lsp_diagnostics shows."""

    def __init__(self, n: int, items: list[Any]) -> None:
        self.n, self.dropped = n, max(0, len(items) - MAX_DIAGNOSTICS)
        self.items = [_diagnostic(d) for d in items[:MAX_DIAGNOSTICS] if isinstance(d, dict)]
        self.size = sum(len(d["message"]) + len(d["source"]) + 64 for d in self.items)


def _diagnostic(d: dict[str, Any]) -> dict[str, Any]:
    rng = d.get("range")
    start = rng.get("start") if isinstance(rng, dict) else None
    sev = d.get("severity")

    def cut(v: Any) -> str:
        text = v if isinstance(v, str) else ""
        return text if len(text) <= MAX_MESSAGE else text[:MAX_MESSAGE] + " [cut]"
    return {"start": start if isinstance(start, dict) else {},
            "severity": sev if isinstance(sev, int) else None,
            "source": cut(d.get("source")), "message": cut(d.get("message"))}


CAPABILITIES: dict[str, Any] = {
    "general": {"positionEncodings": ["utf-16"]},
    "workspace": {"configuration": True, "workspaceFolders": True, "applyEdit": False,
                  "symbol": {"dynamicRegistration": False},
                  "didChangeConfiguration": {"dynamicRegistration": False}},
    "window": {"workDoneProgress": True},
    "textDocument": {
        "synchronization": {"didSave": False, "dynamicRegistration": False},
        "definition": {"linkSupport": True}, "references": {}, "declaration": {},
        "hover": {"contentFormat": ["plaintext", "markdown"]},
        "documentSymbol": {"hierarchicalDocumentSymbolSupport": True},
        "rename": {"prepareSupport": False},
        "callHierarchy": {},
        "publishDiagnostics": {"relatedInformation": False, "versionSupport": True},
    },
}


class Client:
    """One language server's client over a resident Process; see the module's header."""

    def __init__(self, proc: Any, root: str, settings: Any = None) -> None:
        self.proc, self.root, self.settings = proc, root, settings
        self.ids = itertools.count(1)
        self.waiting: dict[int, asyncio.Future[Any]] = {}
        self.docs: dict[str, Doc] = {}
        self.peeked: dict[str, Doc] = {}      # files read for their lines, not opened
        self.diagnostics: dict[str, Pushed] = {}
        self.pushes = 0
        self.sent = 0                  # bytes read since the call began (MAX_SENT)
        self.pushed = asyncio.Condition()
        self.capabilities: dict[str, Any] = {}
        self.info: dict[str, Any] = {}
        self.broken: str | None = None
        self.reader = asyncio.ensure_future(self._read())

    # -- the wire --
    def _send(self, msg: dict[str, Any]) -> None:
        self.proc.send(frame(msg))
        if getattr(self.proc, "queued", 0) > MAX_QUEUED:
            self.stop(f"the language server does not read what toolsrv sends (over "
                      f"{MAX_QUEUED >> 20} MiB queued)")

    def notify(self, method: str, params: Any) -> None:
        self._send({"jsonrpc": "2.0", "method": method, "params": params})

    async def request(self, method: str, params: Any) -> Any:
        """The result of one request; ResponseError on an error response, LSPError when the
        process broke (the caller's timeout bounds the wait)."""
        if self.broken:
            raise LSPError(self.broken)
        rid = next(self.ids)
        fut = self.waiting[rid] = asyncio.get_running_loop().create_future()
        try:
            self._send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
            return await fut
        except asyncio.CancelledError:
            if not self.broken and not method.startswith("toolsrv/"):
                self.notify("$/cancelRequest", {"id": rid})
            raise
        finally:
            self.waiting.pop(rid, None)

    async def _read(self) -> None:
        deframer = Deframer()
        try:
            while True:
                data = await self.proc.chunk()
                self.sent += len(data)
                if self.sent > MAX_SENT:
                    raise LSPError(f"the language server sent over {MAX_SENT >> 20} MiB "
                                   "since the call began (its byte budget)")
                for msg in deframer.feed(data):
                    self._dispatch(msg)
        except Exception as e:        # Ended, LSPError: every waiter hears why
            self.stop(str(e) or type(e).__name__)

    def begin(self) -> None:
        """A call begins: the server's byte budget (MAX_SENT) starts again."""
        self.sent = 0

    def stop(self, why: str) -> None:
        """The server must go: every waiter, and every later request, hears why; the
        process is ended now (nothing reads it any more)."""
        if self.broken:
            return
        self.broken = why
        for fut in self.waiting.values():
            if not fut.done():
                fut.set_exception(LSPError(why))
        end = getattr(self.proc, "end", None)
        if end is not None:
            end(why)

    def held(self) -> int:
        """Characters held for this server: its documents' text and its diagnostics."""
        return sum(len(d.text) for d in self.docs.values()) + \
            sum(len(d.text) for d in self.peeked.values()) + \
            sum(p.size for p in self.diagnostics.values())

    def _check_held(self) -> None:
        if self.held() > MAX_HELD:
            self.stop(f"the files and diagnostics held for the language server passed "
                      f"{MAX_HELD >> 20} MiB (its byte budget)")
            raise LSPError(str(self.broken))

    def _dispatch(self, msg: Any) -> None:
        if not isinstance(msg, dict):
            return
        if "method" in msg:
            if "id" in msg:
                self._send({"jsonrpc": "2.0", "id": msg["id"], **self._answer(msg)})
            elif msg["method"] == "textDocument/publishDiagnostics":
                self._keep_diagnostics(msg.get("params") or {})
            return
        fut = self.waiting.get(msg.get("id"))  # type: ignore[arg-type]
        if fut is None or fut.done():
            return                             # a response to a request we gave up on
        err = msg.get("error")
        if isinstance(err, dict):
            fut.set_exception(ResponseError(err.get("code"), str(err.get("message"))))
        else:
            fut.set_result(msg.get("result"))

    def _answer(self, msg: dict[str, Any]) -> dict[str, Any]:
        method, params = msg["method"], msg.get("params") or {}
        if method == "workspace/configuration":
            items = params.get("items") if isinstance(params, dict) else None
            return {"result": [self._setting(i) for i in (items or [])]}
        if method == "workspace/workspaceFolders":
            return {"result": [self.folder()]}
        if method == "workspace/applyEdit":
            return {"result": {"applied": False, "failureReason": "toolsrv applies edits "
                               "itself (lsp_rename)"}}
        if method in ("window/workDoneProgress/create", "client/registerCapability",
                      "client/unregisterCapability", "window/showMessageRequest",
                      "window/showDocument") or method.endswith("/refresh"):
            return {"result": None}
        return {"error": {"code": -32601, "message": f"method not found: {method}"}}

    def _setting(self, item: Any) -> Any:
        if not isinstance(self.settings, dict) or not isinstance(item, dict):
            return None
        value: Any = self.settings
        for part in str(item.get("section") or "").split("."):
            if part:
                value = value.get(part) if isinstance(value, dict) else None
        return value

    def _keep_diagnostics(self, params: dict[str, Any]) -> None:
        uri, items = params.get("uri"), params.get("diagnostics")
        path = uri_path(uri) if isinstance(uri, str) else None
        if path is None or not isinstance(items, list) or not under(path, self.root):
            return
        uri = path_uri(path)
        if uri not in self.docs:            # only documents we opened
            return
        self.pushes += 1
        self.diagnostics[uri] = Pushed(self.pushes, items)
        self._check_held()
        asyncio.ensure_future(self._wake_pushed())

    async def _wake_pushed(self) -> None:
        async with self.pushed:
            self.pushed.notify_all()

    # -- the handshake --
    def folder(self) -> dict[str, str]:
        return {"uri": path_uri(self.root), "name": os.path.basename(self.root) or "/"}

    async def initialize(self, options: Any = None) -> dict[str, Any]:
        res = await self.request("initialize", {
            "processId": None, "rootUri": path_uri(self.root), "rootPath": self.root,
            "workspaceFolders": [self.folder()], "capabilities": CAPABILITIES,
            "clientInfo": {"name": "toolsrv", "version": "1"},
            "initializationOptions": options})
        if not isinstance(res, dict):
            raise LSPError(f"initialize: no result object: {json.dumps(res)[:60]}")
        self.info = res
        caps = res.get("capabilities")
        self.capabilities = caps if isinstance(caps, dict) else {}
        self.notify("initialized", {})
        if self.settings is not None:
            self.notify("workspace/didChangeConfiguration", {"settings": self.settings})
        return res

    def supports(self, capability: str) -> bool:
        """Whether the server offered `capability` (e.g. "definitionProvider")."""
        v = self.capabilities.get(capability)
        return v is not None and v is not False

    # -- files, through the bridge --
    async def read(self, path: str, known: Any = None) -> dict[str, Any]:
        """The bridge's toolsrv/read: {unchanged: true} or {text, stamp}."""
        res = await self.request("toolsrv/read", {"path": path, "known": known})
        if isinstance(res, dict) and isinstance(res.get("data"), str):
            try:
                res["text"] = base64.b64decode(res.pop("data")).decode("utf-8")
            except ValueError:
                raise LSPError("toolsrv/read: data not base64 of UTF-8") from None
        return res

    async def write(self, doc: Doc, text: str, lines: list[str]) -> None:
        res = await self.request("toolsrv/write", {"path": doc.path, "text": text,
                                                   "stamp": doc.stamp})
        doc.stamp = res.get("stamp") if isinstance(res, dict) else None
        doc.version += 1
        doc.set(text, lines)
        self._check_held()
        self.notify("textDocument/didChange", {
            "textDocument": {"uri": doc.uri, "version": doc.version},
            "contentChanges": [{"text": text}]})

    async def sync(self, path: str, language: str) -> tuple[Doc, bool]:
        """The document at absolute `path`, opened or brought up to date with the disk;
        (it, whether it was sent to the server just now)."""
        uri = path_uri(path)
        doc = self.docs.get(uri)
        res = await self.read(path, doc.stamp if doc is not None else None)
        if doc is not None and res.get("unchanged"):
            return doc, False
        text = res.get("text")
        if not isinstance(text, str):
            raise LSPError("toolsrv/read: no text")
        lines = await lines_of(text)
        if doc is None:
            doc = self.docs[uri] = Doc(uri, path, text, res.get("stamp"), lines=lines)
            self._check_held()
            self.notify("textDocument/didOpen", {"textDocument": {
                "uri": uri, "languageId": language, "version": doc.version, "text": text}})
            return doc, True
        doc.stamp, doc.version = res.get("stamp"), doc.version + 1
        doc.set(text, lines)
        self._check_held()
        self.notify("textDocument/didChange", {
            "textDocument": {"uri": uri, "version": doc.version},
            "contentChanges": [{"text": text}]})
        return doc, True

    async def peek(self, path: str) -> Doc | None:
        """A file's text for showing lines (synced docs as they are; others read, and kept
        while their stamp holds)."""
        uri = path_uri(path)
        if uri in self.docs:
            return self.docs[uri]
        had = self.peeked.get(path)
        try:
            res = await self.read(path, had.stamp if had is not None else None)
        except ResponseError:
            return None
        if had is not None and isinstance(res, dict) and res.get("unchanged"):
            return had
        text = res.get("text") if isinstance(res, dict) else None
        if not isinstance(text, str):
            return None
        if len(self.peeked) > 256 or self.held() + len(text) > MAX_HELD:
            self.peeked.clear()         # a cache: emptied before it costs the budget
        doc = self.peeked[path] = Doc(uri, path, text, res.get("stamp"),
                                      lines=await lines_of(text))
        self._check_held()
        return doc

    def close(self) -> None:
        self.reader.cancel()


def bridge_argv(server: list[str] | tuple[str, ...]) -> list[str]:
    """The resident command for a language server: the bridge (tree/resident/lspbridge.py, given as
    source so the sandbox needs no grant for it) in this interpreter, then the server."""
    import sys
    src = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "lspbridge.py"),
               encoding="utf-8").read()
    return [sys.executable, "-I", "-c", src, "--", *server]
