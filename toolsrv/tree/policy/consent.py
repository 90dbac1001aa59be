"""Consent a model cannot give itself (issue 48.2): which calls wait for a person's yes,
and whom the tree asks for it.

Which calls.  A call waits for a yes before it runs when its tool's `.meta` says
`"confirm": true` (every client, every principal), when policy.yaml's `confirm` names the
tool for the call's principal (gate.py), or when it is elevated: then the runner asks, as
it always has (run/runner.py, run/elevation.py), and that one question covers the others
(its prompt says what the run may reach outside the sandbox).  A call of another host's
tool is asked about here too, elevated or not.

Whom.  An approval broker, spoken to and proved by run/elevation.py (the socket's
directory ours or root's, its token, the peer's uid): the server's own (`toolsrv
approve`, $OLLIE_BYPASS_SOCKET), unless the connection the call was written on named one
of its own on /consent.  The MCP face does: it is the broker for its own calls, and
answers only after its client's user said yes (doc/mcp.md, Consent).

/consent (rw, 0600, per connection).  A write `broker PATH` makes the broker at PATH the
one asked for every call written on this connection from then on (its calls' nested
calls are written on their tools' own connections: not covered); `broker` alone, or
`broker none`, goes back to the server's.  A read says the connection's: `broker PATH`
or `broker none`.  Only the operator writes it (operator(): a Unix peer of the
server's own uid or root, never a tool's own connection), and the broker must prove
itself at once (its token readable through a directory of ours or root's), so a wrong
path is said at the write, not at the first call.

Rule: nothing written on the call's own path is a yes.  The answer is read from the
broker's socket by the server, never from the call's args (`"approved": true` is an
argument like any other), its `_meta`, a ctl, or a tool's connection; a registration is
kept on the connection object, which only this file's write changes.
"""
from __future__ import annotations

import os
from typing import Any

from ...errors import P9Error, fit
from ..node import Node, answer_read, answered
from ..state.audit import principal

META_WHERE = "confirm"      # the refusal's rule name when the tool's .meta asks


def broker_of(fid: Any) -> str | None:
    """The broker the connection of `fid` named on /consent, or None (the server's)."""
    conn = getattr(fid, "conn", None)
    if getattr(getattr(conn, "config", None), "guard", None) is not None:
        return None                 # a tool's own connection never has one of its own
    got = getattr(conn, "consent_broker", None)
    return got if isinstance(got, str) else None


async def confirm(broker: str | None, timeout: float, where: str, who: str | None,
                  request: dict) -> None:
    """Ask the broker to confirm a call; raise `permission denied: …` naming `where`
    (policy.yaml's rule, or the .meta's `confirm`) and the broker's reason unless it says
    yes."""
    from ...run.elevation import request_approval
    tool = request.get("tool")
    if where == META_WHERE:
        why = f"{tool}'s .meta asks a person's yes before each run"
        head = f"permission denied: confirm: {tool} needs a person's yes: "
    else:
        why = f"policy.yaml ({where}) asks you to confirm this call for {who}"
        head = (f"permission denied: policy {where}: {tool} needs the approval broker's "
                "yes (toolsrv approve): ")
    reach = f"{why}; it runs in its sandbox as every call does"
    ok, said = await request_approval(broker, {**request, "principal": who, "confirm": where,
                                               "reach": reach}, timeout)
    if not ok:
        raise P9Error(fit(head, said, ""))


def operator(who: dict | None) -> bool:
    """A writer of /block and /consent: a Unix peer of our uid or root, not a tool's
    connection."""
    if not who:
        return False
    return who.get("kind") == "unix" and not who.get("via") \
        and who.get("uid") in (os.geteuid(), 0)


class ConsentFile(Node):
    """/consent: the broker of this connection's calls (the module's header)."""

    perm = 0o600

    def _text(self, fid: Any) -> bytes:
        return f"broker {broker_of(fid) or 'none'}\n".encode()

    def length(self) -> int:
        return 0

    def read(self, fid: Any, offset: int, count: int) -> bytes:
        return answer_read(fid, lambda: self._text(fid), offset, count)

    def write(self, fid: Any, offset: int, data: bytes) -> int:
        if not operator(principal(fid)):
            raise P9Error(fit("permission denied: consent: ", "only the server's own uid "
                              "or root, through its Unix socket, may name a connection's "
                              "broker", ""))
        words = data.decode(errors="replace").split()
        if not words or words[0] != "broker" or len(words) > 2:
            raise P9Error(fit("consent: ", "say broker PATH, or broker none"))
        path = words[1] if len(words) == 2 and words[1] != "none" else None
        if path is not None:
            if not os.path.isabs(path):
                raise P9Error(fit("consent: ", f"broker {path[:60]}: not an absolute path"))
            from ...dirs.trusted import Untrusted
            from ...run.elevation import read_token
            try:
                read_token(path)
            except (OSError, Untrusted) as e:
                raise P9Error(fit("permission denied: consent: ", str(e), "")) from None
        try:
            fid.conn.consent_broker = path
        except AttributeError:
            raise P9Error(fit("consent: ", "this connection keeps no broker")) from None
        answered(fid, offset + len(data))
        return len(data)

    def truncate(self, fid: Any) -> None:
        return None


def add_file(fs: Any) -> None:
    """Serve /consent at fs's root (root.py's add_root)."""
    fs.add_root(ConsentFile("consent", fs.q("consent"), fs.root))
