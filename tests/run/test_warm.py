"""Warm starts (issue 16): a Python tool forked from a warm interpreter sees what a cold
start shows it.  Each contract item is checked by running the same probe warm and cold and
comparing what it reports; then the fallbacks, a warm interpreter killed between and during
calls, a grandchild that outlives its tool, and calls of two profiles interleaved, each
getting exactly its own ruleset.  (The sandbox and escape suites run warm as well: their
harness fixtures are parametrized cold/warm.)"""
from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
from sandbox_support import (LANDLOCK, NO_LANDLOCK, Harness, children,  # noqa: E402
                             marker, profile_with, sleepers)

from toolsrv.registry import warmstart  # noqa: E402

pytestmark = pytest.mark.skipif(LANDLOCK.abi < 1, reason=NO_LANDLOCK)

# What a tool can see of how it was started; printed as one JSON object.
PROBE = r'''
import json, os, resource, signal, socket, sys
def isopen(fd):
    try:
        os.fstat(fd)
        return True
    except OSError:
        return False
def stdio(s):
    b = s.buffer
    return [s.encoding, s.errors, s.line_buffering, s.write_through, s.mode, s.name,
            type(b).__name__, getattr(getattr(b, "raw", b), "name", None), s.isatty()]
print(json.dumps({
    "name": __name__, "file": __file__, "argv": sys.argv, "orig_argv": sys.orig_argv,
    "path0": sys.path[0], "path": sys.path, "executable": sys.executable,
    "prefix": sys.prefix, "flags": list(sys.flags),
    "main": sorted(k for k in globals() if k.startswith("__")),
    "main_is_module": sys.modules["__main__"].__dict__ is globals(),
    "env": {k: v for k, v in os.environ.items() if k not in ("TMPDIR", "HOME")},
    "home_is_tmp": os.environ["HOME"] == os.environ["TMPDIR"],
    "cwd": os.getcwd(), "umask": os.umask(0o22), "uid": os.getuid(), "gid": os.getgid(),
    "groups": os.getgroups(), "ppid": os.getppid(), "sid": os.getsid(0) == os.getpid(),
    "fds": [fd for fd in range(256) if isopen(fd)],
    "stdio": [stdio(s) for s in (sys.stdin, sys.stdout, sys.stderr)],
    "dunder_stdio": [s is getattr(sys, "__%s__" % n)
                     for s, n in ((sys.stdin, "stdin"), (sys.stdout, "stdout"))],
    "signals": {s.name: str(signal.getsignal(s)) for s in signal.Signals
                if s not in (signal.SIGKILL, signal.SIGSTOP)},
    "mask": sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])),
    "rlimits": {n: resource.getrlimit(getattr(resource, n))
                for n in sorted(dir(resource)) if n.startswith("RLIMIT_")},
    "interfaces": [n for _, n in socket.if_nameindex()],
    "stdin": sys.stdin.read(),
    "toolsrv_loaded": sorted(m for m in sys.modules if m.split(".")[0] in ("toolsrv", "proto")),
}))
'''


@pytest.fixture(scope="module")
def hc() -> Iterator[Harness]:
    harness = Harness()
    yield harness
    harness.close()


@pytest.fixture(scope="module")
def hw() -> Iterator[Harness]:
    harness = Harness(warm=True)
    yield harness
    harness.close()


def script(h: Harness, body: str, shebang: str = "#!/usr/bin/python3",
           name: str | None = None) -> Path:
    path = h.tools / (name or f"t{marker()}.py")
    path.write_text(shebang + "\n" + textwrap.dedent(body))
    path.chmod(0o755)
    return path


def both(hc: Harness, hw: Harness, body: str, stdin: bytes = b"{}", **kw: object):
    """The same script run cold (hc) and warm (hw); the warm one must have run warm."""
    name = f"t{marker()}.py"
    cold = hc.run([str(script(hc, body, name=name))], stdin, **kw)
    warm = hw.run([str(script(hw, body, name=name))], stdin, **kw)
    assert warm.warm and not cold.warm, (cold, warm)
    return cold, warm


def test_the_probe_sees_the_same_start_warm_and_cold(hc: Harness, hw: Harness) -> None:
    cold, warm = both(hc, hw, PROBE, b'{"x": 1}')
    assert cold.exit_code == warm.exit_code == 0, (cold, warm)
    c, w = json.loads(cold.stdout), json.loads(warm.stdout)
    for d in (c, w):  # the two harnesses differ in their own paths only
        for k in ("file", "path0", "cwd"):
            d[k] = d[k].replace(str(hc.base), "BASE").replace(str(hw.base), "BASE")
        d["argv"] = [a.replace(str(hc.base), "BASE").replace(str(hw.base), "BASE")
                     for a in d["argv"]]
        d["orig_argv"] = [a.replace(str(hc.base), "BASE").replace(str(hw.base), "BASE")
                          for a in d["orig_argv"]]
        d["path"][0] = "PATH0"
        d["env"]["PWD"] = d["env"].get("PWD", "").replace(str(hc.base), "BASE").replace(
            str(hw.base), "BASE")
    assert w == c
    assert w["name"] == "__main__" and w["main_is_module"] and w["stdin"] == '{"x": 1}'
    assert w["fds"] == [0, 1, 2] and w["ppid"] == 1 and w["sid"] and w["home_is_tmp"]
    assert w["interfaces"] in ([], ["lo"]) and w["toolsrv_loaded"] == []


@pytest.mark.parametrize("body, code, sig", [
    ("import sys\nsys.exit(3)\n", 3, None),
    ("import os\nos._exit(4)\n", 4, None),
    ("import sys\nsys.exit('bye')\n", 1, None),
    ("raise ValueError('boom')\n", 1, None),
    ("def f(:\n", 1, None),
    ("import os, signal\nos.kill(os.getpid(), signal.SIGTERM)\n", None, signal.SIGTERM),
    ("raise KeyboardInterrupt\n", None, signal.SIGINT),
])
def test_the_exit_status_and_stderr_are_a_cold_starts(hc: Harness, hw: Harness, body: str,
                                                      code: int | None,
                                                      sig: int | None) -> None:
    cold, warm = both(hc, hw, body)
    assert (cold.exit_code, cold.signal) == (warm.exit_code, warm.signal) == (code, sig)
    strip = (lambda r, h: r.stderr.decode().replace(str(h.base), "BASE"))
    assert strip(warm, hw) == strip(cold, hc)


def test_atexit_and_finally_run_on_a_normal_exit(hc: Harness, hw: Harness) -> None:
    body = """
    import atexit, sys
    atexit.register(lambda: print("atexit"))
    try:
        print("body")
        sys.exit(0)
    finally:
        print("finally")
    """
    cold, warm = both(hc, hw, body)
    assert warm.stdout == cold.stdout == b"body\nfinally\natexit\n"


def test_a_sibling_module_imports(hw: Harness) -> None:
    m = marker().replace(".", "_")
    (hw.tools / f"helper_{m}.py").write_text("VALUE = 42\n")
    res = hw.run([str(script(hw, f"import helper_{m}\nprint(helper_{m}.VALUE)\n"))])
    assert res.warm and res.stdout == b"42\n", res


def test_no_state_crosses_calls(hw: Harness) -> None:
    body = """
    import json, sys
    print(hasattr(json, "seen"), "seen_mod" in sys.modules)
    json.seen = 1
    sys.modules["seen_mod"] = sys
    """
    path = script(hw, body)
    for _ in range(3):
        res = hw.run([str(path)])
        assert res.warm and res.stdout == b"False False\n", res


def test_a_grandchild_is_killed_with_the_run(hw: Harness) -> None:
    m = marker()
    body = f"""
    import os
    if os.fork() == 0:
        os.setsid()
        os.execv("/bin/sleep", ["sleep", "{m}"])
    print("parent done")
    """
    res = hw.run([str(script(hw, body))])
    assert res.warm and res.stdout == b"parent done\n", res
    assert sleepers(m) == []


async def until_sleeping(m: str, limit: float = 60.0) -> None:
    """Wait (on the event, with a generous deadline) until the run's `sleep m` is running."""
    loop = asyncio.get_running_loop()
    end = loop.time() + limit
    while not sleepers(m):
        assert loop.time() < end, f"sleep {m} never started"
        await asyncio.sleep(0.02)


def test_timeout_cap_and_cancel_end_a_warm_run(hw: Harness) -> None:
    m = marker()
    res = hw.run([str(script(hw, f"import os\nos.execv('/bin/sleep', ['sleep', '{m}'])\n"))],
                 timeout=0.5)
    assert res.warm and res.timed_out and sleepers(m) == [], res
    res = hw.run([str(script(hw, "import sys\nwhile True: sys.stdout.write('x' * 65536)\n"))])
    assert res.warm and res.truncated == "stdout", res

    async def cancelled() -> object:
        kill = asyncio.Event()
        task = asyncio.ensure_future(hw.runner.run(hw.request(
            [str(script(hw, f"import os\nos.execv('/bin/sleep', ['sleep', '{m}'])\n"))],
            kill=kill)))
        await until_sleeping(m)  # the run is in its sleep: now the cancel
        kill.set()
        return await task
    res = hw.run_async(cancelled())
    assert res.warm and res.cancelled and sleepers(m) == [], res


def test_fallbacks_start_cold_and_say_why(hw: Harness) -> None:
    flagged = script(hw, "print('hi')\n", shebang="#!/usr/bin/python3 -u")
    res = hw.run([str(flagged)])
    assert not res.warm and res.stdout == b"hi\n", res
    assert warmstart.plan([str(flagged)], {}, "/")[1] == "interpreter flag -u is not warmed"
    assert hw.run(["/bin/sh", "-c", "echo sh"]).warm is False
    assert warmstart.plan(["/bin/sh", "-c", "echo sh"], {}, "/") == (None, None)
    assert warmstart.plan(["/bin/sh", "-c", "python3 -m json.tool"], {}, "/")[1] == \
        "interpreter flag -m is not warmed"
    off = hw.run([str(script(hw, "print('hi')\n"))], warm=None)  # "warm": false in the .meta
    assert not off.warm and off.stdout == b"hi\n"


def test_a_cmd_running_python3_script_starts_warm(hw: Harness) -> None:
    path = script(hw, "import sys\nprint(sys.argv)\n")
    res = hw.run(["/bin/sh", "-c", f"python3 {path} a b"])
    assert res.warm and res.stdout.decode().strip() == repr([str(path), "a", "b"]), res


def test_a_virtualenv_python_is_warmed_as_its_own(hc: Harness, hw: Harness) -> None:
    venvs = []
    for h in (hc, hw):
        v = h.tools / "venv"
        (v / "bin").mkdir(parents=True, exist_ok=True)
        if not (v / "bin" / "python3").exists():
            (v / "bin" / "python3").symlink_to("/usr/bin/python3")
        (v / "pyvenv.cfg").write_text("home = /usr/bin\ninclude-system-site-packages = false\n")
        venvs.append(v)
    body = "import sys\nprint(sys.executable, sys.prefix)\n"
    name = f"t{marker()}.py"
    cold = hc.run([str(script(hc, body, shebang=f"#!{venvs[0]}/bin/python3", name=name))])
    warm = hw.run([str(script(hw, body, shebang=f"#!{venvs[1]}/bin/python3", name=name))])
    assert warm.warm and cold.exit_code == warm.exit_code == 0, (cold, warm)
    assert warm.stdout.decode() == f"{venvs[1]}/bin/python3 {venvs[1]}\n"
    assert cold.stdout.decode() == f"{venvs[0]}/bin/python3 {venvs[0]}\n"


def test_an_interpreter_that_cannot_warm_up_falls_back(hw: Harness) -> None:
    fake = hw.tools / "bin" / "python3"
    fake.parent.mkdir(exist_ok=True)
    # runs a script given one (cold), but dies at once when started with -c (warm)
    fake.write_text('#!/bin/sh\n[ "$1" = -c ] && exit 9\nexec /usr/bin/python3 "$@"\n')
    fake.chmod(0o755)
    path = script(hw, "print('cold after all')\n", shebang=f"#!{fake}")
    res = hw.run([str(path)])
    assert not res.warm and res.stdout == b"cold after all\n", res
    assert any(kind.python == str(fake) for kind in hw.runner._warm_broken)  # not soon again


def _warm_init_pids(h: Harness) -> list[int]:
    return [pid for _, pid in h.runner.launcher.warm.pids()]


def test_a_warm_interpreter_killed_between_calls_is_replaced(hw: Harness) -> None:
    path = script(hw, "print('ok')\n")
    assert hw.run([str(path)]).warm
    pids = _warm_init_pids(hw)
    assert pids
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    for _ in range(200):  # gone (the launcher reaps its inits)
        if not any(os.path.exists(f"/proc/{pid}") for pid in pids):
            break
        hw.run_async(asyncio.sleep(0.02))
    for _ in range(3):
        res = hw.run([str(path)])
        assert res.stdout == b"ok\n" and res.exit_code == 0, res
    assert res.warm and not set(_warm_init_pids(hw)) & set(pids)


def test_the_next_calls_child_waits_forked_and_a_killed_one_is_replaced(hw: Harness
                                                                        ) -> None:
    """A warm init forks each call's child ahead, once the last call is over (its
    standby); a standby killed while it waits is replaced, and the call still runs warm,
    in the same init."""
    path = script(hw, "import os\nprint(os.getppid())\n")
    assert hw.run([str(path)]).warm
    [init] = _warm_init_pids(hw)
    standby: list[int] = []
    for _ in range(3000):  # the event: the standby forked (after the report), 60 s at most
        standby = children(init)
        if standby:
            break
        hw.run_async(asyncio.sleep(0.02))
    assert len(standby) == 1, standby
    os.kill(standby[0], signal.SIGKILL)
    for _ in range(3000):  # the event: it has died (a zombie its init has not reaped)
        try:
            with open(f"/proc/{standby[0]}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    break
        except OSError:
            break
        hw.run_async(asyncio.sleep(0.02))
    for _ in range(3):
        res = hw.run([str(path)])
        assert res.warm and res.exit_code == 0 and res.stdout == b"1\n", res
    assert _warm_init_pids(hw) == [init]


def test_a_warm_interpreter_killed_during_a_call(hw: Harness) -> None:
    m = marker()
    path = script(hw, f"import os\nos.execv('/bin/sleep', ['sleep', '{m}'])\n")

    async def kill_midway() -> object:
        task = asyncio.ensure_future(hw.runner.run(hw.request([str(path)])))
        await until_sleeping(m)
        handle = next(iter(hw.runner.launcher._handles.values()))
        pid = handle._init.pid()
        os.kill(pid, signal.SIGKILL)
        return await task
    res = hw.run_async(kill_midway())
    assert res.exit_code != 0 and res.error and "warm interpreter" in res.error, res
    assert sleepers(m) == []
    assert hw.run([str(script(hw, "print('next')\n"))]).stdout == b"next\n"


def test_two_profiles_interleaved_each_get_their_own_ruleset(hw: Harness) -> None:
    extra = hw.mkdir("only-b")
    (extra / "f.txt").write_text("b\n")
    (extra / "f.txt").chmod(0o644)
    b = profile_with("b", ro=[str(extra)])
    path = script(hw, f"""
    try:
        print(open("{extra}/f.txt").read().strip())
    except PermissionError:
        print("denied")
    """)

    async def calls() -> list[tuple[str, object]]:
        reqs = [("a", hw.request([str(path)])) if i % 3 else ("b", hw.request([str(path)],
                                                                         profile=b))
                for i in range(200)]
        sem = asyncio.Semaphore(8)

        async def one(which: str, req: object) -> tuple[str, object]:
            async with sem:
                return which, await hw.runner.run(req)  # type: ignore[arg-type]
        return await asyncio.gather(*(one(w, r) for w, r in reqs))
    results = hw.run_async(calls())
    warm = 0
    for which, res in results:
        assert res.stdout == (b"b\n" if which == "b" else b"denied\n"), (which, res)
        warm += res.warm
    assert warm >= 150  # the first of a burst may find no idle init and start cold


def test_many_warm_calls_leave_no_growth(hw: Harness) -> None:
    _no_growth(hw, 300)


@pytest.mark.slow
def test_ten_thousand_warm_calls_leave_no_growth(hw: Harness) -> None:
    _no_growth(hw, 10_000)


def _descendants(pid: int) -> set[int]:
    """Every process below pid (the launcher, its inits, their runs)."""
    out, todo = set(), [pid]
    while todo:
        p = todo.pop()
        try:
            tids = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for t in tids:
            try:
                with open(f"/proc/{p}/task/{t}/children") as f:
                    kids = [int(k) for k in f.read().split()]
            except OSError:
                continue
            for k in kids:
                if k not in out:
                    out.add(k)
                    todo.append(k)
    return out


def _no_growth(h: Harness, n: int) -> None:
    path = script(h, "import json, sys\nprint(json.dumps(json.load(sys.stdin)))\n")

    def counts() -> tuple[int, int, int]:
        fds = len(os.listdir("/proc/self/fd"))
        with open("/proc/self/status") as f:
            rss = next(int(x.split()[1]) for x in f if x.startswith("VmRSS:"))
        return fds, rss, len(_descendants(os.getpid()))

    async def run(k: int) -> None:
        for _ in range(k):
            res = await h.runner.run(h.request([str(path)], b'{"a": 1}'))
            assert res.stdout == b'{"a": 1}\n', res
    h.run_async(run(50))
    h.settle()
    before = counts()
    h.run_async(run(n))
    h.settle()
    after = counts()
    assert after[0] <= before[0]
    assert after[2] <= before[2] + 2
    assert after[1] - before[1] < 8 * 1024, (before, after)  # KiB: no per-call growth


def test_the_end_flushes_what_a_cold_end_flushes(hc: Harness, hw: Harness) -> None:
    """A file left open, a non-daemon thread, a buffered stdout without newline: a warm
    call ends without tearing down the warmed modules, and loses none of them."""
    body = """
    import os, sys, threading, time
    f = open(os.path.join(os.environ["TMPDIR"], "x"), "w")
    f.write("kept")
    def late():
        time.sleep(0.2)
        sys.stdout.write(open(f.name).read() if f.closed else "thread ")
    threading.Thread(target=late).start()
    class Bye:
        def __del__(self):
            sys.stdout.write("del ")
    b = Bye()
    sys.stdout.write("no newline ")
    """
    cold, warm = both(hc, hw, body)
    assert warm.stdout == cold.stdout == b"no newline thread del ", (cold, warm)


@pytest.mark.parametrize("body, out", [
    # a pool's worker finishes its job at exit (threading._register_atexit), as cold
    ("import concurrent.futures as cf, sys, time\n"
     "cf.ThreadPoolExecutor(1).submit(lambda: (time.sleep(0.2), sys.stdout.write('job ')))\n"
     "sys.stdout.write('main ')\n", b"main job "),
    # no thread at all: the exit skips threading's shutdown, and loses nothing
    ("import sys, threading\nsys.stdout.write(threading.current_thread().name)\n",
     b"MainThread"),
    # a thread that ended before the exit
    ("import sys, threading\nt = threading.Thread(target=lambda: sys.stdout.write('t '))\n"
     "t.start(); t.join()\nsys.stdout.write('end')\n", b"t end"),
])
def test_threads_and_pools_end_as_in_a_cold_start(hc: Harness, hw: Harness, body: str,
                                                  out: bytes) -> None:
    cold, warm = both(hc, hw, body)
    assert warm.stdout == cold.stdout == out, (cold, warm)


def test_a_module_the_script_imported_is_let_go_at_its_end(hc: Harness, hw: Harness
                                                          ) -> None:
    """The modules a call imported leave sys.modules at its end, so what only they hold
    is finalized as a cold start's end finalizes it; a call that imported none skips
    the look."""
    for h in (hc, hw):
        (h.tools / "held_by_module.py").write_text(
            "import sys\nclass Bye:\n    def __del__(self):\n"
            "        sys.stdout.write('module del')\nkept = Bye()\n")
    cold, warm = both(hc, hw, "import held_by_module\n")
    assert warm.stdout == cold.stdout == b"module del", (cold, warm)
    cold, warm = both(hc, hw, "import json\nprint(json.dumps(1))\n")
    assert warm.stdout == cold.stdout == b"1\n", (cold, warm)


def test_a_linked_script_finds_its_modules_where_it_really_is(hc: Harness,
                                                               hw: Harness) -> None:
    """sys.path[0] is the directory of the script's resolved path, as a cold start
    resolves it (the C library's realpath), and its sibling modules import from there."""
    out = {}
    for h in (hc, hw):
        real = h.tools / f"real{marker()}"
        real.mkdir()
        (real / "beside.py").write_text("WHERE = 'beside the real one'\n")
        target = real / "tool.py"
        target.write_text("#!/usr/bin/python3\nimport sys, beside\n"
                          "print(sys.path[0] == sys.argv[1], beside.WHERE)\n")
        target.chmod(0o755)
        link = h.tools / f"link{marker()}.py"
        link.symlink_to(target)
        res = h.run([str(link), str(real)])
        out[h is hw] = (res.warm, res.stdout)
    assert out == {False: (False, b"True beside the real one\n"),
                   True: (True, b"True beside the real one\n")}, out


def test_a_changed_script_runs_as_changed(hw: Harness) -> None:
    """The server compiles a tool's own script once per change (run/ownscript.py); the
    child uses that only for the very bytes it read itself."""
    path = script(hw, "print('one')\n")
    assert hw.run([str(path)]).stdout == b"one\n"
    path.write_text("#!/usr/bin/python3\nprint('two, longer')\n")
    res = hw.run([str(path)])
    assert res.warm and res.stdout == b"two, longer\n", res
    # a compilation of other bytes under the file's current stamp: not used
    stamp, _blob, _n = hw.runner._codes.codes[str(path)]
    other = b"#!/usr/bin/python3\nprint('stale')\n"
    import marshal
    code = marshal.dumps(compile(other, str(path), "exec", dont_inherit=True))
    hw.runner._codes.codes[str(path)] = (stamp, other + code, len(other))
    res = hw.run([str(path)])
    assert res.warm and res.stdout == b"two, longer\n", res


def test_only_a_tools_own_unchangeable_script_is_compiled_by_the_server(hw: Harness) -> None:
    """Issue 25: a script in the session's cwd, one in a directory a grant makes writable,
    or one the tools' uid could replace, is read and compiled by the child alone."""
    own = script(hw, "print('own')\n")
    for _ in range(2):           # (the first call of a kind tells its bytecode magic)
        assert hw.run([str(own)]).stdout == b"own\n"
    assert str(own) in hw.runner._codes.codes
    job = hw.cwd / f"job{marker()}.py"
    job.write_text("#!/usr/bin/python3\nprint('job')\n")
    job.chmod(0o755)
    res = hw.run(["/bin/sh", "-c", f"python3 {job.name}"])
    assert res.warm and res.stdout == b"job\n", res
    res = hw.run([str(job)], tool_dir=str(hw.cwd))       # a "tool" in the session's cwd
    assert res.warm and res.stdout == b"job\n", res
    assert str(job) not in hw.runner._codes.codes
    loose = hw.mkdir(f"loose{marker()}")
    loose.chmod(0o777)                                     # the tools' uid could replace it
    lp = loose / "t.py"
    lp.write_text("#!/usr/bin/python3\nprint('loose')\n")
    lp.chmod(0o755)
    res = hw.run([str(lp)], tool_dir=str(loose),
                 profile=profile_with("default", rox=[str(loose)]))
    assert res.warm and res.stdout == b"loose\n", res
    assert str(lp) not in hw.runner._codes.codes


def test_nothing_of_a_call_is_left_for_the_next(hw: Harness) -> None:
    """The warm parent never parses a call's request (its child does) and clears its copy:
    no object a later call can reach holds an earlier call's environment (a guard: the
    freed memory itself is not scanned)."""
    m = "secret-" + marker()
    first = script(hw, "import os\nprint(os.environ['MARK'])\n")
    assert hw.run([str(first)], env={"MARK": m}).stdout == f"{m}\n".encode()
    probe = script(hw, f"""
    import gc, sys
    found = [type(o).__name__ for o in gc.get_objects()
             if isinstance(o, (str, bytes, dict, list)) and "{m[:7]}" + "{m[7:]}" in repr(o)]
    print(found)
    """)
    res = hw.run([str(probe)])
    assert res.warm and res.stdout == b"[]\n", res


def test_status_shows_the_warm_interpreters_memory(hw: Harness) -> None:
    assert hw.run([str(script(hw, "print(1)\n"))]).warm
    text = hw.runner.status_text()
    assert "warm: on; " in text and " MiB RSS" in text, text
    line = next(ln for ln in text.splitlines() if ln.startswith("  /usr/bin/python3"))
    assert " idle, " in line and float(line.split(", ")[-1].split()[0]) > 1, text


def test_a_warm_interpreter_has_no_capabilities_and_the_tools_uid(hw: Harness) -> None:
    assert hw.run([str(script(hw, "print(1)\n"))]).warm
    pids = _warm_init_pids(hw)
    assert pids
    for pid in pids:
        with open(f"/proc/{pid}/status") as f:
            st = dict(line.rstrip("\n").split(":\t", 1) for line in f if ":\t" in line)
        for cap in ("CapInh", "CapPrm", "CapEff", "CapAmb"):
            assert int(st[cap], 16) == 0, (cap, st[cap])
        uid = hw.uid[0] if hw.uid else os.getuid()
        assert st["Uid"].split() == [str(uid)] * 4
        assert st["NSpid"].split()[-1] == "1"  # pid 1 of its own namespace


@pytest.mark.parametrize("serve_warm", [True, False])
def test_meta_and_the_log_say_how_a_tool_starts(serve_warm: bool) -> None:
    """Through a whole server: `"warm": false` in a .meta, and `serve --no-warm`, start a
    Python tool cold, and tools/<tool>/meta says why under "start"."""
    from apphelpers import AppThread, add_tool, tools_dir
    from toolsrv.cli.client import Client
    d = tools_dir()
    body = "#!/usr/bin/env python3\nimport sys\nprint(sys.stdin.read())\n"
    add_tool(d, "warmed", body)
    add_tool(d, "chilled", body, {"warm": False})
    app = AppThread([d], warm=serve_warm).start()
    try:
        with Client.connect(app.addr) as c:
            starts = {t: json.loads(c.read(f"tools/{t}/meta"))["start"]
                      for t in ("warmed", "chilled")}
            c.mkdir("session/m")
            c.mkdir("session/m/agent/a")
            c.rdwr("session/m/agent/a/ctl", b"tool_load warmed chilled")
            for t in ("warmed", "chilled"):
                assert c.rdwr(f"session/m/agent/a/tools/{t}/call", b"{}") == b"{}\n"
            status = c.read("status").decode()
    finally:
        app.cleanup()
        warmstart.OFF = None
    assert starts["chilled"] == {"warm": False, "why": '"warm": false in the .meta'}
    if serve_warm:
        assert starts["warmed"]["warm"] is True and "warm: on" in status
    else:
        assert starts["warmed"] == {"warm": False,
                                    "why": "warm starts are off (toolsrv serve --no-warm)"}
        assert "warm: off" in status and "0 made warm" in status


def test_without_pid_namespaces_python_tools_start_cold() -> None:
    """A warm init ends a run with kill(-1), which only a namespace's pid 1 may send."""
    from toolsrv.run.runner import RunnerConfig
    h = Harness(RunnerConfig(namespaces=False), warm=True)
    try:
        assert not h.runner.launcher.pidns
        res = h.run([str(script(h, "print('cold')\n"))])
        assert not res.warm and res.stdout == b"cold\n", res
    finally:
        h.close()
