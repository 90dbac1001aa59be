"""The LSP client's pure half (framing, positions) fed in every way, and its dispatch
against a real process that asks what language servers ask before they answer
(workspace/configuration, window/workDoneProgress/create, client/registerCapability)."""
from __future__ import annotations

import asyncio
import json
import os
import sys
import textwrap

import pytest
from hypothesis import given, settings, strategies as st

from toolsrv.tree.resident.lspproto import Client, Deframer, Doc, LSPError, frame

MSGS = [{"jsonrpc": "2.0", "id": 1, "result": {"a": "é" * 3}},
        {"jsonrpc": "2.0", "method": "textDocument/publishDiagnostics",
         "params": {"uri": "file:///x.py", "diagnostics": []}}]


def test_frames_fed_whole_byte_by_byte_and_with_trailing_data():
    data = b"".join(frame(m) for m in MSGS)
    assert Deframer().feed(data) == MSGS
    d, got = Deframer(), []
    for i in range(len(data)):
        got += d.feed(data[i:i + 1])
    assert got == MSGS
    d = Deframer()
    assert d.feed(data + b"Content-Length: 9\r\n\r\n{\"a\"") == MSGS
    assert d.feed(b":  1}") == [{"a": 1}]


def test_headers_other_than_the_length_are_ignored_and_case_does_not_matter():
    body = b'{"id":1}'
    raw = b"content-type: application/vscode-jsonrpc; charset=utf-8\r\ncontent-length: %d" \
          b"\r\n\r\n" % len(body) + body
    assert Deframer().feed(raw) == [{"id": 1}]


@pytest.mark.parametrize("raw, words", [
    (b"Content-Length: x\r\n\r\n{}", "bad Content-Length"),
    (b"Content-Type: a\r\n\r\n{}", "no usable Content-Length"),
    (b"Content-Length: 99999999999\r\n\r\n", "no usable Content-Length"),
    (b"garbage\r\n\r\n", "bad header line"),
    (b"Content-Length: 2\r\n\r\n{x", "not JSON"),
    (b"x" * 9000, "header over 8192 bytes"),
])
def test_malformed_frames_raise_the_protocol_error(raw, words):
    with pytest.raises(LSPError, match=words):
        Deframer().feed(raw)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_any_input_parses_or_raises_the_protocol_error(data):
    try:
        Deframer().feed(data)
    except LSPError:
        pass


def test_positions_convert_between_characters_and_utf16():
    doc = Doc("file:///x", "/x", "a = '𝄞é'; b\nsecond\n", None)
    # column 10 (1-based, characters) is `b`: the clef is two UTF-16 units
    assert doc.to_wire(1, 10) == {"line": 0, "character": 10}
    assert doc.from_wire({"line": 0, "character": 10}) == (1, 10)
    assert doc.from_wire({"line": 1, "character": 0}) == (2, 1)
    assert doc.to_wire(2, 3) == {"line": 1, "character": 2}


SERVER = textwrap.dedent(r'''
    import json, sys
    def send(m):
        b = json.dumps(m).encode()
        sys.stdout.buffer.write(b"Content-Length: %d\r\n\r\n" % len(b) + b); sys.stdout.flush()
    def recv():
        n = None
        while True:
            line = sys.stdin.buffer.readline()
            if line in (b"\r\n", b""):
                break
            if line.lower().startswith(b"content-length:"):
                n = int(line.split(b":")[1])
        return json.loads(sys.stdin.buffer.read(n))
    init = recv()
    asked = {}
    for i, (method, params) in enumerate([
            ("workspace/configuration", {"items": [{"section": "pylsp.plugins"}, {}]}),
            ("window/workDoneProgress/create", {"token": "t"}),
            ("client/registerCapability", {"registrations": []}),
            ("workspace/applyEdit", {"edit": {}}),
            ("made/up", {})]):
        send({"jsonrpc": "2.0", "id": 100 + i, "method": method, "params": params})
        asked[method] = recv()
    send({"jsonrpc": "2.0", "method": "window/logMessage", "params": {"message": "hi"}})
    send({"jsonrpc": "2.0", "id": init["id"], "result": {"capabilities": {
        "hoverProvider": True}, "serverInfo": {"name": "fake", "asked": asked,
        "root": init["params"]["rootUri"]}}})
    assert recv()["method"] == "initialized"
    send({"jsonrpc": "2.0", "method": "textDocument/publishDiagnostics",
          "params": {"uri": "file:///r/x.py", "diagnostics": [{"message": "m"}]}})
    req = recv()
    while "id" not in req:              # workspace/didChangeConfiguration
        req = recv()
    send({"jsonrpc": "2.0", "id": req["id"], "error": {"code": -32803, "message": "no"}})
''')


class Pipe:
    """A process's pipes as a resident Process offers them: send(bytes), chunk()."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    def send(self, data: bytes) -> None:
        self.proc.stdin.write(data)

    async def chunk(self) -> bytes:
        data = await self.proc.stdout.read(65536)
        if not data:
            raise EOFError("EOF")
        return data


def test_the_servers_requests_are_answered_so_it_never_waits():
    async def go():
        p = await asyncio.create_subprocess_exec(
            sys.executable, "-c", SERVER, stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE)
        c = Client(Pipe(p), "/r", settings={"pylsp": {"plugins": {"pyflakes": {}}}})
        res = await asyncio.wait_for(c.initialize(), 60)
        with pytest.raises(Exception, match=r"no \(lsp error -32803\)"):
            await asyncio.wait_for(c.request("textDocument/hover", {}), 60)
        await asyncio.wait_for(p.wait(), 60)
        c.close()
        return res, c
    res, c = asyncio.run(go())
    asked = res["serverInfo"]["asked"]
    assert asked["workspace/configuration"]["result"] == [{"pyflakes": {}}, {
        "pylsp": {"plugins": {"pyflakes": {}}}}]
    assert asked["window/workDoneProgress/create"]["result"] is None
    assert asked["client/registerCapability"]["result"] is None
    assert asked["workspace/applyEdit"]["result"]["applied"] is False
    assert asked["made/up"]["error"]["code"] == -32601
    assert res["serverInfo"]["root"] == "file:///r"
    assert c.supports("hoverProvider") and not c.supports("renameProvider")
    assert c.pushes == 0 and c.diagnostics == {}    # x.py is not open: not kept


def test_the_bridge_is_standard_library_only():
    """It runs as `python -I -c SOURCE` in the sandbox: no toolsrv import may creep in."""
    import ast
    import toolsrv.tree.resident.lspbridge as bridge
    tree = ast.parse(open(bridge.__file__).read())
    mods = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import)
            for a in n.names} | {n.module.split(".")[0] for n in ast.walk(tree)
                                 if isinstance(n, ast.ImportFrom) and n.module}
    assert mods <= set(sys.stdlib_module_names), mods - set(sys.stdlib_module_names)
    assert os.path.basename(bridge.__file__) == "lspbridge.py"


def test_the_client_capabilities_are_lsp_as_lsprotocol_types_it():
    """What initialize announces is the protocol's ClientCapabilities, key for key: a
    field lsprotocol does not know would be dropped on the way back."""
    pytest.importorskip("lsprotocol", reason="lsprotocol is not installed (the lsp extra)")
    from lsprotocol import converters, types

    from toolsrv.tree.resident.lspproto import CAPABILITIES
    conv = converters.get_converter()
    caps = conv.structure(CAPABILITIES, types.ClientCapabilities)
    assert caps.text_document.document_symbol.hierarchical_document_symbol_support is True
    assert list(caps.general.position_encodings) == [types.PositionEncodingKind.Utf16]
    assert conv.unstructure(caps) == CAPABILITIES


def walk_from_wire(text: str, units: int) -> int:
    """The column the old char-by-char walk gave (the reference for from_wire)."""
    col = seen = 0
    while col < len(text) and seen < units:
        seen += 2 if ord(text[col]) > 0xFFFF else 1
        col += 1
    return col + 1 + max(0, units - seen)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="ab é\u4e00𝄞😀\r", max_size=30), st.integers(-3, 80))
def test_from_wire_gives_the_columns_the_walk_gave(line, units):
    doc = Doc("file:///x", "/x", "first\n" + line + "\nlast", None)
    want = walk_from_wire(doc.line(1), units)
    assert doc.from_wire({"line": 1, "character": units}) == (2, want)
    if units >= 0:
        col = min(want, len(doc.line(1)) + 1)
        assert doc.from_wire(doc.to_wire(2, col)) == (2, col)


def test_a_message_of_too_many_json_values_is_refused_before_it_is_parsed():
    """json.loads of 8 M small values took ~1 s on the loop: a message is counted first
    (its commas and brackets, in C) and refused past MAX_VALUES."""
    from toolsrv.tree.resident.lspproto import MAX_VALUES
    body = b"[" + b"0," * MAX_VALUES + b"0]"
    with pytest.raises(LSPError, match=f"JSON values \\(limit {MAX_VALUES}\\)"):
        Deframer().feed(b"Content-Length: %d\r\n\r\n" % len(body) + body)
    ok = b"[" + b"0," * (MAX_VALUES - 2) + b"0]"
    assert len(Deframer().feed(b"Content-Length: %d\r\n\r\n" % len(ok) + ok)[0]) == MAX_VALUES - 1


@pytest.mark.parametrize("text", ["", "\n", "a", "a\n", "\n\n\nb", "x\n" * 7, "y" * 9,
                                  "ab\ncd\n" * 5 + "e"])
@pytest.mark.parametrize("piece", [1, 2, 3, 5, 2**20])
def test_lines_split_in_pieces_are_the_lines_split_whole(text, piece, monkeypatch):
    from toolsrv.tree.resident import lspproto
    monkeypatch.setattr(lspproto, "SPLIT", piece)
    assert lspproto.split_lines(text) == text.split("\n")
