# toolsrv/tree/resident/pyrun.py — the server's half of resident protocol "python": which
# interpreter an agent's one-shot Python tools share, the command that starts it, and each
# call's script.
#
# Theory of operation.  A tool whose .meta says `"resident": {"protocol": "python"}` is an
# ordinary one-shot Python script (args on stdin, answer on stdout, status as its exit).
# Its calls go to an interpreter that runs the script for each of them as a cold start
# would (tree/resident/pyhost.py).  One interpreter serves all such tools of an agent that
# share a tools directory, a declared sandbox and an interpreter as written (`key`): their
# cold runs would be confined alike, so one confined process can run each of them.  `job`
# is a call's script and sys.argv, found as a cold start finds them (registry/warmstart.plan:
# a script's #! line is read once per change of the file and never followed into the
# session's cwd), or the .meta's `script` beside it and its `args` for a `cmd` tool.
# `host_argv` gives Runner.open_resident the rewrite of the command into the interpreter's
# (found on the run's own PATH, once its environment is known), with pyhost.py given as
# source.  A command it cannot host (not a Python script, interpreter flags) raises Cold:
# the manager runs those calls cold and logs why once.
from __future__ import annotations

import json
import os
from typing import Any, Callable

from ...registry import warmstart

_SOURCE: list[str] = []


class Cold(Exception):
    """This command's calls cannot be hosted: they run cold (the reason says why)."""


def source() -> str:
    """pyhost.py's text, read once from the package."""
    if not _SOURCE:
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pyhost.py")
        with open(path, encoding="utf-8") as f:
            _SOURCE.append(f.read())
    return _SOURCE[0]


def command(tool: Any, argv: list[str]) -> list[str]:
    """What a call runs: the tool's command, or its .meta's `script` beside it with `args`."""
    r = tool.resident or {}
    if r.get("script") is not None:
        return [os.path.join(tool.dir, r["script"]), *r.get("args", [])]
    return list(argv)


def job(tool: Any, argv: list[str], cwd: str) -> tuple[str, list[str], str]:
    """(the script, sys.argv, the interpreter as written) of a call; Cold if not hostable."""
    plan, why = warmstart.plan(command(tool, argv), {"PATH": warmstart.DEFAULT_PATH}, cwd)
    if plan is None and why is not None and "not found on the tools' PATH" in why:
        plan, why = warmstart.plan(command(tool, argv), dict(os.environ), cwd)
    if plan is None:
        raise Cold(why or "not a Python script")
    return plan.script, plan.argv, plan.argv0


def key(tool: Any, interp: str | None) -> tuple:
    """The interpreter an agent's call of `tool` goes to: one per tools directory,
    declared sandbox and interpreter as written (`interp`, job's third); a tool it cannot
    host (interp None) keys alone."""
    if interp is None:
        return ("python", tool.name)
    declared = (getattr(tool, "extra", None) or {}).get("sandbox")
    return ("python", tool.dir, declared if isinstance(declared, str) else None, interp)


def tool_key(tool: Any) -> tuple:
    """key() of a tool outside a call (its status line, its unload)."""
    try:
        return key(tool, job(tool, list(tool.command.argv), "/")[2])
    except Cold:
        return key(tool, None)


def host_argv(out_cap: int, err_cap: int, tool: Any
              ) -> Callable[[list[str], dict, str], list[str]]:
    """The rewrite of a tool's argv (given its run's environment and cwd) into the argv of
    pyhost in the interpreter a cold start of it would exec; the tools directory is named
    last (what `ps` shows of it)."""
    def rewrite(argv: list[str], env: dict, cwd: str) -> list[str]:
        plan, why = warmstart.plan(command(tool, argv), env, cwd)
        if plan is None:
            raise Cold(why or "not a Python script")
        return [plan.python, "-c", source(), str(out_cap), str(err_cap), tool.dir]
    return rewrite


def call_line(script: str, argv: list[str], stdin: bytes) -> bytes:
    """A call as pyhost reads it: one line of JSON (bytes that are not UTF-8 escaped)."""
    return json.dumps({"script": script, "argv": argv,
                       "stdin": stdin.decode("utf-8", "surrogateescape")}).encode() + b"\n"


def line_cap(out_cap: int, err_cap: int) -> int:
    """The longest reply line pyhost can send: both outputs at their caps, every byte
    escaped (\\u00XX is six), and the frame."""
    return 6 * (out_cap + err_cap) + 4096
