"""Names that become path elements of the served tree: tools, sessions, agents.

A name is 1-128 characters of ASCII letters, digits, '.', '_' and '-', and is neither '.'
nor '..'.  That keeps every name a single, harmless path element (no '/', no NUL, no
whitespace, nothing a shell or 9P client treats specially) and short enough for any
client's buffers.  One definition, shared by the registry (tool names come from
`<name>.meta` file names) and by sessions (`mkdir session/<id>`, `agent/<name>`).
"""

from __future__ import annotations

import re

NAME_MAX = 128
_NAME = re.compile(r"[A-Za-z0-9._-]+", re.ASCII)
_ALLOWED = "letters, digits, '.', '_' and '-'"


def valid_name(s: object) -> bool:
    """True when `s` is a string usable as a tool, session or agent name."""
    return (
        isinstance(s, str)
        and 0 < len(s) <= NAME_MAX
        and _NAME.fullmatch(s) is not None
        and s not in (".", "..")
    )


def check_name(s: object, what: str) -> None:
    """Raise ValueError with a message naming `what` ("tool", "session", ...) if `s` is
    not a valid name; return None otherwise."""
    if valid_name(s):
        return
    if not isinstance(s, str):
        raise ValueError(f"bad {what} name: must be a string")
    if not s:
        raise ValueError(f"bad {what} name: empty")
    if len(s) > NAME_MAX:
        raise ValueError(f"bad {what} name: {len(s)} characters, at most {NAME_MAX}")
    if s in (".", ".."):
        raise ValueError(f"bad {what} name {s!r}: reserved")
    bad = next(c for c in s if not _NAME.fullmatch(c))
    raise ValueError(f"bad {what} name {s!r}: {bad!r} not allowed (use {_ALLOWED})")
