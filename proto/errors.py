"""The codec's one exception: input whose framing is broken raises ProtocolError.

A frame whose framing is sound but whose content is bad (a string that is not UTF-8, a
stat[n] that is not one whole Dir) is not an exception: it decodes to a `Malformed`
(messages.py), one bad request rather than a broken stream."""


class ProtocolError(ValueError):
    """Raised for 9P2000 input whose framing is broken (a size, type, count or string
    length that does not fit the frame, bytes left over): the stream cannot be trusted."""
