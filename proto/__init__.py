"""proto: a sans-I/O codec for 9P2000 (intro(5)).

Bytes in, immutable message objects out, and back.  Nothing here touches
sockets, asyncio or logging; the server and the client each wrap it in their
own I/O.  Two kinds of bad input (codec.py): what breaks the framing raises
ProtocolError, the codec's one exception (errors.py); a sound frame whose content
breaks intro(5) decodes to a `Malformed` (messages.py), which the server answers
with Rerror.

const.py the constants; messages.py one class per message; codec.py the codec;
framing.py a byte stream into whole messages; fmt.py their one-line text form,
imported on first use.  Imports nothing outside proto/, and nothing of the rest of
toolsrv imports into it (tests/test_layout.py).
"""
from .const import *  # noqa: F401,F403
from .errors import ProtocolError
from .messages import *  # noqa: F401,F403
from .codec import encode, decode, encode_dir, decode_dir, decode_dirs, dir_size  # noqa: F401
from .framing import Framer  # noqa: F401

_FMT = ("format_dir", "format_msg", "parse_msg")


def __getattr__(name: str):
    """proto.fmt's functions, imported on first use: the text form is for traces and tests,
    and its regular expressions cost start-up time."""
    if name in _FMT:
        from . import fmt
        value = globals()[name] = getattr(fmt, name)
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
