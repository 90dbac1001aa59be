"""Framer: a byte stream in, whole 9P messages out (sans-I/O, like h11).

Theory of operation
-------------------
`feed` appends what the transport read and returns every message now
complete.  Frames are decoded in place from one buffer with a moving offset,
and the consumed prefix is dropped once per feed, so a read holding many
small frames costs one pass.  When nothing is buffered the caller's bytes are
decoded directly and only the incomplete tail is copied.

Invariants
- A frame's size[4] is checked against `msize` the moment its four bytes are
  present, so a hostile peer cannot make the framer buffer more than msize
  bytes (plus whatever arrived in the same feed after a bad header).
- Input whose framing is broken raises ProtocolError; the framer then stays
  broken (every later feed raises the same error) and drops what it held,
  including messages decoded earlier in the failing feed: the connection is
  done.  A sound frame with bad content comes out as a `Malformed`, in its
  place among the messages, and the stream goes on.
"""
from __future__ import annotations

from .codec import Buffer, decode_frame, frame_size
from .const import IOHDRSZ
from .errors import ProtocolError
from .messages import Malformed, Message

__all__ = ["Framer"]


class Framer:
    """Accumulates a 9P byte stream and yields its messages.

    `msize` bounds every frame; the server raises it after Tversion.
    """

    def __init__(self, msize: int = 8192 + IOHDRSZ) -> None:
        self.msize = msize
        self._buf = bytearray()
        self._error: ProtocolError | None = None

    @property
    def pending(self) -> int:
        """Bytes held of frames not yet complete."""
        return len(self._buf)

    def feed(self, data: Buffer) -> list[Message | Malformed]:
        """Take `data`; return the messages it completes, in order."""
        if self._error is not None:
            raise self._error
        held = self._buf
        if held:
            held += data
            buf: Buffer = held
        else:
            buf = data
        out: list[Message | Malformed] = []
        pos, n, msize = 0, len(buf), self.msize
        try:
            while True:
                size = frame_size(buf, pos, msize)
                if size is None or n - pos < size:
                    break
                out.append(decode_frame(buf, pos, size))
                pos += size
        except ProtocolError as e:
            self._error = e
            held.clear()
            raise
        if buf is held:
            del held[:pos]
        elif pos < n:
            held += buf[pos:]
        return out
