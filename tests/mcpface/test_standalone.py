"""`toolsrv mcp` alone: nothing answers at ADDR, so it serves the default registry in
process (on a private socket, as a 9P client of it like any other), with nothing but
`{"command": "toolsrv", "args": ["mcp"]}` in the client's config.

$NAMESPACE points at an empty directory, so the default address has no server; $HOME at
an empty one, so the default registry is the bundled data/tools alone."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile

import anyio
import pytest

pytest.importorskip("mcp", reason="the MCP SDK is not installed (pip install 'toolsrv[mcp]')")

from mcphelpers import CLIENT, env, text  # noqa: E402

TOOLSRV = os.path.join(os.path.dirname(sys.executable), "toolsrv")


@pytest.fixture
def fresh():
    """A namespace directory with no server in it, a home with no tools, a working dir."""
    root = tempfile.mkdtemp(prefix="mcp-alone.", dir="/tmp")
    os.chmod(root, 0o755)
    ns, home, work = (os.path.join(root, n) for n in ("ns", "home", "work"))
    for d in (ns, home, work):
        os.mkdir(d)
    os.chmod(ns, 0o700)
    os.chmod(work, 0o755)
    with open(os.path.join(work, "hello.txt"), "w") as f:
        f.write("hi from the standalone test\n")
    os.chmod(os.path.join(work, "hello.txt"), 0o644)
    e = env(NAMESPACE=ns, HOME=home)
    e.pop("TOOLSRV_ADDR", None)
    yield e, work, ns
    shutil.rmtree(root, ignore_errors=True)


def test_the_bare_config_works_on_a_fresh_machine(fresh):
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client
    environ, work, ns = fresh
    log = tempfile.TemporaryFile("w+")
    params = StdioServerParameters(command=TOOLSRV, args=["mcp"], env=environ, cwd=work)

    async def go():
        async with stdio_client(params, errlog=log) as (r, w):
            async with ClientSession(r, w, client_info=CLIENT) as s:
                with anyio.fail_after(60):
                    await s.initialize()
                names = {t.name for t in (await s.list_tools()).tools}
                read = await s.call_tool("file_read", {"path": "hello.txt"})
                missing = await s.call_tool("file_read", {"path": "no-such.txt"})
                return names, read, missing
    names, read, missing = anyio.run(go)
    log.seek(0)
    err = log.read()
    assert "nothing answers at unix!" + ns + "/toolsrv" in err
    assert "serving the default registry in this process" in err
    assert {"file_read", "file_write", "file_edit"} <= names       # bundled data/tools
    assert read.is_error is False and "hi from the standalone test" in text(read)
    assert missing.is_error is True and "\nlog: " in text(missing)   # toolsrv's reason
    assert os.listdir(ns) == []          # its own server listened elsewhere, privately


def test_no_standalone_fails_when_nothing_answers(fresh):
    environ, work, ns = fresh
    p = subprocess.run([TOOLSRV, "mcp", "--no-standalone"], env=environ, cwd=work,
                       capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert p.returncode == 1
    assert f"toolsrv mcp: cannot connect to unix!{ns}/toolsrv" in p.stderr


def test_a_refusal_is_not_a_reason_to_serve_alone(fresh, tmp_path):
    """Something answers but is not a 9P server that lets us in: an error, no fallback."""
    import socket
    environ, work, ns = fresh
    path = os.path.join(ns, "toolsrv")
    s = socket.socket(socket.AF_UNIX)
    s.bind(path)
    s.listen(1)
    try:
        p = subprocess.Popen([TOOLSRV, "mcp"], env=environ, cwd=work, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        conn, _ = s.accept()
        conn.close()                     # hangs up at once: "toolsrv hung up"
        out, err = p.communicate(timeout=60)
        assert p.returncode == 1
        assert "cannot connect to" in err and "serving the default registry" not in err
    finally:
        s.close()
