"""The part of every agent's tools.py that speaks 9P (toolsrv/tree/calls/toolspy.py copies
it in, from the marker below on), and what the `script` tool reads tools.py with.

Stdlib only: it runs inside a tool's sandbox.  One connection, the one toolsrv hands a run
whose profile has `general.toolsrv: true` (fd $TOOLSRV_FD), scoped to the run's agent; a
call written through it is a nested call of that run (doc/tools.md, Nested calls).  One
call at a time on it: threads that call tools take turns.
"""
# -- runtime --
import json as _json
import os as _os
import socket as _socket
import struct as _struct
import threading as _threading


class ToolError(Exception):
    """A tool call that failed: `reason` is toolsrv's whole reason (as the agent's log has
    it), `tool` and `arguments` what was called."""

    def __init__(self, tool, reason, arguments=None):
        super().__init__(f"{tool}: {reason}")
        self.tool, self.reason, self.arguments = tool, reason, arguments


_MSIZE = 65536 + 24
_NOFID, _NOTAG = 0xFFFFFFFF, 0xFFFF
_RERROR, _TWALK, _TOPEN, _TREAD, _TWRITE, _TCLUNK = 107, 110, 112, 116, 118, 120


def _s(text):
    b = text.encode()
    return _struct.pack("<H", len(b)) + b


class _Refused(Exception):
    """An Rerror: `got`, the replies before it in its batch."""

    def __init__(self, ename, got=()):
        super().__init__(ename)
        self.got = got


class _Conn:
    """toolsrv's 9P server on fd `fd`, as the run's agent.  Its errors are its Refused
    (the script tool's copy of this runtime makes the connection tools.py uses)."""

    Refused = _Refused

    def __init__(self, fd):
        self.sock = _socket.socket(fileno=fd)
        self.lock = _threading.Lock()
        self.buf = b""
        self.fids = 0
        self.msize = _MSIZE
        body = self._batch([(100, _struct.pack("<I", _MSIZE) + _s("9P2000"))], _NOTAG)[0]
        self.msize = min(_MSIZE, _struct.unpack_from("<I", body)[0])
        agent = _os.environ.get("OLLIE_AGENT", "agent")
        self._batch([(104, _struct.pack("<II", 0, _NOFID) + _s(agent) + _s(""))])

    def _recv(self):
        while True:
            if len(self.buf) >= 7:
                n = _struct.unpack_from("<I", self.buf)[0]
                if len(self.buf) >= n:
                    msg, self.buf = self.buf[:n], self.buf[n:]
                    return msg[4], _struct.unpack_from("<H", msg, 5)[0], msg[7:]
            more = self.sock.recv(1 << 16)
            if not more:
                raise _Refused("the connection to toolsrv closed")
            self.buf += more

    def _batch(self, reqs, tag0=1):
        """Send requests at once; their replies' bodies in order, or _Refused of the first
        Rerror."""
        tags = [tag0 + i if tag0 != _NOTAG else _NOTAG for i in range(len(reqs))]
        self.sock.sendall(b"".join(_struct.pack("<IBH", 7 + len(b), t, tag) + b
                                   for (t, b), tag in zip(reqs, tags)))
        got = {}
        while len(got) < len(reqs):
            typ, tag, body = self._recv()
            got[tag] = (typ, body)
        out = []
        for tag in tags:
            typ, body = got[tag]
            if typ == _RERROR:
                n = _struct.unpack_from("<H", body)[0]
                ename = body[2:2 + n].decode("utf-8", "replace")
                raise _Refused(ename.replace("\u2060", ""), out)   # the words as written
            out.append(body)
        return out

    def _open(self, path, mode, more=()):
        """A new fid on path opened with mode, then the `more` requests (given the fid);
        their replies."""
        self.fids += 1
        fid = self.fids
        names = [p for p in path.split("/") if p]
        walk = _struct.pack("<IIH", 0, fid, len(names)) + b"".join(_s(n) for n in names)
        try:
            got = self._batch([(_TWALK, walk), (_TOPEN, _struct.pack("<IB", fid, mode))]
                              + [(t, b(fid)) for t, b in more])
            return fid, got[2:]
        except _Refused as e:
            self._clunk(fid)
            walked = _struct.unpack_from("<H", e.got[0])[0] if e.got else len(names)
            if walked < len(names):        # the server's words for the name not there
                self._why_not(names, walked)
            raise

    def _why_not(self, names, k):
        """Raise the server's Rerror for a walk of names[k] (a walk of one name that fails
        is an Rerror: "file_read is not loaded for this agent: ...")."""
        self.fids += 2
        a, b = self.fids - 1, self.fids
        try:
            self._batch([(_TWALK, _struct.pack("<IIH", 0, a, k) + b"".join(
                _s(n) for n in names[:k])), (_TWALK, _struct.pack("<IIH", a, b, 1)
                                             + _s(names[k]))])
        finally:
            self._clunk(a)
        self._clunk(b)

    def _clunk(self, fid):
        try:
            self._batch([(_TCLUNK, _struct.pack("<I", fid))])
        except _Refused:
            pass       # a walk that failed made no fid

    def _read_rest(self, fid, data, offset):
        room = self.msize - 24
        out = [data]
        while len(data) == room:
            data = self._batch([(_TREAD, _struct.pack("<IQI", fid, offset, room))])[0][4:]
            out.append(data)
            offset += len(data)
        return b"".join(out)

    def read(self, path):
        """The whole file at path."""
        room = self.msize - 24
        with self.lock:
            fid, (first,) = self._open(path, 0, [(_TREAD, lambda f: _struct.pack(
                "<IQI", f, 0, room))])
            try:
                return self._read_rest(fid, first[4:], len(first) - 4)
            finally:
                self._clunk(fid)

    def rdwr(self, path, data):
        """Write data to path and read the answer on the same fid."""
        room = self.msize - 24
        writes = [(_TWRITE, lambda f, at=at: _struct.pack("<IQI", f, at, len(
            data[at:at + room])) + data[at:at + room]) for at in range(0, len(data) or 1, room)]
        with self.lock:
            fid, got = self._open(path, 2, writes + [(_TREAD, lambda f: _struct.pack(
                "<IQI", f, 0, room))])
            try:
                return self._read_rest(fid, got[-1][4:], len(got[-1]) - 4)
            finally:
                self._clunk(fid)


_conn = None                       # made on the first call
_AGENT = globals().get("_AGENT") or "session/{}/agent/{}".format(
    _os.environ.get("OLLIE_SESSION_ID", ""), _os.environ.get("OLLIE_AGENT", ""))


def _connection():
    global _conn
    if _conn is None:
        fd = _os.environ.get("TOOLSRV_FD")
        if not fd:
            raise ToolError("toolsrv", "no connection to toolsrv: run under a sandbox "
                            "profile with general.toolsrv: true (TOOLSRV_FD is not set)")
        _conn = _Conn(int(fd))
    return _conn


def _whole(c, tool, why):
    """why, or when it was cut to fit a 9P error ("..."), the whole of it from the log."""
    if "..." not in why:
        return why
    try:
        lines = c.read(_AGENT + "/log").decode("utf-8", "replace").splitlines()
    except (c.Refused, OSError):
        return why
    head = why.split("...")[0].rstrip()
    for line in reversed(lines):
        at = line.find(head)
        if f" call {tool} " in line and at >= 0:
            return line[at:]
    return why


def call_tool(name, args=None, structured=False):
    """Call the agent's tool `name` with `args` (a dict; None values are left out): its
    result's text, or the parsed JSON when `structured`.  Raises ToolError."""
    args = {k: v for k, v in (args or {}).items() if v is not None}
    c = _connection()
    try:
        out = c.rdwr(f"{_AGENT}/tools/{name}/call", _json.dumps(args).encode())
    except c.Refused as e:
        raise ToolError(name, _whole(c, name, str(e)), args) from None
    text = out.decode("utf-8", "replace")
    return _json.loads(text) if structured and text.strip() else text
