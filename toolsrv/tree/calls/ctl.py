"""The agent's ctl language: one command per line, checked whole before any is applied.

    tool_load NAME [NAME ...]     tool_unload NAME [NAME ...]     cancel NAME [NAME ...]

`parse(text)` turns a write into [(verb, names)], raising P9Error for an
unknown command or missing names; the caller then checks names against the
registry and applies all or nothing.  Like lib9p's parse.c, words split on
white space; empty lines and lines starting with '#' are ignored.
"""
from __future__ import annotations

from ...errors import P9Error
from ...errors import fit
from ...registry.names import valid_name

VERBS = ("tool_load", "tool_unload", "cancel")


def parse(text: str) -> list[tuple[str, list[str]]]:
    cmds = []
    for line in text.splitlines():
        words = line.split()
        if not words or words[0].startswith("#"):
            continue
        verb, names = words[0], words[1:]
        if verb not in VERBS:
            raise P9Error(fit("", f'invalid command "{verb}"; valid: {", ".join(VERBS)}'))
        if not names:
            raise P9Error(fit(f"{verb}: ", "missing tool name"))
        for n in names:
            if not valid_name(n):
                raise P9Error(fit(f"{verb}: ", f"illegal tool name {n!r}"))
        cmds.append((verb, names))
    return cmds
