"""A hostile 'remote toolsrv' for the import tests (issue 43): a plain 9P2000 server on a
loopback TCP port, on a thread, that answers the front's requests as a remote host might
to hurt it.  It counts what it was asked (`treads`) and how much of a frame the front
took before hanging up (`frame_sent`), so a test checks a bound, not a time.

Modes:
  bigframe   Rversion announces msize 2 GiB; the first read of tools/index is answered
             with the header of a BIG-byte Rread, then its body in 1 MiB pieces for as
             long as the front reads it.
  tinymsize  Rversion announces msize 24 (IOHDRSZ): a read of count 0 a round trip.
  longread   every Rread holds one byte more than its Tread asked.
  names      tools/index holds hostile names (NUL, '/', '..', escape sequences) and a
             local tool's; descriptions end in escape sequences; the meta of `err_tool`
             and any `call` are answered with an Rerror holding them.
  amplify    `tools` tools whose meta holds JUNK `{}`s in a field toolsrv does not use,
             and whose schema holds SCHEMA_JUNK `[]`s: 2 or 3 bytes each on the wire, about
             70 in the memory of a front that keeps them.
"""
from __future__ import annotations

import json
import socket
import struct
import threading

BIG = 128 << 20
JUNK, SCHEMA_JUNK = 100_000, 40_000
ESC = "\x1b]0;owned\x07\x1b[2J"
NAMES = ["ok_tool", "err_tool", "a/b", "..", "x\0y", "file_read", "a" * 200, ESC + "x"]


def _s(x: str | bytes) -> bytes:
    b = x.encode("utf-8", "surrogateescape") if isinstance(x, str) else x
    return struct.pack("<H", len(b)) + b


def _r(t: int, tag: int, body: bytes) -> bytes:
    return struct.pack("<IBH", 7 + len(body), t, tag) + body


def _qid(path: int, d: bool = False) -> bytes:
    return struct.pack("<BIQ", 0x80 if d else 0, 0, path)


def _error(tag: int, ename: str) -> bytes:
    return _r(107, tag, _s(ename))


class Hostile:
    """`with Hostile(mode) as h:` h.addr is its tcp! address."""

    def __init__(self, mode: str, tools: int = 1) -> None:
        self.mode, self.tools = mode, tools
        if mode == "amplify":
            self.meta = json.dumps({"description": "d", "junk": [{}] * JUNK},
                                   separators=(",", ":")).encode()
            self.schema = json.dumps({"type": "object", "x-junk": [[]] * SCHEMA_JUNK},
                                     separators=(",", ":")).encode()
        self.treads = 0             # Treads received after Rversion
        self.frame_sent = 0         # bytes of the big frame the front took
        self.hung_up = threading.Event()     # the front closed a connection on us
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.addr = f"tcp!127.0.0.1!{self.sock.getsockname()[1]}"
        self.conns: list[socket.socket] = []

    def __enter__(self) -> "Hostile":
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.sock.close()
        for c in self.conns:
            c.close()

    def _accept(self) -> None:
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(c)
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def content(self, path: tuple[str, ...]) -> bytes | str | None:
        """A file's bytes, a str for an Rerror, or None for an empty file."""
        if path == ("revision",):
            return b"1\n"
        if path == ("tools", "index"):
            names = NAMES if self.mode == "names" else [
                f"t{i}" for i in range(self.tools)] if self.mode == "amplify" else ["ok_tool"]
            return "".join(f"{n}\thot\thostile tool\n" for n in names).encode(
                "utf-8", "surrogateescape")
        if path and path[-1] == "call":
            return f"{ESC}exit 3 (input/output error): {ESC}boom"
        if len(path) == 3 and path[0] == "tools":
            if self.mode == "amplify" and path[2] in ("meta", "schema"):
                return self.meta if path[2] == "meta" else self.schema
            if path[1] == "err_tool" and path[2] == "meta":
                return f"{ESC}meta: {ESC}unreadable (input/output error)"
            if path[2] == "meta":
                return json.dumps({"description": f"remote {path[1]} {ESC}",
                                   "readOnly": True}).encode()
            if path[2] == "schema":
                return b'{"type": "object"}'
            if path[2] == "prompt":
                return b"prompt\n"
        return None

    def _serve(self, c: socket.socket) -> None:
        fids: dict[int, tuple[str, ...]] = {}
        buf = b""
        try:
            while True:
                d = c.recv(65536)
                if not d:
                    self.hung_up.set()
                    return
                buf += d
                while len(buf) >= 4 and len(buf) >= struct.unpack("<I", buf[:4])[0]:
                    n = struct.unpack("<I", buf[:4])[0]
                    m, buf = buf[:n], buf[n:]
                    self._answer(c, m[4], struct.unpack("<H", m[5:7])[0], m[7:], fids)
        except OSError:
            self.hung_up.set()

    def _answer(self, c: socket.socket, t: int, tag: int, b: bytes,
                fids: dict[int, tuple[str, ...]]) -> None:
        if t == 100:                                        # Tversion
            ms = {"bigframe": 0x7FFFFFFF, "tinymsize": 24}.get(
                self.mode, struct.unpack("<I", b[:4])[0])
            c.sendall(_r(101, tag, struct.pack("<I", ms) + _s("9P2000")))
        elif t == 104:                                      # Tattach
            fids[struct.unpack("<I", b[:4])[0]] = ()
            c.sendall(_r(105, tag, _qid(1, True)))
        elif t == 110:                                      # Twalk
            fid, newfid, nw = struct.unpack("<IIH", b[:10])
            p, names = 10, []
            for _ in range(nw):
                n = struct.unpack("<H", b[p:p + 2])[0]
                names.append(b[p + 2:p + 2 + n].decode("utf-8", "surrogateescape"))
                p += 2 + n
            fids[newfid] = fids.get(fid, ()) + tuple(names)
            c.sendall(_r(111, tag, struct.pack("<H", nw) +
                         b"".join(_qid(2 + i) for i in range(nw))))
        elif t == 112:                                      # Topen
            c.sendall(_r(113, tag, _qid(9) + struct.pack("<I", 0)))
        elif t == 114:                                      # Tcreate: there already
            c.sendall(_error(tag, "file already exists"))
        elif t == 116:                                      # Tread
            self._read(c, tag, b, fids)
        elif t == 118:                                      # Twrite
            c.sendall(_r(119, tag, struct.pack("<I", struct.unpack("<IQI", b[:16])[2])))
        elif t in (120, 122):                               # Tclunk, Tremove
            fids.pop(struct.unpack("<I", b[:4])[0], None)
            c.sendall(_r(t + 1, tag, b""))
        elif t == 108:                                      # Tflush
            c.sendall(_r(109, tag, b""))
        else:
            c.sendall(_error(tag, "not supported"))

    def _read(self, c: socket.socket, tag: int, b: bytes,
              fids: dict[int, tuple[str, ...]]) -> None:
        fid, off, cnt = struct.unpack("<IQI", b[:16])
        path = fids.get(fid, ())
        self.treads += 1
        if path == ("revwait",):
            return                                          # never answered
        if self.mode == "bigframe" and path == ("tools", "index") and not self.frame_sent:
            c.sendall(struct.pack("<IBHI", 11 + BIG, 117, tag, BIG))
            piece = b"x" * (1 << 20)
            while self.frame_sent < BIG:
                c.sendall(piece)         # raises once the front hangs up
                self.frame_sent += len(piece)
            return
        data = self.content(path)
        if isinstance(data, str):
            c.sendall(_error(tag, data))
            return
        data = (data or b"")[off:off + cnt]
        if self.mode == "longread":
            data = (data + b"\n" * (cnt + 1))[:cnt + 1]
        c.sendall(_r(117, tag, struct.pack("<I", len(data)) + data))
