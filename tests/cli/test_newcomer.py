"""A newcomer's first hour (issue 27), as a new user meets it: the `toolsrv` command and a
server started outside the checkout, real tools run in the real sandbox.

1. Truncated or empty JSON never looks like success: the CLI refuses it before it
   connects (exit 2), and a read of `call` on a fid whose writes hold it is an error.
2. Errors that name the fix: did-you-mean, a broken .meta, a tool hidden by its variants,
   a call before tool_load, nothing at the address, a timeout, a sandbox refusal.
3. A tool's own words reach the CLI, the MCP face, `log` and `err` as it wrote them; only
   the Rerror (what 9pfuse maps to an errno) carries errors.defuse's rewrite.
"""
from __future__ import annotations

import errno
import json
import os
import subprocess
import tempfile

import pytest

from shellhelpers import REPO, TOOLSRV, serving, wait_until
from toolsrv.cli.client import Client, ClientError
from toolsrv.errors import errno_for
from toolsrv.proto import ORDWR, Tread, Twrite

SPEAK = "#!/bin/sh\ncat >/dev/null\necho 'thinking' \necho 'open: permission denied; " \
        "no such file: /etc/x' >&2\nexit 1\n"
SLOW = "#!/bin/sh\necho started-out\necho started-err >&2\nexec sleep 60\n"
TOOLS = {
    "speak": (SPEAK, {}),
    "slow": (SLOW, {}),
    "hidden_here": (None, {"variants": [{"match": {"binary": "no-such-binary-xyz-27"},
                                         "cmd": "true"}]}),
}


@pytest.fixture(scope="module")
def served():
    with serving("--timeout", "3", tools=TOOLS) as s:
        env = s[0]
        d = os.path.join(env["HOME"], ".config", "ollie", "tools")
        with open(os.path.join(d, "broken_meta.meta"), "w") as f:
            f.write('{"description": "a tool", "args": ')     # cut short
        with Client.connect(addr(env)) as c:
            assert wait_until(lambda: b"broken_meta" in c.read("tools/errors"), 30)
        yield s


def addr(env: dict) -> str:
    return f"unix!{env['NAMESPACE']}/toolsrv"


def run(env, *args, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(TOOLSRV + list(args), env=env, cwd=tempfile.gettempdir(),
                          input=stdin, capture_output=True, text=True, timeout=120)


# ------------------------------------------------------------------ 1. no silent success

@pytest.mark.parametrize("args, said", [
    ('{"path": "x"', "Expecting ',' delimiter: line 1 column 13"),
    ('', "no args"),
    ('   ', "no args"),
    ('[1, 2]', "not an array"),
    ('{"a": 1} {"b": 2}', "Extra data: line 1 column 10"),
])
def test_the_cli_refuses_args_that_are_not_one_json_object_before_connecting(args, said):
    """Exit 2, the JSON error and where, and no connection at all: the address here has
    no server, and the message is still the JSON's."""
    env = dict(os.environ, TOOLSRV_ADDR="unix!/tmp/no-toolsrv-here-27/toolsrv")
    r = run(env, "call", "s", "me", "file_read", args)
    assert r.returncode == 2, r
    assert said in r.stderr and "nothing was called" in r.stderr and r.stdout == ""
    assert "no toolsrv answers" not in r.stderr
    r = run(env, "rdwr", "session/s/agent/me/tools/file_read/call", args)
    assert r.returncode == 2 and said in r.stderr, r
    r = run(env, "rdwr", "session/s/agent/me/tools/file_read/call", stdin=args)
    assert r.returncode == 2 and said in r.stderr, r


def test_a_read_after_incomplete_or_empty_json_is_an_error_not_an_empty_success(served):
    env = served[0]
    with Client.connect(addr(env)) as c:
        c.mkdir("session/inc")
        c.mkdir("session/inc/agent/me")
        c.rdwr("session/inc/agent/me/ctl", b"tool_load file_read")
        call = "session/inc/agent/me/tools/file_read/call"
        with pytest.raises(ClientError, match=r"^invalid args: incomplete JSON: .*line 1 "
                           r"column 13.* \(invalid argument\)$"):
            c.rdwr(call, b'{"path": "x"')
        with pytest.raises(ClientError, match=r"^invalid args: incomplete JSON: nothing "
                           r"written.* \(invalid argument\)$"):
            c.rdwr(call, b"")
        status = c.read("session/inc/agent/me/tools/file_read/status").decode()
        assert status.startswith("invalid: invalid args: incomplete JSON"), status
        # in pieces, on one fid: the read between them is the error; a fid that wrote
        # nothing still reads end of file at once (plan9port's `9p rdwr` reads first)
        fid = c.open(call, ORDWR)
        assert c.rpc(Tread(0, fid, 0, 100)).data == b""
        c.rpc(Twrite(0, fid, 0, b'{"pa'))
        with pytest.raises(ClientError, match="incomplete JSON"):
            c.rpc(Tread(0, fid, 4, 100))
        # the bytes stay: a next write completes them (`9p rdwr` reads after each line)
        c.rpc(Twrite(0, fid, 4, b'th": "/nonexistent-27"}'))
        with pytest.raises(ClientError, match="no such file: /nonexistent-27"):
            c.rpc(Tread(0, fid, 27, 100))          # the call ran
        c.clunk(fid)
        log = c.read("session/inc/agent/me/log").decode()
        assert log.count("invalid args: incomplete JSON") == 3, log
        assert "discarded at close" not in log         # said once, by the read


# ------------------------------------------------------------------ 2. errors that name the fix

def test_tool_load_names_the_closest_tools_a_broken_meta_and_hidden_variants(served):
    env = served[0]
    r = run(env, "call", "tl", "me", "file_raed", "{}")
    assert r.returncode == 1
    assert "tool_load: no such tool: file_raed: did you mean file_read?" in r.stderr, r.stderr
    r = run(env, "call", "tl", "me", "broken_meta", "{}")
    assert "no such tool: broken_meta: its .meta has an error (see tools/errors): line 1 " \
        "column 35" in r.stderr, r.stderr
    r = run(env, "call", "tl", "me", "hidden_here", "{}")
    assert "no such tool: hidden_here: hidden on this host (see tools/errors): no variant " \
        "matches" in r.stderr, r.stderr
    for said in (r.stderr,):                   # 9pfuse: ENOENT, for `echo tool_load x > ctl`
        assert errno_for(said) == errno.ENOENT


def test_a_call_before_tool_load_says_to_load_it(served):
    env = served[0]
    assert run(env, "mkdir", "session/nl").returncode == 0
    assert run(env, "mkdir", "session/nl/agent/me").returncode == 0
    r = run(env, "rdwr", "session/nl/agent/me/tools/file_read/call", '{"path": "x"}')
    assert r.returncode == 1
    want = ('file_read is not loaded for this agent: write "tool_load file_read" to its ctl '
            "(file not found)")
    assert r.stderr.strip() == f"toolsrv: session/nl/agent/me/tools/file_read/call: {want}"
    with Client.connect(addr(env)) as c:      # one name walked at a time, as 9pfuse does
        fid = c.walk("session/nl/agent/me/tools")
        try:
            from toolsrv.proto import Twalk
            with pytest.raises(ClientError) as e:
                c.rpc(Twalk(0, fid, c.newfid(), ("file_read",)))
            assert str(e.value) == want and errno_for(e.value.ename) == errno.ENOENT
        finally:
            c.clunk(fid)


def test_nothing_at_the_address_says_how_to_start_a_server():
    env = dict(os.environ, TOOLSRV_ADDR="unix!/tmp/no-toolsrv-here-27/toolsrv")
    r = run(env, "read", "tools/index")
    assert r.returncode == 1
    assert r.stderr.startswith("toolsrv: no toolsrv answers at unix!/tmp/no-toolsrv-here-27/"
                               "toolsrv"), r.stderr
    assert '"toolsrv serve"' in r.stderr and "make run" in r.stderr


def test_a_timeout_names_its_limit_and_keeps_the_output(served):
    env = served[0]
    r = run(env, "call", "to", "me", "slow", "{}")
    assert r.returncode == 1
    assert "timeout after 3s (limit: toolsrv serve --timeout, or general.timeout in " \
        "sandbox profile default)" in r.stderr, r.stderr
    assert "out and err keep its output" in r.stderr
    assert run(env, "read", "session/to/agent/me/tools/slow/out").stdout == "started-out\n"
    assert run(env, "read", "session/to/agent/me/tools/slow/err").stdout == "started-err\n"
    assert errno_for(r.stderr) == errno.ETIMEDOUT


def test_a_sandbox_refusal_of_a_bundled_tool_says_so(served):
    env = served[0]
    with tempfile.TemporaryDirectory(prefix="nc27.", dir="/tmp") as d:
        os.chmod(d, 0o755)
        r = run(env, "call", "--cwd", d, "sb", "me", "file_read", '{"path": "/etc/hostname"}')
    assert r.returncode == 1
    assert ("permission denied: /etc/hostname (outside the grants: toolsrv sandbox check)"
            ) in r.stderr, r.stderr


# ------------------------------------------------------------------ 3. a tool's own words

def test_a_tools_words_reach_the_cli_log_and_err_verbatim(served):
    env = served[0]
    words = "open: permission denied; no such file: /etc/x"
    r = run(env, "call", "w", "me", "speak", "{}")
    assert r.returncode == 1
    assert r.stderr.strip() == f"toolsrv: speak: exit 1 (input/output error): {words}"
    log = run(env, "read", "session/w/agent/me/log").stdout
    assert f"exit 1 (input/output error): {words}" in log
    assert run(env, "read", "session/w/agent/me/tools/speak/err").stdout == words + "\n"
    with Client.connect(addr(env)) as c:        # the Rerror: the errno stays toolsrv's
        with pytest.raises(ClientError) as e:
            c.rdwr("session/w/agent/me/tools/speak/call", b"{}")
    assert str(e.value) == f"exit 1 (input/output error): {words}"
    assert "permission" not in e.value.ename and "no such" not in e.value.ename
    assert errno_for(e.value.ename) == errno.EIO
    assert errno_for(str(e.value)) == errno.EACCES      # what the rewrite prevents


def test_a_tools_words_reach_the_mcp_face_verbatim(served):
    pytest.importorskip("mcp", reason="the MCP SDK is not installed")
    import anyio
    from mcphelpers import env as face_env, stdio_face, text
    env = served[0]

    async def go():
        async with stdio_face("-a", addr(env), "--no-standalone",
                              environ=face_env(HOME=env["HOME"],
                                               NAMESPACE=env["NAMESPACE"])) as s:
            return await s.call_tool("speak", {})
    r = anyio.run(go)
    assert r.is_error is True
    assert "exit 1 (input/output error): open: permission denied; no such file: /etc/x" \
        in text(r), text(r)
    assert "\u2060" not in text(r)


def test_json_args_examples_in_the_repo_are_objects():
    """The README's `call` examples pass the CLI's new check (they ran before it too)."""
    from toolsrv.cli.shortcut import args_problem
    with open(os.path.join(REPO, "README.md")) as f:
        readme = f.read()
    for line in readme.splitlines():
        if "toolsrv call " in line and "'" in line:
            arg = line.split("'")[1]
            assert args_problem(arg) is None, line


# ------------------------------------------------------------------ 6. smaller

def test_the_banner_examples_work_after_the_readme_tour():
    """The tour makes session/demo with a private cwd: the banner's examples (a session of
    their own, made where they are typed) still work, run from the checkout."""
    from test_cli import banner_examples
    with serving() as (env, banner, _):
        assert run(env, "mkdir", "session/demo").returncode == 0     # the tour's first step
        assert run(env, "mkdir", "session/demo/agent/me").returncode == 0
        assert " demo " not in banner and "session/demo/" not in banner
        banner_examples(env, banner)


def test_help_lists_import_mcp():
    r = subprocess.run(TOOLSRV + ["--help"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "import-mcp" in r.stdout
    assert "sandbox profile it needs" in r.stdout


def test_help_says_where_the_documentation_is():
    """From the checkout, the checkout's pages; an installed wheel's (PREFIX/share/doc/
    toolsrv) is checked by tests/deploy/check.sh."""
    r = subprocess.run(TOOLSRV + ["--help"], capture_output=True, text=True, timeout=60)
    line = [x for x in r.stdout.splitlines() if x.startswith("documentation: ")]
    assert line == [f"documentation: {REPO}/README.md, {REPO}/doc/"], r.stdout
    assert os.path.isfile(os.path.join(REPO, "doc", "sandbox.md"))
    assert "man 4 toolsrv" in r.stdout


def test_qid_version_and_mtime_move_with_the_content(served):
    env = served[0]
    a = "session/qv/agent/me"
    with Client.connect(addr(env)) as c:
        c.mkdir("session/qv")
        c.mkdir(a)
        paths = [f"{a}/ctl", f"{a}/log", "session/qv/cwd"]
        before = {p: c.stat(p) for p in paths}
        assert c.stat(f"{a}/ctl").qid.vers == before[f"{a}/ctl"].qid.vers   # no change, none
        c.rdwr(f"{a}/ctl", b"tool_load speak")
        c.write("session/qv/cwd", b"/tmp\n")
        tool = [f"{a}/tools/speak/{n}" for n in ("out", "err", "status")]
        first = {p: c.stat(p) for p in tool}
        with pytest.raises(ClientError):
            c.rdwr(f"{a}/tools/speak/call", b"{}")
        for p in paths + tool:
            old, new = (before if p in before else first)[p], c.stat(p)
            assert new.qid.vers != old.qid.vers, p
            assert new.qid.path == old.qid.path and new.mtime >= old.mtime, p
        d = os.path.join(env["HOME"], ".config", "ollie", "tools")
        m0 = c.stat("tools/speak/meta")
        rev = int(c.read("revision"))
        with open(os.path.join(d, "speak.meta"), "w") as f:
            json.dump({"description": "speaks, changed", "args": {"type": "object"}}, f)
        assert wait_until(lambda: int(c.read("revision")) > rev, 30)
        m1 = c.stat("tools/speak/meta")
        assert m1.qid.vers != m0.qid.vers and m1.mtime >= m0.mtime


def test_revwait_reads_honour_the_offset(served):
    env = served[0]
    with Client.connect(addr(env)) as c:
        d = os.path.join(env["HOME"], ".config", "ollie", "tools")
        tmp = os.path.join(d, ".revwait_bump.tmp")
        with open(tmp, "w") as f:                                      # a revision past 0
            json.dump({"description": "bump", "cmd": "true"}, f)
        os.replace(tmp, os.path.join(d, "revwait_bump.meta"))
        assert wait_until(lambda: int(c.read("revision")) > 0, 30)
        for _ in range(20):             # the registry may move on between reads (a shared
            rev = c.read("revision")    # server, a late scan): judge a pass it stood still for
            fid = c.open("revwait", ORDWR)
            try:
                got = [c.rpc(Tread(0, fid, 0, 100)).data,
                       c.rpc(Tread(0, fid, 1, 100)).data,
                       c.rpc(Tread(0, fid, len(rev), 100)).data]
                c.rpc(Twrite(0, fid, 0, b"0\n"))                       # long past: at once
                got += [c.rpc(Tread(0, fid, 2, 100)).data,              # where the write ended
                        c.rpc(Tread(0, fid, 2 + len(rev), 100)).data]
            finally:
                c.clunk(fid)
            if c.read("revision") == rev:
                break
        assert got == [rev, rev[1:], b"", rev, b""]


@pytest.mark.parametrize("here, below, want", [
    ("/", "tmp/v/bin/toolsrv", "/tmp/v/bin/toolsrv"),          # from /: absolute
    ("/work/co", ".venv/bin/toolsrv", "/work/co/.venv/bin/toolsrv"),   # make run: absolute too
    ("/work/co", "/opt/v/bin/toolsrv", "/opt/v/bin/toolsrv"),  # elsewhere: absolute
])
def test_the_banners_command_works_from_another_terminal(monkeypatch, here, below, want):
    """A server started from / printed `tmp/v/bin/toolsrv ...`, which works only in /."""
    import sys
    from toolsrv.cli import banner
    monkeypatch.setattr(banner.shutil, "which", lambda _: None)     # not on $PATH
    monkeypatch.setattr(banner.os, "getcwd", lambda: here)
    monkeypatch.setattr(banner.os.path, "abspath",
                        lambda p: p if p.startswith("/") else os.path.join(here, p))
    monkeypatch.setattr(sys, "argv", [below, "serve"])
    assert banner._prog() == want
