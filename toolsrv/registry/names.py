"""Names that become path elements of the served tree: tools, sessions, agents.

A name is 1-128 characters of ASCII letters, digits, '.', '_' and '-', and is neither '.'
nor '..'.  That keeps every name a single, harmless path element (no '/', no NUL, no
whitespace, nothing a shell or 9P client treats specially) and short enough for any
client's buffers.  One definition, shared by the registry (tool names come from
`<name>.meta` file names) and by sessions (`mkdir session/<id>`, `agent/<name>`).

A secret's name (a `.meta`'s `"secrets"`, issue 50) is an environment variable's name, and
a file's in the secrets directory (run/secrets.py): a letter or `_`, then letters, digits
and `_`, at most 128; not one toolsrv sets for a run or Python reads as it starts
(RESERVED), so a secret never replaces the run's own settings nor reaches a warm
interpreter's start-up environment, which /status shows.
"""

from __future__ import annotations

import re

NAME_MAX = 128
_NAME = re.compile(r"[A-Za-z0-9._-]+", re.ASCII)
_ALLOWED = "letters, digits, '.', '_' and '-'"
_SECRET = re.compile(r"[A-Za-z_][A-Za-z0-9_]*", re.ASCII)
SECRETS_MAX = 32          # secrets one tool may name
RESERVED = ("PATH", "HOME", "TMPDIR", "PWD", "LANG", "LANGUAGE", "TZ", "TERM", "USER",
            "SHELL", "TRACEPARENT")
RESERVED_PREFIXES = ("LC_", "PYTHON", "LD_", "OLLIE_", "TOOLSRV_")


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


def check_secrets(v: object, where: str = "secrets") -> tuple[str, ...]:
    """A `.meta`'s `secrets`: a list of distinct environment variable names, none reserved;
    ValueError naming `where` and what is wrong (the registry lists it in tools/errors)."""
    if not isinstance(v, list):
        raise ValueError(f"{where}: must be an array of names, not {type(v).__name__}")
    if len(v) > SECRETS_MAX:
        raise ValueError(f"{where}: {len(v)} names, at most {SECRETS_MAX}")
    for i, s in enumerate(v):
        if not isinstance(s, str) or len(s) > NAME_MAX or _SECRET.fullmatch(s) is None:
            raise ValueError(f"{where}[{i}]: {s!r} is not an environment variable name "
                             f"(a letter or '_', then letters, digits and '_', at most "
                             f"{NAME_MAX})")
        if s in RESERVED or s.startswith(RESERVED_PREFIXES):
            raise ValueError(f"{where}[{i}]: {s!r} is reserved: toolsrv or Python sets it "
                             f"for every run (so are {', '.join(RESERVED)} and the names "
                             f"beginning {', '.join(RESERVED_PREFIXES)})")
        if s in v[:i]:
            raise ValueError(f"{where}[{i}]: {s!r} named twice")
    return tuple(v)
