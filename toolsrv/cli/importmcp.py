"""`toolsrv import-mcp [--prefix P] [--dir DIR] [--force] -- COMMAND [ARGS...]`: every tool
of an MCP server as a resident toolsrv tool, one .meta each (issue 17).

Theory of operation.  The command is started as a plain child process (not sandboxed: it is
the user's own command, run once to ask it what it offers), spoken to with toolsrv's own
MCP client (tree/resident/mcp.py: initialize, then tools/list; the `mcp` SDK is not needed),
and stopped.  Each tool becomes a .meta with its description, a prompt made from the
description and the schema, `args` = its inputSchema, `readOnly` = its readOnlyHint,
`title`, `destructive`, `idempotent` and `outputSchema` = its own (doc/tools.md),
`cmd` = the command (the program resolved to an absolute path, `exec`'d through the
shell when it has arguments), `resident: {"protocol": "mcp", "tool": NAME}` and `sandbox`
= the profile written for it, so the .meta stays the one source of discovery and schema.
The profile (~/.config/ollie/sandbox/mcp.<server>.yaml, or --profile NAME) is the default
profile with the server's own installation added as rox: its program's directory, its
interpreter's installation and virtualenv (`grants`); --no-profile writes none and prints
those paths instead.  A name toolsrv cannot serve is mapped
(characters outside the name rule become `_`) and the mapping is printed.

Nothing is half-written: every check (an MCP server that answers, valid names and schemas,
no .meta already there unless --force) passes before the first file is written, and each
file is written whole (a temporary file, then a rename), the profile first.  It prints
what it wrote.  Every name and string the MCP server chose is printed with repr's escapes
(no control character reaches the terminal).  A schema with a `$ref` outside itself is
written, with a note: toolsrv never fetches such a ref and lists the tool in tools/errors
(registry/schemaref.py).  A schema that costs too much to apply (its refs expanding past
registry/schemacost.py's bound, or too many values in it) is not written, with a note.
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

from ..registry.metafile import MAX_META_BYTES, MetaError, check_schema, parse_meta
from ..registry.schemacost import cost_refusal
from ..registry.schemaref import REASON, outside_refs, ref_loop
from ..registry.names import NAME_MAX, valid_name
from ..tree.resident.mcp import Client, MCPError
from .importgrant import grants, start_confined

DEFAULT_TIMEOUT = 30.0


class ImportError_(Exception):
    """A reason to stop before anything is written."""


LINE_MAX = 16 << 20        # one JSON-RPC line of the server's (its whole tools/list page)
DESCRIPTION_MAX = 8192     # characters of a tool's description kept in its .meta


class _Pipe:
    """import-mcp's side of the server's stdio: what tree/resident/mcp.py's Client needs."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    def send(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)

    async def line(self) -> bytes:
        assert self.proc.stdout is not None
        try:
            raw = await self.proc.stdout.readline()
        except ValueError:     # asyncio's limit: the line goes on past LINE_MAX
            raise MCPError(f"it sent a line longer than {LINE_MAX >> 20} MiB") from None
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
    ap.add_argument("--profile", metavar="NAME", help="the sandbox profile to write and name "
                    "in each .meta (default: mcp.<the server's name>)")
    ap.add_argument("--no-profile", action="store_true", help="write no profile: print the "
                    "paths one must grant instead, and name none in the .meta files")
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
            stderr=asyncio.subprocess.PIPE, limit=LINE_MAX)
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


def command_words(argv: list[str]) -> list[str]:
    """The command line as a call runs it, in the session's cwd: the program and each
    argument that names a file here (the script) made absolute."""
    prog = argv[0]
    if "/" not in prog:
        found = shutil.which(prog)
        if found is None:
            raise ImportError_(f"{prog}: not found on $PATH")
        prog = found
    return [os.path.abspath(prog), *(os.path.abspath(a) if not a.startswith("-") and
                                     os.path.isfile(a) else a for a in argv[1:])]


def command_text(words: list[str]) -> str:
    """The .meta's cmd for the command line `words` (command_words)."""
    if len(words) == 1 and re.fullmatch(r"/[A-Za-z0-9._+,:@%/-]*", words[0]):
        return words[0]
    return "exec " + shlex.join(words)


def prompt_for(name: str, tool: dict[str, Any], schema: dict[str, Any]) -> str:
    desc = _cut(str(tool.get("description") or "").strip())
    lines = [f"## {name}", "", desc or f"The MCP tool {tool.get('name')}.", "", "**Args**"]
    props = got if isinstance(got := schema.get("properties"), dict) else {}
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
    words = command_words(args.command)
    cmd = command_text(words)
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
        schema = s if isinstance(s := t.get("inputSchema"), dict) else {"type": "object"}
        try:
            check_schema(schema, f"{mcp_name}.inputSchema")
        except MetaError as e:
            raise ImportError_(str(e)) from None
        for ref in outside_refs(schema):
            notes.append(f"tool {mcp_name!r}: args: $ref to {ref!r} {REASON}; toolsrv lists "
                         f"{name} in tools/errors until its schema is fixed")
        loop = ref_loop(schema)
        if loop:
            notes.append(f"tool {mcp_name!r}: args: $refs loop without end ("
                         f"{' -> '.join(loop)}); toolsrv lists {name} in tools/errors until "
                         "its schema is fixed")
        cost = cost_refusal(schema)
        if cost:
            notes.append(f"tool {mcp_name!r}: not written: args: {cost}")
            continue
        kind = schema.get("type", "object")
        if kind != "object" and not (isinstance(kind, list) and "object" in kind):
            raise ImportError_(f"{mcp_name}.inputSchema.type: must be \"object\", not "
                               f"{json.dumps(kind)}")
        desc = str(t.get("description") or "")
        if len(desc) > DESCRIPTION_MAX:
            notes.append(f"tool {mcp_name!r}: its description is cut to {DESCRIPTION_MAX} of "
                         f"{len(desc)} characters")
        meta: dict[str, Any] = {
            "description": _one_line(_cut(desc) or f"MCP tool {mcp_name}"),
            "prompt": prompt_for(name, t, schema), "args": schema, "cmd": cmd,
            "resident": {"protocol": "mcp", "tool": mcp_name}}
        ann = a if isinstance(a := t.get("annotations"), dict) else {}
        if ann.get("readOnlyHint") is True:
            meta["readOnly"] = True
        meta.update(_kept(mcp_name, t, ann))
        path = os.path.join(directory, name + ".meta")
        try:       # what the registry would refuse is not written (and said); a schema's
            # refs are the exception: written, listed in tools/errors, to be fixed in place
            text = json.dumps(meta, indent=2, ensure_ascii=False).encode() + b"\n"
            if len(text) > MAX_META_BYTES:
                raise MetaError(f"too large: {len(text)} bytes, at most {MAX_META_BYTES}")
            parse_meta(json.dumps({**meta, "args": {"type": "object"}}).encode())
        except MetaError as e:
            notes.append(f"tool {mcp_name!r}: not written: its .meta would be refused ({e})")
            continue
        if os.path.lexists(path) and not args.force:
            raise ImportError_(f"{path}: file already exists (use --force to replace it)")
        out.append((path, meta))
    if not out:
        raise ImportError_(f"{shlex.join(args.command)} lists no tools" if not notes else
                           "no tool could be written: " + "; ".join(notes))
    return out, notes, grants(words)


def _kept(mcp_name: str, t: dict, ann: dict) -> dict:
    """The server's own annotations and outputSchema, as .meta fields (doc/tools.md):
    `title`, `destructive`, `idempotent`, `outputSchema` (checked as `args` is), `icons`
    (the entries MCP's Icon allows)."""
    out: dict = {}
    title = t.get("title") if isinstance(t.get("title"), str) else ann.get("title")
    if isinstance(title, str) and title.strip():
        out["title"] = _one_line(title)
    for hint, field in (("destructiveHint", "destructive"), ("idempotentHint", "idempotent")):
        if isinstance(ann.get(hint), bool):
            out[field] = ann[hint]
    schema = t.get("outputSchema")
    if isinstance(schema, dict):
        try:
            check_schema(schema, f"{mcp_name}.outputSchema")
        except MetaError as e:
            raise ImportError_(str(e)) from None
        if schema.get("type") == "object":
            out["outputSchema"] = schema
    from ..mcp.tools import icons       # no SDK: the face's own check of an icon
    kept = icons(t.get("icons"))
    if kept:
        out["icons"] = kept
    return out


def shown(v: Any) -> str:
    """A string the MCP server sent, fit for a terminal: repr's escapes, no quotes."""
    return repr(str(v))[1:-1]


def _cut(s: str) -> str:
    return s if len(s) <= DESCRIPTION_MAX else s[:DESCRIPTION_MAX - 1] + "…"


def _one_line(s: str) -> str:
    return " ".join(str(s).split())


def profile_name(args: argparse.Namespace, info: Any) -> str:
    """The profile's name: --profile, else mcp.<serverInfo.name> made a valid name."""
    from ..run.sandbox import ProfileError, validate_profile_name
    server = info.get("serverInfo", {}) if isinstance(info, dict) else {}
    own = re.sub(r"^mcp[-_.]", "", str(server.get("name") or "server"))   # mcp-time: time
    name = args.profile or "mcp." + re.sub(r"[^A-Za-z0-9_.-]", "_", own)[:60]
    try:
        validate_profile_name(name)
    except (ProfileError, ValueError) as e:
        raise ImportError_(f"--profile {name}: {e}") from None
    return name


def profile_for(need: list[str]) -> dict[str, Any]:
    """The default profile (the user's, else the shipped one) with the server's own paths
    added to its rox: what the imported tools need, and nothing more."""
    import yaml
    from ..run.sandbox import ProfileError, _candidates, default_user_dir, parse_profile
    from ..run.sandbox import _SHIPPED
    for path in _candidates("default", default_user_dir(), _SHIPPED):
        try:
            with open(path, encoding="utf-8") as f:
                data = yaml.safe_load(f)
        except FileNotFoundError:
            continue
        except (OSError, yaml.YAMLError) as e:
            raise ImportError_(f"the default profile {path}: {e}") from None
        break
    else:
        raise ImportError_("no default sandbox profile to start from")
    fs = data.setdefault("filesystem", {})
    rox = fs.setdefault("rox", [])
    rox += [p for p in need if p not in rox]
    try:
        parse_profile(data, "import", "import-mcp")
    except ProfileError as e:
        raise ImportError_(f"the profile made from default: {e}") from None
    return data


def profile_path(name: str) -> str:
    from ..run.sandbox import default_user_dir
    return os.path.join(default_user_dir(), f"{name}.yaml")


def profile_text(name: str, command: list[str], data: dict[str, Any]) -> str:
    import yaml
    head = (f"# {name} — written by toolsrv import-mcp for {shlex.join(command)}:\n"
            "# the default profile's grants plus the server's own installation (rox).\n"
            "# Its tools name it in their .meta (\"sandbox\"); edit it, or import again.\n")
    return head + yaml.safe_dump(data, sort_keys=False, default_flow_style=False)


def write(files: list[tuple[str, dict]], profile: tuple[str, str] | None = None) -> None:
    """Each file whole: a temporary file beside it, then a rename; the profile first, so a
    .meta never names a profile that is not there."""
    items: list[tuple[str, str]] = [profile] if profile else []
    items += [(p, json.dumps(m, indent=2, ensure_ascii=False) + "\n") for p, m in files]
    for path, text in items:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        tmp = f"{path}.tmp{os.getpid()}"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, path)


def main(argv: list[str]) -> int:
    args = parse(argv)
    profile = None
    try:
        info, tools = asyncio.run(list_tools(args.command, args.timeout))
        files, notes, need = plan(args, tools)
        if not args.no_profile:
            name = profile_name(args, info)
            path = profile_path(name)
            text = profile_text(name, args.command, profile_for(need))
            old = _read(path) if os.path.lexists(path) else None
            if old is not None and not args.force and not old.startswith(text.split("\n")[0]):
                mine = f"# {name} — written by toolsrv import-mcp for "
                if old.startswith(mine):      # ours, for another command line
                    other = old.split("\n", 1)[0][len(mine):].rstrip(":")
                    raise ImportError_(f"{path}: already written by import-mcp for another "
                                       f"command ({other}); give --profile NAME for this "
                                       "one, or --force to replace it")
                raise ImportError_(f"{path}: file already exists, not written by import-mcp "
                                   "(use --force to replace it, --profile NAME for another)")
            profile = (path, text)
            for _, meta in files:
                meta["sandbox"] = name
            notes += confined_check(files[0][1]["cmd"], name, text, args.timeout)
    except ImportError_ as e:
        print(f"toolsrv import-mcp: {e}; nothing written", file=sys.stderr)
        return 1
    write(files, profile)
    server = info.get("serverInfo", {}) if isinstance(info, dict) else {}
    print(f"MCP server {shown(server.get('name', '?'))} {shown(server.get('version', ''))}"
          .rstrip() + f": {len(files)} tool{'s' if len(files) != 1 else ''}")
    for path, meta in files:
        print(f"wrote {path} ({meta['resident']['tool']!r})")
    for n in notes:
        print(f"note: {n}")
    if profile is not None:
        print(f"wrote {profile[0]} (sandbox profile {files[0][1]['sandbox']}: default's "
              "grants" + (", plus rox: " + ", ".join(need) if need else "") + ")")
    elif need:
        print("the sandbox profile must grant (rox) for this server to run:")
        for p in need:
            print(f"  - {p}")
    return 0


def confined_check(cmd: str, name: str, text: str, timeout: float) -> list[str]:
    """Start the server once as its calls will (start_confined): raises ImportError_ saying
    what failed; a note when this host cannot confine a run to try."""
    import yaml
    why = asyncio.run(start_confined(cmd, name, yaml.safe_load(text), timeout))
    if why is None:
        return []
    if why.startswith("sandbox: landlock unavailable"):
        return [f"not tried under its profile here ({why})"]
    raise ImportError_(f"the server does not start under the sandbox profile {name} "
                       f"written for it: {why}; the profile would grant (rox) what "
                       "import-mcp found it needs: add what it also reads to rox, in a "
                       "profile given with --profile, or see doc/sandbox.md")


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError:
        return None
