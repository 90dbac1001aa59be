# toolsrv/run/warmplan.py — which call starts warm, and the request that makes an init warm.
#
# Theory of operation.  A call whose tool is a Python script (registry/warmstart.py made
# its plan) may run in a warm init (run/init/warm.py) instead of a cold one.  Runner.run
# asks warm_request() once per call: the init's kind is everything an init of that kind
# shares (the interpreter, its start-up environment, uid, netns, idmapped mounts), so a
# call only ever reaches an init warmed for exactly its kind.  A kind whose warm start
# failed is not tried again for WARM_RETRY seconds (its calls start cold).  The script is
# never read here: the call's child reads it under its own uid and ruleset; only a tool's
# own executable, which no tool can change, is also compiled here (run/ownscript.py), for
# an interpreter whose bytecode magic matches ours.
from __future__ import annotations

import time
from typing import Any, NamedTuple

from toolsrv.run.ownscript import MAGIC, ScriptCache
from toolsrv.run.sandbox import Policy

STARTUP_ENV = ("LC_ALL", "LC_CTYPE", "LANG", "TZ")  # and PYTHON*: read by Python as it starts
WARM_RETRY = 60.0  # seconds before an interpreter that failed to warm up is tried again


class WarmKind(NamedTuple):
    """What the warm inits of one kind share: the key of their idle pool (launcher.py),
    of a kind's failures and of its interpreter's bytecode magic (runner.py)."""
    python: str                         # the interpreter
    boot: tuple[tuple[str, str], ...]   # the environment it starts with (PYTHON*, LC_*, TZ)
    uid: int | None                     # the tools' uid (None: the server's own)
    netns: bool                         # in a network namespace of its own
    mounts: str                         # the repr of its idmapped mounts' plan (lists: this
                                        # names it), or "None"


def warm_request(plan: Any, req: Any, msg: dict, policy: Policy,
                 broken: dict[WarmKind, tuple[float, str]], magic: dict[WarmKind, str],
                 codes: ScriptCache) -> tuple[WarmKind, dict, bytes | None] | None:
    """(kind, the request that makes an init warm, the compiled script or None) for a call
    with a warm plan, the script put in msg; None while its kind is broken (starts cold)."""
    boot = {k: v for k, v in msg["env"].items()
            if k.startswith("PYTHON") or k in STARTUP_ENV}
    # a root server's grants that need idmapped mounts are mounted for the warm init
    # once (toolsrv/run/init/cold.py): its kind is that plan too
    kind = WarmKind(plan.python, tuple(sorted(boot.items())), msg["uid"], msg["netns"],
                    repr(msg.get("mounts")))
    failed = broken.get(kind)
    if failed is not None:
        if time.monotonic() - failed[0] < WARM_RETRY:
            return None
        del broken[kind]
    boot["HOME"] = "/nonexistent"  # the call's $HOME is set in the child (its user site)
    if "PATH" in msg["env"]:
        boot["PATH"] = msg["env"]["PATH"]
    msg["warm"] = plan.message()
    # the child reads its script itself; only a tool's own executable, which no tool can
    # change, is also compiled here, once per change (run/ownscript.py, issue 25)
    blob = None
    if magic.get(kind) == MAGIC and "PYTHONOPTIMIZE" not in boot:
        writable = [p for p, a in policy.paths if a in ("rw", "rwx")]
        blob = codes.compiled(plan.script, req.tool_dir, writable)
    if blob is not None:
        msg["warm"]["code"] = [blob[1], len(blob[0]) - blob[1]]
    return kind, {"op": "warm", "python": plan.python, "argv0": plan.argv0, "env": boot,
                  "uid": msg["uid"], "gid": msg["gid"], "netns": msg["netns"],
                  "mounts": msg.get("mounts")}, blob[0] if blob else None
