# toolsrv/tree/resident/pyrun.py — the server's half of resident protocol "python": the command
# that starts pyhost.py for a one-shot Python tool, and the size of its replies.
#
# Theory of operation.  A tool whose .meta says `"resident": {"protocol": "python"}` is an
# ordinary one-shot Python script (args on stdin, answer on stdout, status as its exit).
# Its calls go to one interpreter per agent and tool that runs the script for each of them
# as a cold start would (tree/resident/pyhost.py).  `host_argv` gives Runner.open_resident the
# rewrite of the tool's command into that interpreter's: the same interpreter a cold start
# would exec (registry/warmstart.plan, on the run's own PATH: its rules, so a script's #!
# line is read once per change of the file and never followed into the session's cwd), with
# pyhost.py given as source.  A command it cannot host that way (not a Python script, or
# interpreter flags) raises Cold: the manager runs those calls cold and logs why once.
from __future__ import annotations

import os
from typing import Callable

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


def host_argv(out_cap: int, err_cap: int, resident: dict | None = None, tool_dir: str = ""
              ) -> Callable[[list[str], dict, str], list[str]]:
    """The rewrite of a tool's argv (given its run's environment and cwd) into pyhost's;
    a `script` of the .meta's resident object (a file beside the .meta) and its `args`
    replace the tool's own command."""
    script = (resident or {}).get("script")

    def rewrite(argv: list[str], env: dict, cwd: str) -> list[str]:
        if script is not None:
            argv = [os.path.join(tool_dir, script), *(resident or {}).get("args", [])]
        plan, why = warmstart.plan(list(argv), env, cwd)
        if plan is None:
            raise Cold(why or "not a Python script")
        return [plan.python, "-c", source(), str(out_cap), str(err_cap), plan.script,
                *plan.argv]
    return rewrite


def line_cap(out_cap: int, err_cap: int) -> int:
    """The longest reply line pyhost can send: both outputs at their caps, every byte
    escaped (\\u00XX is six), and the frame."""
    return 6 * (out_cap + err_cap) + 4096



