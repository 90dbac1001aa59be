"""The start-up message: where the server listens, what it serves, what to try."""
from __future__ import annotations

from typing import Any


def banner(app: Any) -> str:
    reg = app.registry
    addr = str(app.addrs[0])
    a = f" -a '{addr}'" if addr != str(__import__("toolsrv.dial").dial.default_addr()) else ""
    errors = [ln for ln in reg.errors_text().splitlines() if ln]
    lines = [f"toolsrv: serving on {', '.join(str(x) for x in app.addrs)}",
             f"toolsrv: {len(reg.tools)} tools loaded, {len(errors)} in tools/errors"
             + (" (toolsrv read tools/errors to see why)" if errors else "")]
    if app.runner is not None and hasattr(app.runner, "status_line"):
        lines.append(f"toolsrv: sandbox: {app.runner.status_line()}")
    tool = "file_read" if "file_read" in reg.tools else (sorted(reg.tools) or ["TOOL"])[0]
    lines += ["toolsrv: try:",
              f"  toolsrv{a} read tools/index",
              f"  toolsrv{a} call demo me {tool} '{{\"path\": \"README.md\"}}'"
              if tool == "file_read" else f"  toolsrv{a} call demo me {tool} '{{}}'",
              f"  toolsrv{a} ls -l session/demo/agent/me/tools/{tool}"]
    return "\n".join(lines)
