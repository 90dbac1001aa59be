"""The toolsrv command as a new user meets it: serve with no arguments, the
one-line `call`, the 9p(1)-like verbs, `mount` without 9pfuse (the example script and
the mount: test_shell.py)."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

from outside import OUTSIDE
from shellhelpers import REPO, TOOLSRV, serving


@pytest.fixture(scope="module")
def served():
    with serving() as s:
        yield s
    assert s[2].returncode == 0


def banner_examples(env: dict, banner: str) -> list[str]:
    """The example commands the banner offers, each run as printed: every one must work."""
    examples = [ln.strip() for ln in banner.splitlines() if ln.startswith("  toolsrv")]
    assert len(examples) >= 3
    for ex in examples:
        r = subprocess.run(ex.replace("toolsrv", " ".join(TOOLSRV), 1), shell=True, env=env,
                           cwd=REPO, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, (ex, r.stderr)
        assert r.stdout
    return examples


def run(env, *args, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(TOOLSRV + list(args), env=env, cwd=REPO, input=stdin,
                          capture_output=True, text=True, timeout=60)


def test_first_run_banner(served):
    env, banner, _ = served
    assert f"serving on unix!{env['NAMESPACE']}/toolsrv" in banner
    bundled = len([f for f in os.listdir(os.path.join(REPO, "data", "tools"))
                   if f.endswith(".meta")])
    assert "tools loaded from" in banner and " in tools/errors" in banner
    n = int(banner.split(" tools loaded")[0].rsplit("toolsrv: ", 1)[1])
    errors = int(banner.split(" in tools/errors")[0].rsplit("toolsrv: ", 1)[1])
    assert n + errors == bundled and n >= 5
    banner_examples(env, banner)


def test_banner_examples_work_on_a_non_default_address():
    """With -a, every example carries the address, after its verb, and works as printed."""
    with tempfile.TemporaryDirectory(prefix="elsewhere.", dir="/tmp") as d:
        addr = f"unix!{d}/toolsrv"
        with serving("-a", addr) as (env, banner, _):
            for ex in banner_examples(env, banner):
                assert f" -a '{addr}' " in ex, ex


def test_call_shortcut(served):
    env = served[0]
    assert run(env, "mkdir", "session/c1").returncode == 0     # its own private cwd
    r = run(env, "call", "c1", "bot", "file_write", '{"path": "x.txt", "content": "hi\\n"}')
    assert r.returncode == 0, r.stderr
    r = run(env, "call", "c1", "bot", "file_read", '{"path": "x.txt"}')
    assert r.returncode == 0 and r.stdout == "     1\thi\n"
    r = run(env, "call", "c1", "bot", "file_read", '{"path": 7}')
    assert r.returncode == 1
    assert r.stderr.strip() == ("toolsrv: file_read: invalid args: path: 7 is not of type "
                                "'string' (invalid argument)")
    r = run(env, "call", "c1", "bot", "nosuch", "{}")
    assert r.returncode == 1 and "tool_load: no such tool: nosuch" in r.stderr
    assert "call file_read" in run(env, "read", "session/c1/agent/bot/log").stdout
    # names checked before anything is made (exit 2, usage): no session is left behind
    for argv, words in ((["bad/name", "a", "file_read"], "session 'bad/name': illegal name"),
                        (["c9", "bad name", "file_read"], "agent 'bad name': illegal name"),
                        (["c9", "a", "../x"], "tool '../x': illegal name")):
        r = run(env, "call", *argv, "{}")
        assert r.returncode == 2 and words in r.stderr, r.stderr
    assert "c9" not in run(env, "ls", "session").stdout.split()
    r = run(env, "call", "c1", "bot", "file_read", '{"n": ' + "9" * 5000 + "}")
    assert r.returncode == 2 and "args are not usable JSON: Exceeds the limit" in r.stderr \
        and "Traceback" not in r.stderr, r.stderr            # a usage error, no traceback
    for n in ("0", "101"):
        r = run(env, "search", "-n", n, "read a file")
        assert r.returncode == 2 and f"-n {n}: give 1 to 100 tools" in r.stderr, r.stderr
    r = run(env, "sandbox", "check", "nosuch")
    assert r.returncode == 2 and r.stderr.startswith("toolsrv sandbox check: profile nosuch: "
                                                     "not found (looked for nosuch.yaml in ")


def _project(text: str) -> str:
    """A directory with a README.md, as a user's checkout, that tools can read."""
    d = tempfile.mkdtemp(prefix="project.", dir="/tmp")
    os.chmod(d, 0o755)
    with open(os.path.join(d, "README.md"), "w") as f:
        f.write(text)
    return d


def test_call_works_where_you_stand(served):
    """Issue 14: a session that `toolsrv call` creates gets the caller's directory as its
    cwd, `--cwd DIR` sets it (relative to where you stand), an existing session keeps its
    own, and a cwd that cannot be set leaves no session behind."""
    env = served[0]
    here, there = _project("project readme\n"), _project("other readme\n")
    try:
        def call(*words: str, cwd: str = here) -> subprocess.CompletedProcess:
            return subprocess.run(TOOLSRV + ["call", *words], env=env, cwd=cwd, text=True,
                                  capture_output=True, timeout=60)
        r = call("here1", "a", "file_read", '{"path": "README.md"}')
        assert r.returncode == 0 and r.stdout == "     1\tproject readme\n", r.stderr
        assert run(env, "read", "session/here1/cwd").stdout == os.path.realpath(here) + "\n"
        r = call("here1", "a", "file_read", '{"path": "README.md"}', cwd=REPO)   # kept
        assert r.stdout == "     1\tproject readme\n", r.stderr
        r = call("--cwd", os.path.basename(there), "here1", "a", "file_read",
                 '{"path": "README.md"}', cwd=os.path.dirname(there))
        assert r.stdout == "     1\tother readme\n", r.stderr
        r = call("--cwd", there, "here2", "a", "file_read", '{"path": "README.md"}')
        assert r.stdout == "     1\tother readme\n", r.stderr
        r = call("--cwd", "/nonexistent/dir", "here3", "a", "file_read", '{"path": "x"}')
        assert r.returncode == 1 and "cwd: no such directory: /nonexistent/dir" in r.stderr
        assert "here3" not in run(env, "ls", "session").stdout
    finally:
        shutil.rmtree(here, ignore_errors=True)
        shutil.rmtree(there, ignore_errors=True)


def test_verbs(served):
    env = served[0]
    r = run(env, "ls", "-l", "/")
    assert r.returncode == 0 and [ln.split()[-1] for ln in r.stdout.splitlines()] == \
        ["block", "consent", "hosts", "metrics", "policy", "revision", "revwait", "session",
         "status", "tools"]
    assert run(env, "mkdir", "session/v").returncode == 0
    r = run(env, "mkdir", "session/v")
    assert r.returncode == 1 and "file already exists" in r.stderr
    assert run(env, "write", "session/v/sandbox", stdin="default\n").returncode == 0
    assert run(env, "read", "session/v/sandbox").stdout == "default\n"
    r = run(env, "stat", "revision")
    assert r.returncode == 0 and r.stdout.startswith("revision -r--r--r-- length ")
    r = run(env, "read", "nope")
    assert r.returncode == 1 and r.stderr.strip() == "toolsrv: nope: file not found"
    assert run(env, "rm", "session/v").returncode == 0
    r = run(env, "read", "-a", "unix!/tmp/definitely-not-a-toolsrv", "revision")
    assert r.returncode == 1 and "no toolsrv answers at unix!/tmp/definitely-not-a-toolsrv" in r.stderr \
        and "toolsrv serve" in r.stderr


def test_mount_without_9pfuse_says_how_to_get_it(tmp_path):
    env = dict(os.environ, PATH="/usr/bin:/bin", PLAN9=str(tmp_path / "no-plan9"))
    r = run(env, "mount", str(tmp_path / "m"))
    assert r.returncode == 1
    assert "9pfuse not found" in r.stderr and "plan9port" in r.stderr


def test_mount_refused_the_fuse_device_says_whose_it_is(tmp_path):
    """9pfuse's own words come back, and when they say the device was refused, the
    device's mode and owner and what FUSE needs (a fake 9pfuse says what fusermount
    says to a user who may not open /dev/fuse)."""
    from toolsrv.cli.mount import fuse_hint
    bin_ = tmp_path / "plan9" / "bin"
    bin_.mkdir(parents=True)
    (bin_ / "9pfuse").write_text("#!/bin/sh\necho 'fusermount: failed to open /dev/fuse: "
                                 "Permission denied' >&2\nexit 1\n")
    (bin_ / "9pfuse").chmod(0o755)
    env = dict(os.environ, PATH="/usr/bin:/bin", PLAN9=str(tmp_path / "plan9"))
    r = run(env, "mount", str(tmp_path / "m"))
    assert r.returncode == 1
    assert "9pfuse exited with status 1: fusermount: failed to open /dev/fuse: " \
        "Permission denied" in r.stderr, r.stderr
    if os.path.exists("/dev/fuse"):
        assert "/dev/fuse is mode " in r.stderr and "0666" in r.stderr, r.stderr
    dev = tmp_path / "fuse"
    dev.write_text("")
    dev.chmod(0o600)
    hint = fuse_hint(f"fusermount: failed to open {dev}: Permission denied", str(dev))
    assert hint.startswith(f" ({dev} is mode 0600, owner uid {os.getuid()}: "), hint
    assert fuse_hint("fusermount: mount failed: Operation not permitted", str(dev)) == ""


def test_sigterm_is_graceful(tmp_path):
    home = tempfile.mkdtemp(prefix="home.", dir="/tmp")
    env = dict(os.environ, HOME=home, NAMESPACE=os.path.join(home, "ns"),
               XDG_STATE_HOME=os.path.join(home, "state"))
    p = subprocess.Popen(TOOLSRV + ["serve"], env=env, cwd=OUTSIDE, stderr=subprocess.PIPE,
                         text=True)
    try:
        banner = ""
        for line in p.stderr:                 # to the banner's last line
            banner += line
            if "agent/me/log" in line:
                break
        assert "toolsrv: state in " in banner, banner
        state = banner.split("toolsrv: state in ", 1)[1].split(" (kept", 1)[0]
        assert run(env, "mkdir", "session/t").returncode == 0
        p.send_signal(signal.SIGTERM)
        assert p.wait(20) == 0
        assert not os.path.exists(os.path.join(home, "ns", "toolsrv"))   # socket removed
        # NAMESPACE names another address than plan9port's default: a state of its own
        assert os.path.dirname(state) == os.path.join(home, "state", "toolsrv")
        with open(os.path.join(state, "state.json")) as f:
            assert '"t"' in f.read()                                       # state saved
    finally:
        if p.poll() is None:
            p.kill()
        shutil.rmtree(home, ignore_errors=True)


def test_sigterm_while_starting_is_graceful_too():
    """The handlers are in place before the server listens: a SIGTERM that comes once the
    socket is there but before the event loop's run (the launcher still starting; a
    supervisor stopping a server it just started) still removes the socket and exits 0.
    It used to kill the process by the default action and leave the socket behind."""
    home = tempfile.mkdtemp(prefix="home.", dir="/tmp")
    env = dict(os.environ, HOME=home, NAMESPACE=os.path.join(home, "ns"))
    sock = os.path.join(home, "ns", "toolsrv")
    p = subprocess.Popen(TOOLSRV + ["serve", "--no-state"], env=env, cwd=OUTSIDE,
                         stderr=subprocess.DEVNULL)
    try:
        end = time.monotonic() + 20
        while not os.path.exists(sock) and time.monotonic() < end:
            time.sleep(0.001)
        p.send_signal(signal.SIGTERM)         # listening, the launcher not yet up
        assert p.wait(20) == 0
        assert not os.path.exists(sock)
    finally:
        if p.poll() is None:
            p.kill()
        shutil.rmtree(home, ignore_errors=True)


@pytest.mark.parametrize("argv", [
    ["serve", "-a", "unix!/x", "--tools", "/t", "--max-conns", "5", "-D", "--allow-uid", "7"],
    ["serve", "--help"], ["serve", "--bogus"], ["serve", "--msize", "x"], ["serve", "extra"],
    ["ls", "-l", "x"], ["ls"], ["rdwr", "p", "d"], ["call", "a", "b"], ["sandbox", "nope"],
    ["mount", "--help"], ["umount"], ["--help"], [], ["bogus"]], ids=" ".join)
def test_one_verb_parser_parses_as_the_full_one(argv, capsys):
    """main() builds only the verb's subcommand (start-up time); the result, the help
    and every error must read exactly as the full parser's."""
    from toolsrv.cli.command import build_parser, parse

    def outcome(fn):
        try:
            got = vars(fn(argv))
        except SystemExit as e:
            got = f"exit {e.code}"
        return got, capsys.readouterr()

    assert outcome(parse) == outcome(lambda a: build_parser().parse_args(a))


def _python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                          text=True, timeout=60)


def test_serve_imports_asyncio_without_ssl_and_ssl_still_imports():
    """`serve` keeps OpenSSL out of its start-up: asyncio's module-level `ssl` is None (a
    TLS transport says so), and a later `import ssl` gets the real module."""
    r = _python(
        "import sys\n"
        "from toolsrv.cli.command import import_asyncio_without_ssl as f\n"
        "f()\n"
        "assert 'ssl' not in sys.modules, sys.modules.get('ssl', 'absent')\n"
        "import asyncio, asyncio.base_events as b, asyncio.sslproto as p\n"
        "assert b.ssl is None and p.ssl is None\n"
        "took = [n for n, m in list(sys.modules.items()) if getattr(m, 'ssl', 0) is None]\n"
        "assert all(n.startswith('asyncio.') for n in took), took\n"
        "import ssl\n"
        "assert ssl.SSLContext and sys.modules['ssl'] is ssl\n"
        "import socket\n"
        "async def tls():\n"
        "    a, b = socket.socketpair()\n"
        "    await asyncio.open_unix_connection(sock=a, ssl=True, server_hostname='x')\n"
        "try:\n"
        "    asyncio.run(tls())\n"
        "except RuntimeError as e:\n"
        "    print(e)\n")
    assert r.returncode == 0, r.stderr
    assert "ssl module" in r.stdout


@pytest.mark.parametrize("first", ["ssl", "asyncio"])
def test_asyncio_keeps_ssl_when_imported_before(first):
    """Nothing changes in a process that imported ssl or asyncio already."""
    r = _python(
        f"import {first}\n"
        "from toolsrv.cli.command import import_asyncio_without_ssl as f\n"
        "f()\n"
        "import asyncio.base_events as b, ssl\n"
        "assert b.ssl is ssl\n")
    assert r.returncode == 0, r.stderr


def test_serve_on_uvloop():
    """uvloop (optional for users, in the test extra) imports ssl itself, after asyncio:
    serving on it still works."""
    import uvloop  # noqa: F401  (the test extra installs it: this test never skips)
    with serving(TOOLSRV_UVLOOP="1") as (env, _, p):
        r = run(env, "read", "revision")
        assert r.returncode == 0 and r.stdout.strip(), r.stderr
    assert p.returncode == 0


@pytest.mark.parametrize("words", [
    [], ["-a", "unix!/x", "--tools", "/t", "--state", "/s", "--max-runs", "64"],
    ["-a", "unix!/x", "-a", "tcp!127.0.0.1!5640", "--allow-uid", "7", "--allow-uid", "8"],
    ["--addr=unix!/x", "--tools=/a=b", "--timeout", "2.5", "--frame-timeout=1"],
    ["--no-state", "-D", "-v", "--listen-any", "--uvloop", "-D"],
    ["--auth-secret", "f", "--mount", "m", "--run-as", "", "--tools="],
    ["--max-held", "12", "--max-args", "0x10"], ["--msize", "-5"], ["--msize", "x"],
    ["--tool", "/t"], ["-h"], ["--help"], ["-Dv"], ["-aunix!/x"], ["-a=unix!/x"], ["-a"],
    ["--tools"], ["--tools", "--state", "/s"], ["--no-state=1"], ["extra"], ["--", "-a"],
    ["--tools", "-"], ["--timeout", "-1"], ["--max-runs", " 3 "], ["--max-runs", "3.0"]],
    ids=lambda w: " ".join(w) or "(none)")
def test_serve_parsed_without_argparse_as_argparse_parses_it(words, capsys):
    """parse_serve, the argparse-free parse of `serve` (start-up time), either gives what
    argparse gives or leaves the words to argparse."""
    from toolsrv.cli.command import build_parser, parse_serve
    fast = parse_serve(words)
    try:
        full = vars(build_parser().parse_args(["serve", *words]))
    except SystemExit as e:
        full = f"exit {e.code}"
    capsys.readouterr()
    assert fast is None or vars(fast) == full


def test_serve_options_are_all_parsed_without_argparse():
    """Every option of `serve`, given in full with a plain value, takes the fast path."""
    from toolsrv.cli.command import SERVE_OPTIONS, parse_serve, size
    words: list[str] = []
    for flags, kw in SERVE_OPTIONS:
        words.append(flags[-1])
        if kw.get("action") != "store_true":
            words.append("7" if kw.get("type") in (int, float, size) else "v")
    assert parse_serve(words) is not None
