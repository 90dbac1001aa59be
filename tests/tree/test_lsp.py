"""Language servers as tools (issue 31): the bundled lsp_* tools on a real pylsp, through
the python-9p-free toolsrv client, on a small project each test writes.

A whole server on a thread serves data/tools; the language server is a real process tree
(the bridge and pylsp) started through the launcher: its own PID namespace, cgroup,
Landlock ruleset and uid.  Every "gone" is checked on the real process table; waits are
bounded, nothing asserts on timing.  Through 9pfuse: skipped where 9pfuse is missing
(tests/cli/test_doc_examples.py runs the mount tests), the same call files are used here.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import socket
import tempfile
import time

import pytest

from apphelpers import AppThread, add_tool, tools_dir
from lsphelpers import A, B, PROJECT, PYLSP, SHAPES, write_project
from toolsrv.cli.client import Client, ClientError

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
pytestmark = pytest.mark.skipif(PYLSP is None, reason="python-lsp-server is not installed "
                                "(the lsp extra of setup.cfg: pip install 'toolsrv[lsp]')")
TOOLS = ["lsp_definition", "lsp_references", "lsp_hover", "lsp_diagnostics", "lsp_symbols",
         "lsp_rename", "lsp_calls"]

PROBE = """\
import socket, sys
try:
    open(sys.argv[1]).read()
    print("read: ok")
except OSError as e:
    print("read:", e.strerror)
s = socket.socket()
s.settimeout(5)
try:
    s.connect(("127.0.0.1", int(sys.argv[2])))
    print("connect: ok")
except OSError as e:
    print("connect:", e.strerror or e)
"""


def probe_cmd(tools: str, secret: str, port: int) -> str:
    """A language server command that first tries what a hostile project could make it
    do (read a file outside the grants, connect to the network), writing what happened
    to probe.txt in the cwd, then runs pylsp."""
    with open(os.path.join(tools, "probe.py"), "w") as f:
        f.write(PROBE)
    os.chmod(os.path.join(tools, "probe.py"), 0o644)
    return f"/usr/bin/python3 {tools}/probe.py {secret} {port} > probe.txt 2>&1; exec {PYLSP}"


@pytest.fixture(scope="module")
def srv():
    secret_dir = tempfile.mkdtemp(prefix="secret.", dir="/tmp")
    os.chmod(secret_dir, 0o755)                # only the sandbox keeps it out
    with open(os.path.join(secret_dir, "secret.py"), "w") as f:
        f.write("TOKEN = 'hunter2'\n")
    os.chmod(os.path.join(secret_dir, "secret.py"), 0o644)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.setblocking(False)
    extra = tools_dir()
    meta = json.load(open(os.path.join(REPO, "data", "tools", "lsp_definition.meta")))
    add_tool(extra, "lsp_idle_definition", None, {
        **meta, "resident": {**meta["resident"], "idle": 2},
        "cmd": f"exec {PYLSP} -v"})      # its own command: its own server
    add_tool(extra, "lsp_probe_symbols", None, {
        **meta, "resident": {**meta["resident"], "tool": "symbols"},
        "cmd": probe_cmd(extra, os.path.join(secret_dir, "secret.py"),
                         listener.getsockname()[1])})
    app = AppThread([os.path.join(REPO, "data", "tools"), extra], timeout=120).start()
    app.secret, app.listener = secret_dir, listener
    yield app
    app.cleanup()
    listener.close()
    shutil.rmtree(secret_dir, ignore_errors=True)
    shutil.rmtree(extra, ignore_errors=True)


class Agent:
    """A session with the project in its cwd and an agent with the lsp tools."""

    def __init__(self, srv: AppThread, s: str, a: str = "a", tools: list[str] = TOOLS,
                 files: dict[str, str] | None = None) -> None:
        self.c = Client.connect(srv.addr)
        self.s, self.base = s, f"session/{s}/agent/{a}"
        if a == "a":
            self.c.mkdir(f"session/{s}")
        self.c.mkdir(self.base)
        self.c.rdwr(self.base + "/ctl", ("tool_load " + " ".join(tools)).encode())
        self.cwd = self.c.read(f"session/{s}/cwd").decode().strip()
        if files is not None:
            write_project(self.cwd, files)

    def __call__(self, tool: str, **args) -> str:
        return self.c.rdwr(f"{self.base}/tools/{tool}/call", json.dumps(args).encode()
                           ).decode()

    def status(self, tool: str) -> list[str]:
        return self.c.read(f"{self.base}/tools/{tool}/status").decode().splitlines()

    def file(self, rel: str) -> str:
        with open(os.path.join(self.cwd, rel)) as f:
            return f.read()


def servers(cwd: str) -> dict[str, list[int]]:
    """The language server processes of a session's cwd: the bridges and the pylsps."""
    out: dict[str, list[int]] = {"bridge": [], "server": []}
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        try:
            argv = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
            here = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            continue
        if here == cwd and b"toolsrv/tree/resident/lspbridge.py" in b"\0".join(argv):
            out["bridge"].append(int(pid))
        elif here == cwd and PYLSP.encode() in argv:
            out["server"].append(int(pid))
    return out


def wait_for(pred, what: str, limit: float = 60.0) -> None:
    end = time.monotonic() + limit
    while time.monotonic() < end:
        if pred():
            return
        time.sleep(0.05)
    raise AssertionError(f"gave up waiting for {what}")


@pytest.fixture(scope="module")
def ag(srv):
    return Agent(srv, "nav", files=PROJECT)


def test_definition_by_position_and_by_symbol(ag):
    assert ag("lsp_definition", path="pkg/a.py", line=5, column=24) == \
        "pkg/shapes.py:7:9: def area(self):\n"
    assert ag("lsp_definition", path="pkg/a.py", line=5, column=12) == \
        "pkg/shapes.py:1:7: class Shape:\n"
    assert ag("lsp_definition", symbol="Shape.area") == "pkg/shapes.py:7:9: def area(self):\n"
    assert ag("lsp_definition", symbol="Shape") == "pkg/shapes.py:1:7: class Shape:\n"
    status = ag.status("lsp_definition")
    assert status[0].startswith("ok ") and status[1].startswith("resident up ")


def test_references_by_position_and_by_symbol(ag):
    want = ("pkg/a.py:5:24: return Shape(1, 2).area()\n"
            "pkg/b.py:6:14: return s.area() + s.scaled(2).area()\n"
            "pkg/b.py:6:35: return s.area() + s.scaled(2).area()\n"
            "pkg/shapes.py:7:9: def area(self):\n")
    assert ag("lsp_references", symbol="Shape.area") == want
    assert ag("lsp_references", path="pkg/b.py", line=6, column=14) == want
    assert ag("lsp_references", symbol="Shape.area", include_declaration=False) == \
        "".join(want.splitlines(True)[:3])


def test_hover_shows_the_docstring(ag):
    assert "Width times height." in ag("lsp_hover", symbol="Shape.area")
    out = ag("lsp_hover", path="pkg/b.py", line=5, column=9)
    assert "A rectangle-like shape that knows its area." in out


def test_symbols_outline_and_workspace_query(ag):
    out = ag("lsp_symbols", path="pkg/shapes.py").splitlines()
    assert "pkg/shapes.py:1:7: class Shape [1-12]" in out
    assert "pkg/shapes.py:7:9: method Shape.area [7-9]" in out
    assert "pkg/shapes.py:11:9: method Shape.scaled [11-12]" in out
    assert ag("lsp_symbols", query="scal") == \
        "pkg/shapes.py:11:9: method Shape.scaled [11-12]\n"


def test_diagnostics_see_an_edit_on_disk(srv):
    ag = Agent(srv, "diag", files=PROJECT)
    assert ag("lsp_diagnostics", path="pkg/b.py") == "no diagnostics\n"
    write_project(ag.cwd, {"pkg/b.py": B.replace("s.area() + ", "s.area() + missing + ")})
    assert ag("lsp_diagnostics", path="pkg/b.py") == \
        "pkg/b.py:6:23: error: undefined name 'missing' [pyflakes]\n"
    assert ag("lsp_diagnostics") == \
        "pkg/b.py:6:23: error: undefined name 'missing' [pyflakes]\n"    # the whole tree
    write_project(ag.cwd, {"pkg/b.py": B})
    assert ag("lsp_diagnostics", path="pkg/b.py") == "no diagnostics\n"


def test_rename_changes_both_modules_and_nothing_else(srv):
    ag = Agent(srv, "ren", files=PROJECT)
    before = {rel: ag.file(rel) for rel in PROJECT}
    diff = ag("lsp_rename", symbol="Shape.area", new_name="surface")
    assert [ln for ln in diff.splitlines() if ln.startswith("+++")] == \
        ["+++ b/pkg/a.py", "+++ b/pkg/b.py", "+++ b/pkg/shapes.py"]
    assert "-    return Shape(1, 2).area()\n+    return Shape(1, 2).surface()\n" in diff
    after = {rel: ag.file(rel) for rel in PROJECT}
    assert after["pkg/a.py"] == A.replace(".area(", ".surface(")
    assert after["pkg/b.py"] == B.replace(".area(", ".surface(")
    assert after["pkg/shapes.py"] == SHAPES.replace("def area(", "def surface(")
    for rel in ("pkg/c.py", "notes.txt", "pkg/__init__.py"):
        assert after[rel] == before[rel]
    # the server was told: the new name resolves at once
    assert ag("lsp_definition", path="pkg/a.py", line=5, column=24) == \
        "pkg/shapes.py:7:9: def surface(self):\n"


def test_bad_requests_are_clear_errors_and_the_server_stays(ag):
    cases = [
        (dict(tool="lsp_definition", path="../x.py", line=1), "../x.py is outside the "
         "working directory"),
        (dict(tool="lsp_definition", path="notes.txt", line=1), "is not a python file"),
        (dict(tool="lsp_definition", path="pkg/a.py", line=99), "line: 99 is past the end"),
        (dict(tool="lsp_definition", path="pkg/a.py", line=6), "line: 6 is past the end of "
         "pkg/a.py (5 lines)"),                          # "...\n": 5 lines, not 6
        (dict(tool="lsp_definition", path="pkg/a.py", line=5, column=40), "column: 40 is "
         "past the end of line 5 of pkg/a.py (29 characters)"),
        (dict(tool="lsp_rename", symbol="Shape", new_name="not valid"), "new_name: 'not "
         "valid' is not a name"),
        (dict(tool="lsp_rename", symbol="Shape", new_name="class"), "new_name: 'class' is "
         "not a Python identifier; nothing changed"),
        (dict(tool="lsp_definition", path="pkg/gone.py", line=1), "pkg/gone.py: No such file"),
        (dict(tool="lsp_definition", symbol="Nowhere.thing"), "no symbol Nowhere.thing"),
        (dict(tool="lsp_definition", symbol="area"), "area is ambiguous (2 matches)"),
        (dict(tool="lsp_hover"), "give path, line and column (1-based), or symbol"),
        (dict(tool="lsp_calls", symbol="Shape.area"), "pylsp does not offer "
         "callHierarchyProvider"),
    ]
    for args, words in cases:
        tool = args.pop("tool")
        with pytest.raises(ClientError, match=re.escape(words)):
            ag(tool, **args)
    assert ag("lsp_definition", symbol="Shape") == "pkg/shapes.py:1:7: class Shape:\n"


def test_two_agents_of_a_session_share_one_server(srv):
    one = Agent(srv, "share", files=PROJECT)
    two = Agent(srv, "share", "b")
    assert one("lsp_definition", symbol="Shape") == "pkg/shapes.py:1:7: class Shape:\n"
    assert "A rectangle-like shape" in two("lsp_hover", symbol="Shape")
    got = servers(one.cwd)
    assert len(got["server"]) == 1 and len(got["bridge"]) == 1
    one.c.rdwr(one.base + "/ctl", b"tool_unload " + " ".join(TOOLS).encode())
    assert two("lsp_definition", symbol="Shape.area").startswith("pkg/shapes.py:7:9:")
    assert servers(one.cwd)["server"] == got["server"]   # one left: the server stays
    two.c.rdwr(two.base + "/ctl", b"tool_unload " + " ".join(TOOLS).encode())
    wait_for(lambda: servers(one.cwd) == {"bridge": [], "server": []},
             "the last unload to end the server and its bridge")


def test_a_cwd_change_restarts_it_and_agent_removal_ends_it(srv):
    ag = Agent(srv, "move", files=PROJECT)
    assert ag("lsp_definition", symbol="Shape").startswith("pkg/shapes.py:1:7")
    first = servers(ag.cwd)
    assert len(first["server"]) == 1
    other = tempfile.mkdtemp(prefix="proj.", dir="/tmp")
    os.chmod(other, 0o777)
    write_project(other, dict(PROJECT, **{"pkg/a.py": "\n" + A}))   # one line lower
    ag.c.write(f"session/{ag.s}/cwd", other.encode())
    assert ag("lsp_definition", path="pkg/a.py", line=6, column=12) == \
        "pkg/shapes.py:1:7: class Shape:\n"
    wait_for(lambda: servers(ag.cwd) == {"bridge": [], "server": []}, "the old one to end")
    moved = servers(other)["server"]
    assert len(moved) == 1
    ag.c.write(f"session/{ag.s}/sandbox", b"client9p")     # the session's sandbox changes
    assert ag("lsp_definition", symbol="Shape").startswith("pkg/shapes.py:1:7")
    wait_for(lambda: servers(other)["server"] not in ([], moved), "a restart")
    assert "-> stopped: sandbox or cwd changed" in ag.c.read(ag.base + "/log").decode()
    ag.c.rm(ag.base)
    wait_for(lambda: servers(other) == {"bridge": [], "server": []},
             "agent removal to end the server")
    shutil.rmtree(other, ignore_errors=True)


def test_idle_ends_it(srv):
    ag = Agent(srv, "idle", tools=["lsp_idle_definition"], files=PROJECT)
    assert ag("lsp_idle_definition", symbol="Shape") == "pkg/shapes.py:1:7: class Shape:\n"
    assert len(servers(ag.cwd)["server"]) == 1
    wait_for(lambda: servers(ag.cwd) == {"bridge": [], "server": []}, "the idle stop")
    assert ag.status("lsp_idle_definition")[1] == "resident stopped: idle"
    assert ag("lsp_idle_definition", symbol="Shape") == "pkg/shapes.py:1:7: class Shape:\n"


def test_the_server_is_confined(srv):
    files = dict(PROJECT, **{"pkg/leak.py": "from pkg.outside.secret import TOKEN\n"
                                            "from pkg.inside.secret import TOKEN as T2\n",
                             "pkg/inside/__init__.py": "",
                             "pkg/inside/secret.py": "TOKEN = 'hunter2'\n"})
    ag = Agent(srv, "jail", tools=TOOLS + ["lsp_probe_symbols"], files=files)
    os.symlink(srv.secret, os.path.join(ag.cwd, "pkg", "outside"))
    # the server cannot read what the sandbox does not grant, even through the project
    assert ag("lsp_definition", path="pkg/leak.py", line=2, column=40) == \
        "pkg/inside/secret.py:1:1: TOKEN = 'hunter2'\n"
    assert ag("lsp_definition", path="pkg/leak.py", line=1, column=33).startswith(
        "no definition found")
    with pytest.raises(ClientError, match="pkg/outside/secret.py: Per-?mission denied"):
        ag("lsp_symbols", path="pkg/outside/secret.py")
    pid = servers(ag.cwd)["server"][0]
    status = dict(ln.split(":\t", 1) for ln in open(f"/proc/{pid}/status").read().splitlines()
                  if ":\t" in ln)
    assert status["NoNewPrivs"].strip() == "1" and status["Seccomp"].strip() == "2"
    if os.geteuid() == 0:
        assert status["Uid"].split()[0] == "65534"
    assert os.readlink(f"/proc/{pid}/ns/pid") != os.readlink("/proc/self/ns/pid")
    # the command a .meta names runs as confined: no secret, no network
    assert "pkg/a.py:4:5: function one [4-5]\n" in ag("lsp_probe_symbols", path="pkg/a.py")
    probe = ag.file("probe.txt")
    assert "read: Permission denied" in probe and "connect: ok" not in probe
    with pytest.raises(BlockingIOError):
        srv.listener.accept()


def test_a_cancelled_call_leaves_a_server_that_answers(srv):
    """A cancel during the first call (the server starting) ends that call; the next call
    gets a server that answers (a half-initialized one is not kept)."""
    ag = Agent(srv, "cancel", files=PROJECT)
    ag.c.write(ag.base + "/tools/lsp_definition/call", b'{"symbol": "Shape"}')
    ag.c.write(ag.base + "/ctl", b"cancel lsp_definition")
    wait_for(lambda: ag.status("lsp_definition")[0].split()[0] in ("killed", "ok"),
             "the cancelled call to end")
    assert ag("lsp_definition", symbol="Shape") == "pkg/shapes.py:1:7: class Shape:\n"
    assert ag("lsp_hover", symbol="Shape.area").startswith("area(self)")


OVERRIDE = {"pkg/__init__.py": "",
            "pkg/shapes.py": "class Shape:\n    def area(self):\n        \"\"\"Base.\"\"\"\n"
                             "        return 0\n\n\nclass Circle(Shape):\n"
                             "    def area(self):\n        \"\"\"Round.\"\"\"\n"
                             "        return 3\n",
            "main.py": "import os\nprint(undefined_thing)\n"}


def test_an_override_is_ambiguous_and_a_symlink_is_skipped_not_fatal(srv):
    """A method and its override are two symbols, not one seen twice: a bare name that
    matches both fails and lists both.  A symlinked file in the project is skipped by
    the whole-tree calls (it is never followed), and named alone it says so."""
    ag = Agent(srv, "over", files=OVERRIDE)
    os.symlink("main.py", os.path.join(ag.cwd, "alias.py"))
    with pytest.raises(ClientError, match=r"area is ambiguous \(2 matches\)") as e:
        ag("lsp_definition", symbol="area")
    assert "pkg/shapes.py:2:9:" in str(e.value) and "pkg/shapes.py:8:9:" in str(e.value)
    assert ag("lsp_definition", symbol="Circle.area") == \
        "pkg/shapes.py:8:9: def area(self):\n"
    # an edit on disk of a file the server has open is seen by the next symbol lookup
    write_project(ag.cwd, {"pkg/shapes.py": OVERRIDE["pkg/shapes.py"].replace(
        "    def area(self):\n        \"\"\"Round.", "    def perimeter(self):\n        \"\"\"Round.")})
    assert ag("lsp_definition", symbol="Circle.perimeter") == \
        "pkg/shapes.py:8:9: def perimeter(self):\n"
    assert ag("lsp_definition", symbol="area") == "pkg/shapes.py:2:9: def area(self):\n"
    write_project(ag.cwd, {"pkg/shapes.py": OVERRIDE["pkg/shapes.py"]})
    assert ag("lsp_diagnostics") == \
        "main.py:1:1: warning: 'os' imported but unused [pyflakes]\n" \
        "main.py:2:7: error: undefined name 'undefined_thing' [pyflakes]\n"
    with pytest.raises(ClientError, match="alias.py: a symbolic link, not followed"):
        ag("lsp_diagnostics", path="alias.py")
    with pytest.raises(ClientError, match="callHierarchyProvider") as e:
        ag("lsp_calls", symbol="Circle.area")
    assert "lsp_calls:" not in str(e.value)   # the CLI says the tool; the error does not again
