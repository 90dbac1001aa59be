"""The lsp_* tools through `toolsrv mcp` (issue 31), with the official SDK's client: a
real pylsp behind a whole toolsrv on a thread, the project in the session's cwd."""
from __future__ import annotations

import os
import shutil
import tempfile

import anyio
import pytest

pytest.importorskip("mcp", reason="the MCP SDK is not installed (pip install 'toolsrv[mcp]')")

from apphelpers import AppThread  # noqa: E402
from mcphelpers import REPO, env, stdio_face, text  # noqa: E402
from serverhelpers import stop_clean  # noqa: E402

from lsphelpers import PROJECT, PYLSP, write_project  # noqa: E402

pytestmark = pytest.mark.skipif(PYLSP is None, reason="python-lsp-server is not installed "
                                "(the lsp extra of setup.cfg: pip install 'toolsrv[lsp]')")


@pytest.fixture(scope="module")
def server():
    app = AppThread([os.path.join(REPO, "data", "tools")],
                    timeout=120).start()
    yield app
    stop_clean(app)


def test_definition_hover_and_diagnostics_through_the_mcp_face(server):
    proj = tempfile.mkdtemp(prefix="proj.", dir="/tmp")
    os.chmod(proj, 0o777)
    write_project(proj, PROJECT)
    write_project(proj, {"pkg/b.py": PROJECT["pkg/b.py"] + "print(nowhere)\n"})

    async def go():
        async with stdio_face("-a", server.addr, "--cwd", proj, "--tools",
                              "lsp_definition,lsp_hover,lsp_diagnostics",
                              environ=env()) as s:
            names = sorted(t.name for t in (await s.list_tools()).tools)
            with anyio.fail_after(180):
                d = await s.call_tool("lsp_definition", {"symbol": "Shape.area"})
                h = await s.call_tool("lsp_hover", {"path": "pkg/a.py", "line": 5,
                                                    "column": 24})
                g = await s.call_tool("lsp_diagnostics", {"path": "pkg/b.py"})
                bad = await s.call_tool("lsp_definition", {"path": "/etc/passwd", "line": 1})
            return names, d, h, g, bad
    names, d, h, g, bad = anyio.run(go)
    shutil.rmtree(proj, ignore_errors=True)
    assert names == ["lsp_definition", "lsp_diagnostics", "lsp_hover"]
    assert text(d) == "pkg/shapes.py:7:9: def area(self):\n" and not d.is_error
    assert "Width times height." in text(h)
    assert text(g) == "pkg/b.py:7:7: error: undefined name 'nowhere' [pyflakes]\n"
    assert bad.is_error and "/etc/passwd is outside the working directory" in text(bad)
