"""`toolsrv import-mcp [--prefix P] [--dir DIR] [--force] -- COMMAND [ARGS...]`: every tool
of an MCP server as a resident toolsrv tool, one .meta each (issue 17).

Theory of operation.  The command is started as a plain child process (not sandboxed: it is
the user's own command, run once to ask it what it offers), spoken to with toolsrv's own
MCP client (run/mcpproto.py: initialize, then tools/list; the `mcp` SDK is not needed),
and stopped.  Each tool becomes a .meta with its description, a prompt made from the
description and the schema, `args` = its inputSchema, `readOnly` = its readOnlyHint,
`cmd` = the command (the program resolved to an absolute path, `exec`'d through the
shell when it has arguments) and `resident: {"protocol": "mcp", "tool": NAME}`, so the
.meta stays the one source of discovery and schema.  A name toolsrv cannot serve is mapped
(characters outside the name rule become `_`) and the mapping is printed.

Nothing is half-written: every check (an MCP server that answers, valid names and schemas,
no .meta already there unless --force) passes before the first file is written, and each
file is written whole (a temporary file, then a rename).  It prints what it wrote and the
paths a sandbox profile must grant for the server to run: its program, its interpreter
(a `#!` line) and the virtualenv that interpreter belongs to.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shlex
import shutil
import sys
from typing import Any

from ..registry.metafile import MetaError, check_schema
from ..registry.names import NAME_MAX, valid_name
from ..run.mcpproto import Client, MCPError

DEFAULT_TIMEOUT = 30.0
TOOL_PATH = "/usr/local/bin:/usr/bin:/bin"   # a run's PATH unless its profile says otherwise
PROFILE_COVERS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")


class ImportError_(Exception):
    """A reason to stop before anything is written."""


class _Pipe:
    """import-mcp's side of the server's stdio: what mcpproto.Client needs."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    def send(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)

    async def line(self) -> bytes:
        assert self.proc.stdout is not None
        raw = await self.proc.stdout.readline()
        if not raw:
            raise MCPError("EOF on its stdout")
        return raw.rstrip(b"\n")


def parse(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="toolsrv import-mcp",
        description="write one resident .meta per tool of an MCP server (stdio)")
    ap.add_argument("--prefix", default="", help="prepended to every tool name")
    ap.add_argument("--dir", help="where the .meta files go (default: the first directory "
                    "of $OLLIE_TOOLS_PATH, else ~/.config/ollie/tools)")
    ap.add_argument("--force", action="store_true", help="replace .meta files already there")
    ap.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT,
                    help="seconds to wait for the server's answers")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...]")
    args = ap.parse_args(argv)
    if args.command[:1] == ["--"]:
        args.command = args.command[1:]
    if not args.command:
        ap.error("missing the MCP server's command: toolsrv import-mcp [...] -- COMMAND [ARGS]")
    return args


def default_dir() -> str:
    path = os.environ.get("OLLIE_TOOLS_PATH", "")
    first = next((d for d in path.split(":") if d), "")
    return first or os.path.join(os.path.expanduser("~"), ".config", "ollie", "tools")


def map_name(name: str, prefix: str) -> str:
    """The toolsrv name for an MCP tool name (prefix added, bad characters made `_`)."""
    out = re.sub(r"[^A-Za-z0-9._-]", "_", prefix + name)[:NAME_MAX]
    return "_" + out[1:] if out in (".", "..") or not out else out


async def list_tools(argv: list[str], timeout: float) -> tuple[dict[str, Any], list[dict]]:
    """Start the server, initialize, tools/list, stop it: (server info, tools)."""
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, limit=64 << 20)
    except OSError as e:
        raise ImportError_(f"cannot start {argv[0]}: {e.strerror or e}") from None
    client = Client(_Pipe(proc))
    try:
        info = await asyncio.wait_for(client.initialize(), timeout)
        tools = await asyncio.wait_for(client.list_tools(), timeout)
    except (MCPError, TimeoutError, asyncio.TimeoutError, OSError, ValueError) as e:
        why = str(e) or "no answer"
        if isinstance(e, (TimeoutError, asyncio.TimeoutError)):
            why = f"no answer in {timeout:g}s"
        raise ImportError_(f"{shlex.join(argv)} is not an MCP server on stdio: {why}"
                           f"{await _stderr_tail(proc)}") from None
    finally:
        if proc.returncode is None:
            proc.kill()
        try:
            await asyncio.wait_for(proc.wait(), 5)
        except (TimeoutError, asyncio.TimeoutError):
            pass
    return info, tools


async def _stderr_tail(proc: asyncio.subprocess.Process, grace: float = 1.0) -> str:
    """The last line the server wrote to stderr: what it wrote until its stderr ended (it
    exits as it fails, but on a busy machine its last words come after its stdout's), or
    within `grace` seconds when it goes on running."""
    err = proc.stderr
    end = asyncio.get_running_loop().time() + grace
    while err is not None and not getattr(err, "_eof", True) and \
            asyncio.get_running_loop().time() < end:
        await asyncio.sleep(0.01)
    data = bytes(getattr(err, "_buffer", b""))[-300:] if err is not None else b""
    lines = [ln for ln in data.decode("utf-8", "replace").splitlines() if ln.strip()]
    return f" (its stderr: {lines[-1].strip()})" if lines else ""


def command_text(argv: list[str]) -> tuple[str, str]:
    """(the .meta's cmd, the program's absolute path)."""
    prog = argv[0]
    if "/" not in prog:
        found = shutil.which(prog)
        if found is None:
            raise ImportError_(f"{prog}: not found on $PATH")
        prog = found
    prog = os.path.abspath(prog)
    words = [prog, *argv[1:]]
    if len(words) == 1 and re.fullmatch(r"/[A-Za-z0-9._+,:@%/-]*", prog):
        return prog, prog
    return "exec " + shlex.join(words), prog


def grants(prog: str) -> list[str]:
    """Paths outside the default profile's system directories the server needs."""
    need = [os.path.dirname(prog)]
    try:
        with open(prog, "rb") as f:
            first = f.readline(512)
    except OSError:
        first = b""
    if first.startswith(b"#!"):
        words = first[2:].decode(errors="replace").split()
        interp = words[0] if words else ""
        if os.path.basename(interp) == "env" and len(words) > 1:
            interp = shutil.which(words[1], path=TOOL_PATH) or shutil.which(words[1]) \
                or words[1]                     # the PATH tools get, first
        if interp:
            real = os.path.realpath(interp)     # its installation: bin/ and lib/ beside
            need.append(os.path.dirname(os.path.dirname(real)) if
                        os.path.basename(os.path.dirname(real)) == "bin" else real)
            root = os.path.dirname(os.path.dirname(interp))
            if os.path.exists(os.path.join(root, "pyvenv.cfg")):
                need.append(root)               # its virtualenv: site-packages and all
    out: list[str] = []
    for p in need:
        if not any(p == c or p.startswith(c + "/") for c in PROFILE_COVERS) and p not in out:
            out.append(p)
    # a directory already inside another one listed is covered by it
    return [p for p in out if not any(p != q and p.startswith(q + "/") for q in out)]


def prompt_for(name: str, tool: dict[str, Any], schema: dict[str, Any]) -> str:
    desc = str(tool.get("description") or "").strip()
    lines = [f"## {name}", "", desc or f"The MCP tool {tool.get('name')}.", "", "**Args**"]
    props = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
    required = set(schema.get("required") or [])
    for p, sub in props.items():
        sub = sub if isinstance(sub, dict) else {}
        kind = sub.get("type", "any")
        kind = "|".join(kind) if isinstance(kind, list) else kind
        more = "required" if p in required else "optional"
        text = str(sub.get("description") or sub.get("title") or "").strip()
        lines.append(f"- `{p}` ({kind}, {more}){': ' + text if text else ''}")
    if not props:
        lines.append("- none")
    lines += ["", "Schema:", "```json", json.dumps(schema, indent=2, ensure_ascii=False),
              "```", ""]
    return "\n".join(lines)


def plan(args: argparse.Namespace, tools: list[dict]) -> tuple[list[tuple[str, dict]],
                                                                list[str], list[str]]:
    """Every .meta to write, as (path, object), and notes; raises ImportError_."""
    cmd, prog = command_text(args.command)
    out: list[tuple[str, dict]] = []
    notes: list[str] = []
    seen: dict[str, str] = {}
    directory = args.dir or default_dir()
    for t in tools:
        mcp_name = t.get("name")
        if not isinstance(mcp_name, str) or not mcp_name:
            raise ImportError_(f"a tool without a name in tools/list: {json.dumps(t)[:80]}")
        name = map_name(mcp_name, args.prefix)
        if not valid_name(name):
            raise ImportError_(f"tool {mcp_name!r}: no valid toolsrv name for it")
        if name != args.prefix + mcp_name:
            notes.append(f"tool {mcp_name!r} is named {name} (toolsrv names are letters, "
                         "digits, '.', '_' and '-')")
        if name in seen:
            raise ImportError_(f"tools {seen[name]!r} and {mcp_name!r} both map to {name}")
        seen[name] = mcp_name
        schema = t.get("inputSchema") if isinstance(t.get("inputSchema"), dict) else \
            {"type": "object"}
        try:
            check_schema(schema, f"{mcp_name}.inputSchema")
        except MetaError as e:
            raise ImportError_(str(e)) from None
        kind = schema.get("type", "object")
        if kind != "object" and not (isinstance(kind, list) and "object" in kind):
            raise ImportError_(f"{mcp_name}.inputSchema.type: must be \"object\", not "
                               f"{json.dumps(kind)}")
        meta = {"description": _one_line(t.get("description") or f"MCP tool {mcp_name}"),
                "prompt": prompt_for(name, t, schema), "args": schema, "cmd": cmd,
                "resident": {"protocol": "mcp", "tool": mcp_name}}
        ann = t.get("annotations") if isinstance(t.get("annotations"), dict) else {}
        if ann.get("readOnlyHint") is True:
            meta["readOnly"] = True
        path = os.path.join(directory, name + ".meta")
        if os.path.lexists(path) and not args.force:
            raise ImportError_(f"{path}: file already exists (use --force to replace it)")
        out.append((path, meta))
    if not out:
        raise ImportError_(f"{shlex.join(args.command)} lists no tools")
    return out, notes, grants(prog)


def _one_line(s: str) -> str:
    return " ".join(str(s).split())


def write(files: list[tuple[str, dict]]) -> None:
    """Each file whole: a temporary file beside it, then a rename."""
    for path, meta in files:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        tmp = f"{path}.tmp{os.getpid()}"
        with open(tmp, "w") as f:
            json.dump(meta, f, indent=2, ensure_ascii=False)
            f.write("\n")
        os.replace(tmp, path)


def main(argv: list[str]) -> int:
    args = parse(argv)
    try:
        info, tools = asyncio.run(list_tools(args.command, args.timeout))
        files, notes, need = plan(args, tools)
    except ImportError_ as e:
        print(f"toolsrv import-mcp: {e}; nothing written", file=sys.stderr)
        return 1
    write(files)
    server = info.get("serverInfo", {}) if isinstance(info, dict) else {}
    print(f"MCP server {server.get('name', '?')} {server.get('version', '')}".rstrip()
          + f": {len(files)} tool{'s' if len(files) != 1 else ''}")
    for path, meta in files:
        print(f"wrote {path} ({meta['resident']['tool']})")
    for n in notes:
        print(f"note: {n}")
    if need:
        print("the sandbox profile must grant (rox) for this server to run:")
        for p in need:
            print(f"  - {p}")
    return 0
