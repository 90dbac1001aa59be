"""The start-up message: where the server listens, what it serves, what to try."""
from __future__ import annotations

import os
import shutil
import sys
from typing import Any

from ..serve import dial

# The examples' session: not `demo`, which the README's tour makes with a cwd of its own
# (a `call` into it would not find README.md); `call` makes this one where it is typed.
TRY = "try"


def _prog() -> str:
    """How to type the command: `toolsrv`, or its absolute path when it is not on $PATH
    (make run starts .venv/bin/toolsrv without activating the venv): the lines are typed in
    another terminal, which need not be in the directory the server started in."""
    argv0 = sys.argv[0] if sys.argv else ""
    if shutil.which("toolsrv") or os.path.basename(argv0) != "toolsrv":
        return "toolsrv"
    return os.path.abspath(argv0)


def _without_bundled(app: Any, dirs: list[str]) -> str | None:
    """The line that says the bundled tools are left out of the tools path, and why."""
    from ..dirs import bundled
    if bundled.TOOLS in dirs:
        return None
    why = "--tools is given" if getattr(getattr(app, "opts", None), "tools", None) \
        is not None else "$OLLIE_TOOLS_PATH is set"
    return (f"toolsrv: {why}, without the bundled tools (file_read, shell, ...): add "
            f"{bundled.TOOLS} to it to serve them")


def _no_cgroups(app: Any) -> str | None:
    """What a server without a cgroup per run lacks, and the remedy."""
    kind = str(getattr(getattr(app.runner, "launcher", None), "cgroups", ""))
    if not kind.startswith("none"):
        return None
    return ("toolsrv: without a cgroup per run, one run's fork bomb or memory hog is bounded "
            "only per process and per uid (RLIMIT_NPROC, shared by every run), not per run; "
            "serve as root, or in a delegated cgroup (systemd-run --user --scope -p "
            "Delegate=yes toolsrv serve): doc/sandbox.md")


def _shortfalls(runner: Any) -> list[str]:
    """What the runner found at start that it could not get: the tools' uid (every call
    refused), rlimits above the server's hard ones (lowered)."""
    uid, limits = (getattr(runner, name, lambda: None)() for name in ("uid_problem",
                                                                       "limits_note"))
    return [f"toolsrv: {x}" for x in (uid and f"every call is refused: {uid}", limits) if x]


def _audit(app: Any) -> str:
    """Where the audit trail goes, or why there is none."""
    trail = getattr(app, "audit", None)
    if trail is not None:
        return f"toolsrv: audit trail in {trail.path} (read it: toolsrv audit)"
    if getattr(getattr(app, "opts", None), "audit", "") is None:
        return "toolsrv: no audit trail (--no-audit)"
    return "toolsrv: no audit trail (--no-state; --audit FILE keeps one)"


def search_mode() -> str:
    """What tools/search will rank with, told without importing the search extra."""
    found = False
    for finder in sys.meta_path:  # importlib.util.find_spec, which costs 7 ms to import
        try:
            if getattr(finder, "find_spec", None) and finder.find_spec("wordllama", None):
                found = True
                break
        except (ImportError, ValueError):
            break  # as an import would: a finder that refuses it ends the search
    if not found:
        from ..dirs.bundled import install_hint
        return f"lexical only: the semantic ranker is not installed ({install_hint('search')})"
    return "lexical + semantic (the model loads on the first search)"


def banner(app: Any) -> str:
    reg = app.registry
    addr = str(app.addrs[0])
    a = "" if addr == str(dial.default_addr()) else f" -a '{addr}'"
    prog = _prog()

    def cmd(verb: str, rest: str) -> str:     # -a is the verb's option: it follows the verb
        return f"{prog} {verb}{a} {rest}"
    errors = [ln for ln in reg.errors_text().splitlines() if ln]
    state = getattr(getattr(app, "store", None), "state_dir", None)
    lines = [f"toolsrv: serving on {', '.join(str(x) for x in app.addrs)}",
             f"toolsrv: state in {state} (kept across restarts)" if state else
             "toolsrv: no state kept (--no-state)",
             _audit(app),
             *([f"toolsrv: traces: a span per call, {app.traces.where}"]
               if getattr(app, "traces", None) is not None else []),
             f"toolsrv: {len(reg.tools)} tools loaded from {':'.join(getattr(reg, 'dirs', []))}",
             *filter(None, [_without_bundled(app, list(getattr(reg, "dirs", [])))]),
             f"toolsrv: {len(errors)} in tools/errors"
             + (f" (see: {cmd('read', 'tools/errors')})" if errors else "")]
    if getattr(app, "searcher", None) is not None:
        lines.append(f"toolsrv: search: {search_mode()} (see: {cmd('search', 'read a file')})")
    if app.runner is not None and hasattr(app.runner, "summary"):
        lines.append(f"toolsrv: sandbox: {app.runner.summary()}")
        lines += _shortfalls(app.runner)
        lines += filter(None, [_no_cgroups(app)])
    lines.append("toolsrv: try, in another terminal (a session that `call` makes works in "
                 "the directory you call from; --cwd DIR to choose):")
    lines.append("  " + cmd("read", "tools/index"))
    if "file_glob" in reg.tools and "file_read" in reg.tools:
        lines += ["  " + cmd("call", f"{TRY} me file_glob '{{\"pattern\": \"*\"}}'"),
                  "  " + cmd("call", f"{TRY} me file_read '{{\"path\": \"README.md\", "
                             "\"limit\": 5}'")]
    elif reg.tools:
        t = sorted(reg.tools)[0]
        lines += ["  " + cmd("read", f"tools/{t}/prompt"),
                  "  " + cmd("call", f"{TRY} me {t} '{{...args...}}'")]
    lines.append("  " + cmd("read", f"session/{TRY}/agent/me/log"))
    return "\n".join(lines)
