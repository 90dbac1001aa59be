"""policy.yaml and the kill switch (tree/policy/, issue 50.2 and 50.3; doc/sandbox.md,
Policy): a refusal names its rule, carries 9pfuse's word and is in the audit trail; the
rate limit holds under 32 concurrent callers and releases on time (a clock the test
moves: counts, not timing); a blocked tool's running call dies; the file edited while
the server runs takes effect on the next call, and a broken one keeps the last good one;
another uid (65534, when root) gets its own rule and may not touch the kill switch.
Real sockets, real processes, a real server on a thread (apphelpers.AppThread)."""
from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading

import pytest

from toolsrv.cli.client import Client, ClientError
from toolsrv.errors import errno_for

from apphelpers import AppThread, add_tool, tools_dir
from bare9p import BARE_9P
from outside import OUTSIDE
from serverhelpers import wait_for

ME = f"uid:{os.geteuid()}"
NOBODY = 65534

BRIEF = """\
default:
  tools: ["*"]
  deny: ["deploy_*"]
  confirm: ["file_write"]
  limits: {calls_per_minute: 120, runs: 4}
principals:
  "uid:1000": {tools: ["file_*", "lsp_*"]}
"""


@pytest.fixture
def tools():
    d = tools_dir()
    add_tool(d, "echo", "#!/bin/sh\ncat\n", {"readOnly": True})
    add_tool(d, "deploy_x", "#!/bin/sh\ncat\n")
    add_tool(d, "other", "#!/bin/sh\ncat\n", {"readOnly": True})
    add_tool(d, "nap", "#!/bin/sh\nexec sleep 30\n")
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def served(tools):
    """A server whose policy.yaml the test writes (`write`); started by `start`."""
    made: list[AppThread] = []
    d = tempfile.mkdtemp(prefix="policy.", dir="/tmp")
    path = os.path.join(d, "policy.yaml")

    class S:
        policy = path

        @staticmethod
        def write(text: str) -> None:
            with open(path + ".new", "w") as f:
                f.write(text)
            os.replace(path + ".new", path)       # as an editor saves

        @staticmethod
        def start(**opts) -> AppThread:
            app = AppThread([tools], policy=path, **opts)      # serve --policy FILE
            made.append(app)
            return app.start()
    yield S
    for a in made:
        a.cleanup()
    shutil.rmtree(d, ignore_errors=True)


def agent(c: Client, load: str, s: str = "s", a: str = "a") -> str:
    c.mkdir(f"session/{s}")
    c.mkdir(f"session/{s}/agent/{a}")
    if load:
        c.rdwr(f"session/{s}/agent/{a}/ctl", f"tool_load {load}".encode())
    return f"session/{s}/agent/{a}"


def trail(app: AppThread) -> list[dict]:
    with open(app.app.audit.path) as f:
        return [json.loads(line) for line in f]


def until_read(c: Client, path: str, want: str) -> str:
    """`path` read again until it holds `want` (the watcher's reload is seen, not slept)."""
    got = [""]

    def seen() -> bool:
        got[0] = c.read(path).decode()
        return want in got[0]
    assert wait_for(seen, 10), f"{path} never held {want!r}: {got[0]!r}"
    return got[0]


def test_the_briefs_example_is_served_and_a_refusal_names_its_rule(served):
    served.write(BRIEF.replace('"uid:1000"', f'"{ME}"').replace('"lsp_*"]', '"lsp_*", "ec*"]'))
    app = served.start()
    with Client.connect(app.addr) as c:
        d = agent(c, "echo")
        assert c.rdwr(f"{d}/tools/echo/call", b'{"x": 1}') == b'{"x": 1}'
        with pytest.raises(ClientError) as e:
            c.rdwr(f"{d}/ctl", b"tool_load other")
        rule = f'policy principals."{ME}".tools: '
        assert e.value.ename.startswith(f"permission denied: {rule}{ME} may load file_*, "
                                        "lsp_*, ec*; other is not among them")
        assert errno_for(e.value.ename) == errno.EACCES
        with pytest.raises(ClientError) as e:
            c.rdwr(f"{d}/ctl", b"tool_load deploy_x")
        assert e.value.ename.startswith("permission denied: policy default.deny: "
                                        f"{ME} may not load deploy_*")
        policy = c.read("policy").decode()
        assert f"{ME}\ttools file_*,lsp_*,ec*\tdeny deploy_*\tconfirm file_write\tlimits " \
               "calls_per_minute 120, runs 4" in policy
    refused = [r for r in trail(app) if r["event"] == "policy" and r["op"] == "refused"]
    assert [(r["principal"], r["tool"], r["of"]) for r in refused] == [
        (ME, "other", "load"), (ME, "deploy_x", "load")]
    assert 'principals."' in refused[0]["reason"]


def test_an_edit_takes_effect_on_the_next_call_and_a_broken_file_keeps_the_last_good(served):
    served.write('default: {tools: ["*"]}\n')
    app = served.start()
    with Client.connect(app.addr) as c:
        d = agent(c, "echo other")
        assert c.rdwr(f"{d}/tools/echo/call", b"{}") == b"{}"
        served.write('default:\n  deny: ["echo"]\n')
        until_read(c, "policy", "deny echo")
        with pytest.raises(ClientError) as e:
            c.rdwr(f"{d}/tools/echo/call", b"{}")
        assert e.value.ename == (f"permission denied: policy default.deny: {ME} may not call "
                                 "echo; echo matches it")
        rec = [r for r in trail(app) if r["event"] == "call"][-1]
        assert (rec["outcome"], rec["tool"]) == ("invalid", "echo")
        assert "policy default.deny" in rec["reason"]

        served.write('default:\n  deny: ["echo"]\n  tols: ["*"]\n')     # a typo: broken
        errors = until_read(c, "tools/errors", served.policy)
        assert f"{served.policy}\tpolicy.yaml: line 3: default.tols: unknown key" in errors
        assert "the last good policy, read " in errors and errors.endswith("holds\n")
        with pytest.raises(ClientError, match="policy default.deny"):
            c.rdwr(f"{d}/tools/echo/call", b"{}")        # still the last good: not opened
        assert c.rdwr(f"{d}/tools/other/call", b"{}") == b"{}"
        assert "error\tpolicy.yaml: line 3" in c.read("policy").decode()

        os.unlink(served.policy)                          # gone: the last good holds too
        until_read(c, "tools/errors", "gone")
        with pytest.raises(ClientError, match="policy default.deny"):
            c.rdwr(f"{d}/tools/echo/call", b"{}")

        served.write("default: {}\n")                     # fixed: in force, errors gone
        until_read(c, "policy", "default\ttools *\tdeny -")
        assert served.policy not in c.read("tools/errors").decode()
        assert c.rdwr(f"{d}/tools/echo/call", b"{}") == b"{}"
    ops = [r["op"] for r in trail(app) if r["event"] == "policy"]
    assert ops.count("broken") == 2 and ops.count("reloaded") == 3


def test_a_broken_file_at_start_stops_the_start(served):
    served.write("default:\n  limits: {runs: many}\n")
    with pytest.raises(ValueError, match=r"policy.yaml: line 2: default.limits.runs: must be "
                                         "a whole number"):
        served.start()


def test_the_rate_limit_holds_under_32_callers_and_releases_on_time(served):
    served.write("default:\n  limits: {calls_per_minute: 10}\n")
    app = served.start()
    now = [1000.0]
    app.call(lambda: setattr(app.app.policy.counters, "clock", lambda: now[0]))
    with Client.connect(app.addr) as c:
        d = agent(c, "echo")

    def burst(calls_each: int) -> tuple[int, list[str]]:
        ok, refused = [0], []
        lock, start = threading.Lock(), threading.Barrier(32)

        def caller() -> None:
            with Client.connect(app.addr) as cc:
                start.wait(30)
                for _ in range(calls_each):
                    try:
                        cc.rdwr(f"{d}/tools/echo/call", b"{}")
                        with lock:
                            ok[0] += 1
                    except ClientError as e:
                        with lock:
                            refused.append(e.ename)
        threads = [threading.Thread(target=caller) for _ in range(32)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        return ok[0], refused

    ok, refused = burst(2)
    assert (ok, len(refused)) == (10, 54)
    want = ("resource busy: policy default.limits.calls_per_minute: "
            f"{ME} made 10 calls in the last minute (limit 10); retry in 60.0s")
    assert set(refused) == {want}
    assert errno_for(want) == errno.EBUSY
    now[0] += 59.9                      # not yet: the first ten are still in the window
    assert burst(1) == (0, [want.replace("60.0s", "0.1s")] * 32)
    now[0] += 0.1                       # a minute after them: ten more, no more
    ok, refused = burst(1)
    assert (ok, len(refused)) == (10, 22)


def test_runs_limit_and_a_blocked_tools_running_call_dies(served):
    served.write("default:\n  limits: {runs: 1}\n")
    app = served.start()
    with Client.connect(app.addr) as c:
        d = agent(c, "nap echo")
        died: list[str] = []

        def napping() -> None:
            with Client.connect(app.addr) as cc:
                try:
                    cc.rdwr(f"{d}/tools/nap/call", b"{}")
                except ClientError as e:
                    died.append(e.ename)
        t = threading.Thread(target=napping)
        t.start()
        until_read(c, f"{d}/tools/nap/status", "running")
        with pytest.raises(ClientError) as e:
            c.rdwr(f"{d}/tools/echo/call", b"{}")
        assert e.value.ename == ("resource busy: policy default.limits.runs: "
                                 f"{ME} has 1 calls under way (limit 1); try again when one ends")

        c.rdwr("block", b"block na*\n")
        t.join(30)
        assert died and died[0].startswith("cancelled"), died      # killed by the block
        assert c.read("block") == b"na*\n"
        with pytest.raises(ClientError) as e:
            c.rdwr(f"{d}/tools/nap/call", b"{}")
        assert e.value.ename == "permission denied: blocked: na* (toolsrv unblock na* lifts it)"
        assert c.rdwr(f"{d}/tools/echo/call", b"{}") == b"{}"     # its run was given back
    recs = trail(app)
    blocked = [r for r in recs if r["event"] == "policy" and r["op"] == "blocked"]
    assert blocked[0]["word"] == "na*" and blocked[0]["killed"] == 1
    assert blocked[0]["by"]["uid"] == os.geteuid()
    nap = [r for r in recs if r["event"] == "call" and r["tool"] == "nap"]
    assert [r["outcome"] for r in nap] == ["killed", "invalid"]

    app.stop()                          # the block outlives the server: kept in its state
    again = served.start(state_dir=app.opts.state_dir)
    with Client.connect(again.addr) as c:
        assert c.read("block") == b"na*\n"
        with pytest.raises(ClientError, match="blocked: na"):
            c.rdwr("session/s/agent/a/tools/nap/call", b"{}")
        c.rdwr("block", b"unblock na*\n")
        assert c.read("block") == b""
        assert c.rdwr("session/s/agent/a/ctl", b"tool_load nap") == b"nap\necho\n"


def test_a_blocked_principal_gets_nothing_and_no_policy_is_todays_behaviour(tools):
    app = AppThread([tools]).start()          # no policy file: everything as before
    try:
        assert app.app.policy.rules is None
        with Client.connect(app.addr) as c:
            d = agent(c, "echo deploy_x")
            assert c.rdwr(f"{d}/tools/deploy_x/call", b"{}") == b"{}"
            assert "none\tevery tool, no limits" in c.read("policy").decode()
            c.rdwr("block", f"block {ME}".encode())
            for path, data in [(f"{d}/tools/echo/call", b"{}"), (f"{d}/ctl", b"tool_load nap")]:
                with pytest.raises(ClientError, match=f"permission denied: blocked: {ME}"):
                    c.rdwr(path, data)
            with pytest.raises(ClientError, match=f"blocked: {ME}"):
                c.mkdir("session/t")
            with pytest.raises(ClientError, match="say block WORD"):
                c.rdwr("block", b"stop everything\n")
            c.rdwr("block", f"unblock {ME}\n".encode())
            assert c.rdwr(f"{d}/tools/echo/call", b"{}") == b"{}"
    finally:
        app.cleanup()


def test_confirm_asks_the_broker_and_says_how_when_there_is_none(served, tmp_path):
    served.write('default:\n  confirm: ["ech*"]\n')
    app = served.start()
    sock = tmp_path / "approve.sock"
    app.call(lambda: setattr(app.app.policy, "broker", str(sock)))
    with Client.connect(app.addr) as c:
        d = agent(c, "echo other")
        with pytest.raises(ClientError) as e:
            c.rdwr(f"{d}/tools/echo/call", b"{}")
        assert e.value.ename.startswith("permission denied: policy default.confirm: echo "
                                        "needs the approval broker's yes (toolsrv approve): "
                                        "no broker at ")
        assert c.rdwr(f"{d}/tools/other/call", b"{}") == b"{}"
        broker = subprocess.Popen([sys.executable, "-m", "toolsrv", "approve", "--socket",
                                   str(sock), "--allow", "echo"], cwd=OUTSIDE,
                                  stderr=subprocess.PIPE, text=True)
        try:
            assert broker.stderr is not None and "listening" in broker.stderr.readline()
            assert c.rdwr(f"{d}/tools/echo/call", b'{"y": 2}') == b'{"y": 2}'
        finally:
            broker.terminate()
            broker.wait(10)


AS_NOBODY = BARE_9P + r"""
def walk(path):
    names = [n for n in path.split("/") if n]
    rpc(110, struct.pack("<IIH", 1, 2, len(names)) + b"".join(s(n) for n in names))
def mkdir(path):
    d, _, name = path.rpartition("/")
    walk(d); rpc(114, struct.pack("<I", 2) + s(name) + struct.pack("<IB", 0x800001ED, 0))
    rpc(120, struct.pack("<I", 2))
def rdwr(path, data):
    walk(path); rpc(112, struct.pack("<IB", 2, 2))
    try:
        rpc(118, struct.pack("<IQI", 2, 0, len(data)) + data)
        r = rpc(116, struct.pack("<IQI", 2, 0, 8192))
        return r[4:4 + struct.unpack_from("<I", r)[0]].decode()
    finally:
        rpc(120, struct.pack("<I", 2))
out, sid = {}, sys.argv[2]
mkdir(f"session/{sid}"); mkdir(f"session/{sid}/agent/a")
for k, path, data in [("load_nap", f"session/{sid}/agent/a/ctl", b"tool_load nap"),
                      ("load_echo", f"session/{sid}/agent/a/ctl", b"tool_load echo"),
                      ("call", f"session/{sid}/agent/a/tools/echo/call", b'{"n": 1}'),
                      ("unblock", "block", b"unblock nap")]:
    try:
        out[k] = "ok: " + rdwr(path, data)
    except RuntimeError as e:
        out[k] = str(e)
print(json.dumps(out))
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="needs another uid to act as (root's setuid)")
def test_another_uid_gets_its_own_rule_and_may_not_unblock(served):
    served.write('principals:\n  "uid:65534": {tools: ["echo"]}\n')
    app = served.start(allow_uids=[NOBODY])
    path = app.addr[len("unix!"):]
    os.chmod(app.tmp, 0o711)
    os.chmod(os.path.dirname(path), 0o711)
    os.chmod(path, 0o666)
    with Client.connect(app.addr) as c:
        c.rdwr("block", b"block nap\n")
    got = as_nobody(app, "n1")
    assert got["load_nap"].startswith("permission denied: blocked: nap")
    assert got["load_echo"] == "ok: echo\n"
    assert got["call"] == 'ok: {"n": 1}'
    assert got["unblock"].startswith("permission denied: block: only the server's own uid")
    with Client.connect(app.addr) as c:
        assert c.read("block") == b"nap\n"         # still blocked: nobody could not lift it
        c.rdwr("block", b"unblock nap\n")
    got = as_nobody(app, "n2")             # unblocked: now its own rule refuses nap
    assert got["load_nap"] == ('permission denied: policy principals."uid:65534".tools: '
                               "uid:65534 may load echo; nap is not among them")
    mine = [r for r in trail(app) if r["event"] == "call" and r["tool"] == "echo"]
    assert mine and all(r["principal"]["uid"] == NOBODY for r in mine)


def as_nobody(app: AppThread, session: str) -> dict:
    r = subprocess.run(["/usr/bin/python3", "-I", "-c", AS_NOBODY, app.addr[len("unix!"):],
                        session], user=NOBODY,
                       group=NOBODY, capture_output=True, text=True, timeout=60, cwd=OUTSIDE)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def toolsrv(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "toolsrv", *args], capture_output=True,
                          text=True, timeout=60, cwd=OUTSIDE)


def test_the_block_verbs_and_the_sessions_limit(served):
    served.write("default:\n  limits: {sessions: 2}\n")
    app = served.start()
    with Client.connect(app.addr) as c:
        agent(c, "", "s1")
        c.mkdir("session/s2")
        with pytest.raises(ClientError) as e:
            c.mkdir("session/s3")
        assert e.value.ename == ("resource busy: policy default.limits.sessions: "
                                 f"{ME} has 2 sessions (limit 2); remove one first")
        c.rm("session/s1")
        c.mkdir("session/s3")                   # one gone: room for one more
    r = toolsrv("block", "-a", app.addr, "deploy_*", "uid:4242")
    assert (r.returncode, r.stdout, r.stderr) == (0, "deploy_*\nuid:4242\n", "")
    assert toolsrv("block", "-a", app.addr).stdout == "deploy_*\nuid:4242\n"
    r = toolsrv("unblock", "-a", app.addr, "uid:4242")
    assert (r.returncode, r.stdout) == (0, "deploy_*\n")
    r = toolsrv("block", "-a", app.addr, "bad\x01word")
    assert r.returncode == 1 and r.stderr.startswith("toolsrv: block: block: not a tool or "
                                                     "principal")
    with open(os.path.join(app.opts.state_dir, "blocks")) as f:
        assert f.read() == "deploy_*\n"
    ops = [(r["op"], r["word"]) for r in trail(app) if r.get("op") in ("blocked", "unblocked")]
    assert ops == [("blocked", "deploy_*"), ("blocked", "uid:4242"), ("unblocked", "uid:4242")]


def test_the_worked_example_of_doc_sandbox_md():
    """doc/sandbox.md's worked example, read from the page, means what the page says."""
    from toolsrv.tree.policy.rules import parse
    from outside import CHECKOUT
    with open(os.path.join(CHECKOUT, "doc", "sandbox.md"), encoding="utf-8") as f:
        page = f.read()
    part = page.split("### A worked example: GitHub", 1)[1]
    rules = parse(part.split("```yaml\n", 1)[1].split("```", 1)[0], "policy.yaml")
    ci, alice, me, other = (rules.rule(w) for w in (
        "tls:O=team,CN=agent-ci", "oauth:alice@example.com", "uid:1000", "uid:1001"))
    assert other.verdict("github_read_pr") is None and other.verdict("file_read") is None
    assert other.verdict("github_comment") == ("tools", "")
    assert other.named("tools") == "default.tools"
    assert ci.verdict("github_merge") == ("confirm", "github_merge")
    assert ci.verdict("github_comment") is None and ci.verdict("shell") == ("tools", "")
    assert alice.verdict("github_merge") == ("deny", "github_merge")
    assert alice.verdict("github_comment") is None
    assert alice.limits == {"calls_per_minute": 60, "runs": 2, "sessions": 2}
    assert ci.limits == {"calls_per_minute": 600, "runs": 8, "sessions": 2}
    assert me.verdict("deploy_x") is None and set(me.limits.values()) == {None}
    said = ("permission denied: policy default.tools: uid:1001 may load file_read, "
            "file_grep, github_read_*; github_comment is not among them")
    assert " ".join(said.split()) in " ".join(part.split())
    from toolsrv.errors import P9Error
    from toolsrv.tree.policy.gate import PolicyGate
    g = PolicyGate(os.devnull)
    g.rules = rules
    with pytest.raises(P9Error) as e:
        g.check_load("uid:1001", "github_comment")
    assert e.value.full == said


def test_the_broker_is_asked_a_confirmation_not_an_elevation():
    from toolsrv.cli.approve import format_request
    text = format_request({"tool": "file_write", "session": "s", "agent": "a", "cwd": "/w",
                           "args": {}, "confirm": "default.confirm", "principal": "uid:1000",
                           "reach": "it runs in its sandbox"})
    assert text.startswith("confirmation request (default.confirm of policy.yaml, for "
                           "uid:1000): tool file_write (session s, agent a)")


def test_a_claim_names_the_principal_only_from_the_servers_own_uid():
    """who.py, rule 1: the MCP face's _meta.principal is taken from a Unix peer of our uid
    or root alone; the static token by its hash, an OAuth subject as oauth:SUB."""
    from toolsrv.tree.policy.who import claimed, peer_name
    ours = {"kind": "unix", "uid": os.geteuid(), "pid": 7}
    assert claimed("bearer token sha256:ab12cd34ef56 from uid 1000", ours) == \
        "token:sha256:ab12cd34ef56"
    assert claimed("alice@example.com", ours) == "oauth:alice@example.com"
    assert claimed("uid 1000", ours) is None           # the face's --no-token form
    assert claimed("alice", {"kind": "unix", "uid": 4242}) is None   # an --allow-uid peer
    assert claimed("alice", {"kind": "tls", "host": "10.0.0.7", "subject": "CN=x"}) is None
    assert claimed("alice", {**ours, "via": "tool"}) is None          # a tool's connection
    assert peer_name({"kind": "tls", "host": "10.0.0.7", "subject": "O=team,CN=ci"}) == \
        "tls:O=team,CN=ci"
    assert peer_name({"kind": "tcp", "host": "127.0.0.1"}) == "host:127.0.0.1"
    assert peer_name({"kind": "unix", "uid": 1000, "pid": 3}) == "uid:1000"
