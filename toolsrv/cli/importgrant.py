"""What an imported MCP server needs granted, and the proof: one start of it, confined.

Theory of operation.  `grants(words)` lists the paths outside the default profile's system
directories that the command line `words` (the program made absolute, then its args) reads
or executes, each to be granted rox:
  - the program's directory;
  - a Python interpreter's installation, whether it is the program (`venv/bin/python
    server.py`) or the program's #! line names it (a console script): the interpreter asked
    once, unconfined, for sys.prefix (the venv root), sys.base_prefix and the exec
    prefixes (the real installation, wherever its symlinks lead) and the absolute entries
    of sys.path (site-packages a .pth adds); when it cannot be asked, its venv root
    (pyvenv.cfg beside bin/) and the prefix of its real path;
  - another #! interpreter's installation (bin/ and lib/ beside its real path);
  - each argument that is a file (the script): its directory.
`start_confined` starts the command once as a call starts it (run/runner.py's
open_resident under the profile to be written, as the tools' uid), says initialize and
tools/list to it, and stops it: what failed, or None.  Where this host cannot confine a
run at all (no Landlock, a profile not best_effort) it says so instead of failing.
"""
from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import tempfile
from typing import Any

from ..registry.warmstart import SHEBANG_MAX, shebang
from ..run.init.wire import DEFAULT_PATH   # a run's PATH unless its profile says otherwise

PROFILE_COVERS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_PYTHON = re.compile(r"(python|pypy)[0-9.]*")
_ASK = ("import json, os, sys; print(json.dumps([sys.prefix, sys.base_prefix, "
        "sys.exec_prefix, sys.base_exec_prefix] + [p for p in sys.path if os.path.isabs(p)]))")


def grants(words: list[str]) -> list[str]:
    """Paths outside the default profile's system directories the command line needs."""
    prog = words[0]
    need = [os.path.dirname(prog)]
    interp = prog if _PYTHON.fullmatch(os.path.basename(prog)) else None
    if interp is None:
        try:
            with open(prog, "rb") as f:
                line = shebang(f.read(SHEBANG_MAX))
        except OSError:
            line = []
        if line:
            interp = line[0]
            if "/" not in interp:                   # a program env(1) finds
                interp = shutil.which(interp, path=DEFAULT_PATH) or shutil.which(interp) \
                    or interp                       # the PATH tools get, first
    if interp:
        need += _installation(interp)
    for w in words[1:]:
        if os.path.isabs(w) and os.path.isfile(w):
            need.append(os.path.dirname(w))         # the script, and what sits beside it
    out: list[str] = []
    for p in need:
        if not any(p == c or p.startswith(c + "/") for c in PROFILE_COVERS) and p not in out:
            out.append(p)
    # a path already inside another one listed is covered by it
    return [p for p in out if not any(p != q and p.startswith(q + "/") for q in out)]


def _installation(interp: str) -> list[str]:
    """What interpreter `interp` reads and runs: asked of a Python, else found beside it."""
    real = os.path.realpath(interp)      # its installation: bin/ and lib/ beside
    found = [os.path.dirname(os.path.dirname(real))
             if os.path.basename(os.path.dirname(real)) == "bin" else real]
    root = os.path.dirname(os.path.dirname(interp))
    if os.path.exists(os.path.join(root, "pyvenv.cfg")):
        found.append(root)               # its virtualenv: site-packages and all
    if _PYTHON.fullmatch(os.path.basename(real)) or _PYTHON.fullmatch(
            os.path.basename(interp)):
        try:
            p = subprocess.run([interp, "-c", _ASK], capture_output=True, timeout=30,
                               stdin=subprocess.DEVNULL, cwd="/")
            asked = json.loads(p.stdout) if p.returncode == 0 else []
        except (OSError, ValueError, subprocess.TimeoutExpired):
            asked = []
        found += [os.path.normpath(a) for a in asked
                  if isinstance(a, str) and os.path.exists(a)]
    return found


def run_argv(cmd: str) -> list[str]:
    """The argv a call runs the .meta's `cmd` with (registry/resolve.py's rules)."""
    from ..registry.resolve import SHELL, cmd_form
    return [cmd] if cmd_form(cmd) == "absolute" else [SHELL, "-c", cmd]


async def start_confined(cmd: str, name: str, data: dict[str, Any], timeout: float
                         ) -> str | None:
    """Start `cmd` once under profile `data` (named `name`), confined as a call would be,
    and ask it initialize and tools/list: None when it answers, else what failed."""
    from ..run.runner import RunRequest, Runner, RunnerConfig
    from ..run.sandbox import parse_profile
    from ..tree.resident.mcp import Client, MCPError
    from ..tree.resident.process import Ended, Process, answer
    runner = Runner(RunnerConfig(timeout=timeout))
    cwd = tempfile.mkdtemp(prefix="toolsrv-import.", dir="/tmp")
    os.chmod(cwd, 0o755)            # the tools' uid works in it, as in a session's cwd
    proc = None
    try:
        await runner.start()
        req = RunRequest(argv=run_argv(cmd), stdin=b"", cwd=cwd, env={"PWD": cwd},
                         profile=parse_profile(data, name, "import-mcp"))
        handle, refusal = await runner.open_resident(req)
        if handle is None:
            return refusal or "it could not start"
        proc = Process(runner.launcher, handle, 16 << 20, 1 << 20)
        client = Client(proc)

        async def ask() -> None:
            try:
                await client.initialize()
                await client.list_tools()
            except MCPError as e:
                raise Ended(str(e)) from None
        _, rep = await answer(proc, timeout, None, ask)
        if rep.failure is None:
            return None
        return rep.failure if not proc.alive else rep.failure + _last(rep.stderr)
    finally:
        if proc is not None:
            proc.kill()
        await runner.close()
        shutil.rmtree(cwd, ignore_errors=True)


def _last(stderr: bytes) -> str:
    lines = [ln for ln in stderr.decode("utf-8", "replace").splitlines() if ln.strip()]
    return f" (its stderr: {lines[-1].strip()})" if lines else ""
