"""`toolsrv mcp --config [claude|cursor|vscode]`: the JSON an MCP client's configuration
needs to start this `toolsrv mcp`, printed, not guessed by the user (issue 27).

A client starts its servers with its own PATH and environment: a bare `"command":
"toolsrv"` fails there (`spawn toolsrv ENOENT`), and a client that drops $NAMESPACE makes
`toolsrv mcp` dial another address and fall back to standalone.  So the command is the
absolute path of this toolsrv (its script beside this interpreter, else this interpreter
with `-m toolsrv`), and the address is given with `-a`, as this environment resolves it.
Claude Desktop and Cursor read `mcpServers`; VS Code reads `servers`, with a `type`.
With `--http HOST:PORT` the client does not start anything: it connects, so the entry is
the `url` (http://HOST:PORT/mcp) and the `headers` that carry the bearer token (the
--token-file's, else the default one `toolsrv mcp --http` makes on its first start; none
with --no-token), with `"type": "http"` for the clients that want one.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
from typing import Any

from ..serve import dial


def command() -> list[str]:
    """The absolute command that runs this toolsrv, for a process with any PATH."""
    argv0 = sys.argv[0] if sys.argv else ""
    if os.path.basename(argv0) == "toolsrv" and os.path.isfile(argv0):
        return [os.path.abspath(argv0)]
    beside = os.path.join(os.path.dirname(sys.executable), "toolsrv")
    if os.access(beside, os.X_OK):
        return [beside]
    found = shutil.which("toolsrv")
    if found:
        return [os.path.abspath(found)]
    return [sys.executable, "-m", "toolsrv"]


def mcp_args(args: Any) -> list[str]:
    """`mcp` and the options given here, the address always (-a), paths made absolute."""
    out = ["mcp", "-a", args.addr or str(dial.default_addr())]
    for opt, value in (("--session", args.session), ("--agent", args.agent),
                       ("--tools", args.tools),
                       ("--cwd", os.path.abspath(args.cwd) if args.cwd else None)):
        if value:
            out += [opt, value]
    if args.search:
        out += ["--search"] + ([args.search] if args.search != "always" else [])
    if getattr(args, "search_budget", None) is not None:
        out += ["--search-budget", str(args.search_budget)]
    for pins in getattr(args, "pin", None) or []:
        out += ["--pin", pins]
    if args.no_standalone:
        out.append("--no-standalone")
    return out


def http_entry(args: Any, client: str) -> dict[str, Any]:
    """The entry of a client that connects to `toolsrv mcp --http HOST:PORT`."""
    host, _, port = args.http.rpartition(":")
    host = host or "127.0.0.1"
    entry: dict[str, Any] = {"type": "http"} if client != "cursor" else {}
    entry["url"] = f"http://{host}:{port}/mcp"
    if args.no_token or getattr(args, "oauth_issuer", None):   # OAuth: the client's own
        return entry
    from ..dirs.statedir import state_home
    path = args.token_file or os.path.join(state_home(), "mcp-token")  # as mcp/http.py
    try:
        with open(path, encoding="utf-8") as f:
            token = f.read().strip()
    except OSError as e:
        token = "TOKEN"
        print(f"toolsrv mcp --config: the token file {path}: {e.strerror or e}: start "
              f"`toolsrv mcp --http {args.http}` once (it makes the file), then print this "
              "again, or put the file's text in place of TOKEN", file=sys.stderr)
    entry["headers"] = {"Authorization": f"Bearer {token}"}
    return entry


def config(args: Any, client: str = "claude") -> dict[str, Any]:
    """The client's configuration object for this toolsrv."""
    if getattr(args, "http", None):
        entry = http_entry(args, client)
    else:
        cmd = command()
        entry = {"command": cmd[0], "args": cmd[1:] + mcp_args(args)}
    if client == "vscode":
        return {"servers": {"toolsrv": {"type": "stdio", **entry}}}  # http's type wins
    return {"mcpServers": {"toolsrv": entry}}


def print_config(args: Any) -> int:
    print(json.dumps(config(args, args.config), indent=2))
    return 0
