"""A principal's name, as policy.yaml and blocks name it, from what a connection knows.

The audit trail's `principal(fid)` (state/audit.py) says what a connection knows of its
peer; this turns that into one name (rules.py, rule 2):

    a Unix socket's peer        uid:1000
    a client certificate        tls:O=fleet,CN=agent1   (mutual TLS: its subject)
    a TCP or TLS peer without   host:127.0.0.1
    a claim the MCP face makes  token:sha256:ab12cd34ef56   (its static bearer token)
                                oauth:alice                  (an OAuth token's subject)

Rule 1.  A claim (a call's `_meta.principal`, which the audit trail keeps as
`on_behalf_of`) is taken only from a peer that could serve as the face itself could: a
Unix socket peer of the server's own uid or root.  From anyone else (a uid let in with
--allow-uid, a TCP or TLS client) it is ignored and the peer's own name holds, so no
client widens its rule by naming another.  The face's claim of a peer without a token
(`uid N`, `host ADDR`, its --no-token form) names no one new: the face's own name holds.

Rule 2.  A call written on a tool's own connection (client_9p, a script's nested calls) is
made for whoever made the call whose run holds the connection: its `who`, inherited, so
a tool never acts under a rule of its own.
"""
from __future__ import annotations

import os
from typing import Any

from ..state.audit import principal

UNKNOWN = "unknown:"     # a connection that knows nothing of its peer: the default's rule


def peer_name(p: dict | None) -> str:
    """The name of a connection's peer (the audit record's principal)."""
    if not p:
        return UNKNOWN
    if p.get("kind") == "unix" and p.get("uid") is not None:
        return f"uid:{p['uid']}"
    if p.get("subject"):
        return f"tls:{p['subject']}"
    if p.get("host"):
        return f"host:{p['host']}"
    return UNKNOWN


def claimed(said: Any, p: dict | None) -> str | None:
    """The name a claim stands for (rule 1), or None when it is not taken."""
    if not isinstance(said, str) or not said or not p or p.get("kind") != "unix" \
            or p.get("uid") not in (os.geteuid(), 0) or p.get("via"):
        return None
    if said.startswith("bearer token sha256:"):
        return "token:" + said.split()[2]
    if said.startswith(("uid ", "host ")) or said == "unknown peer":
        return None          # the face's --no-token form: its HTTP peer, not a principal
    return f"oauth:{said}"


def name_of(fid: Any, args: Any = None) -> str:
    """Whom a write through `fid` is for: the parent call's principal on a tool's own
    connection (rule 2), else the claim in `args` (rule 1), else the peer."""
    conn: Any = getattr(fid, "conn", None)     # None: setting its name raises AttributeError
    guard = getattr(getattr(conn, "config", None), "guard", None)
    if guard is not None:
        who = getattr(getattr(guard, "parent", None), "who", None)
        if who:
            return who
    if isinstance(args, dict):
        meta = args.get("_meta")
        if isinstance(meta, dict) and meta.get("principal"):
            got = claimed(meta.get("principal"), principal(fid))
            if got:
                return got
    name = getattr(conn, "policy_name", None)   # a connection's peer never changes: its
    if name is None:                            # name is worked out once
        name = peer_name(principal(fid))
        try:
            conn.policy_name = name
        except AttributeError:                  # a connection that keeps nothing
            pass
    return name
