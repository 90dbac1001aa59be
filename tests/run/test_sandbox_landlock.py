"""The project's own Landlock binding (toolsrv/run/kernel/landlock.py), exercised in child processes:
ABI masks, file-only rights on file rules, missing paths, TCP ports, and the path cache
following a file that is replaced under it."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from toolsrv.run.kernel import landlock

REPO = Path(__file__).resolve().parents[2]
ABI, WHY = landlock.abi_version()
pytestmark = pytest.mark.skipif(ABI < 1, reason=f"kernel has no usable Landlock ({WHY})")


def confined(script: str, rules: list[tuple[str, str]], **kw: object) -> dict:
    """Build a ruleset from (path, ro|rox|rw|rwx) rules in a fresh interpreter, restrict it,
    run script there (it sets `out`), and return out."""
    code = textwrap.dedent(f"""
        import json, os, socket, sys
        sys.path.insert(0, {str(REPO)!r})
        from toolsrv.run.kernel import landlock
        abi = landlock.abi_version()[0]
        cache = landlock.PathCache(limit={kw.pop("limit", 128)!r})
        rules = [(p, landlock.ACCESS[a]) for p, a in {rules!r}]
        cached = {kw.pop("cached", None)!r}
        for _ in range(2):  # the second build comes from the cache's ready list
            fd, skipped = landlock.build_ruleset(
                abi, rules, cache=cache, cached=len(rules) if cached is None else cached,
                **{kw!r})
        landlock.restrict_self(fd)
        out = {{"skipped": skipped, "fast": cache.fast_builds}}
    """) + textwrap.dedent(script) + "\nprint(json.dumps(out))\n"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def can(op: str) -> str:
    return f"""
try:
    {op}
    ok = True
except OSError as e:
    ok = e.strerror
"""


def test_masks_follow_the_abi() -> None:
    assert landlock.abi_masks(0) == (0, 0, 0)
    fs1, net1, sc1 = landlock.abi_masks(1)
    assert fs1 == (1 << 13) - 1 and net1 == 0 and sc1 == 0
    assert landlock.abi_masks(3)[0] & landlock.TRUNCATE
    assert landlock.abi_masks(4)[1] == landlock.BIND_TCP | landlock.CONNECT_TCP
    assert landlock.abi_masks(6)[2] == landlock.SCOPE_ABSTRACT_UNIX | landlock.SCOPE_SIGNAL
    assert landlock.abi_masks(7) == landlock.abi_masks(6)


@pytest.mark.parametrize("cached", [True, False], ids=["cached", "per-call"])
def test_file_rules_keep_only_file_rights_and_missing_paths_skip(tmp_path: Path,
                                                                 cached: bool) -> None:
    f = tmp_path / "f.txt"
    f.write_text("v1")
    out = confined(can(f"open({str(f)!r}, 'a').write('x')") + "out['append'] = ok\n"
                   + can(f"open({str(tmp_path / 'new')!r}, 'w')") + "out['create'] = ok\n"
                   + can("open('/etc/hostname').read()") + "out['other'] = ok\n",
                   [(str(f), "rw"), (str(tmp_path / "missing"), "ro"), ("/usr", "rox"),
                    (sys.prefix, "rox")], handle_net=False, bind_tcp=[], connect_tcp=[],
                   scoped=0, cached=None if cached else 0)
    assert out["skipped"] == [str(tmp_path / "missing")]
    assert out["fast"] == (1 if cached else 0)
    assert out["append"] is True and out["create"] == "Permission denied"
    assert out["other"] == "Permission denied"


@pytest.mark.skipif(ABI < 4, reason="TCP rules need Landlock ABI 4")
def test_tcp_ports() -> None:
    out = confined(can("socket.socket().bind(('127.0.0.1', 0))") + "out['any'] = ok\n"
                   + can("socket.socket().bind(('127.0.0.1', 47011))") + "out['listed'] = ok\n",
                   [("/usr", "rox"), (sys.prefix, "rox")], handle_net=True, bind_tcp=[47011],
                   connect_tcp=[], scoped=0)
    assert out["any"] == "Permission denied" and out["listed"] in (True, "Address already in use")


def test_cache_follows_a_replaced_file(tmp_path: Path) -> None:
    f = tmp_path / "conf"
    f.write_text("v1")
    # one cache, two builds in two threads; the file is renamed over between them
    code = textwrap.dedent(f"""
        import json, os, sys, threading
        sys.path.insert(0, {str(REPO)!r})
        from toolsrv.run.kernel import landlock
        abi = landlock.abi_version()[0]
        cache = landlock.PathCache()
        rules = [({str(f)!r}, landlock.ACCESS["ro"]), ("/usr", landlock.ACCESS["rox"]),
                 (sys.prefix, landlock.ACCESS["rox"])]
        def confined_read(out):
            fd, _ = landlock.build_ruleset(abi, rules, handle_net=False, bind_tcp=[],
                                           connect_tcp=[], scoped=0, cache=cache, cached=3)
            landlock.restrict_self(fd)  # this thread only
            try:
                out.append(open({str(f)!r}).read())
            except OSError as e:
                out.append(e.strerror)
        seen = []
        for step in range(2):
            t = threading.Thread(target=confined_read, args=(seen,))
            t.start(); t.join()
            tmp = {str(tmp_path / "conf.new")!r}
            with open(tmp, "w") as w:
                w.write("v2")
            os.rename(tmp, {str(f)!r})
        print(json.dumps(seen))
    """)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout) == ["v1", "v2"]


def test_full_cache_still_builds(tmp_path: Path) -> None:
    f = tmp_path / "f"
    f.write_text("ok")
    out = confined(f"out['read'] = open({str(f)!r}).read()\n",
                   [(str(f), "ro"), ("/usr", "rox"), (sys.prefix, "rox")], limit=0,
                   handle_net=False, bind_tcp=[], connect_tcp=[], scoped=0)
    assert out["read"] == "ok" and out["fast"] == 0  # nothing kept, so no ready list


# A child process with one PathCache: build(name) builds a ruleset of RULES from it and reads
# every file of READS in a thread confined by it; out[name] = (fast build?, what was read).
CACHE_PRELUDE = """
import ctypes, json, os, select, sys, threading
sys.path.insert(0, REPO)
from toolsrv.run.kernel import landlock
abi = landlock.abi_version()[0]
cache = landlock.PathCache()
out = {}
mounts = {}
def mounts_changed():
    # whether the mount table changed since the last call (the kernel's own event, as
    # the ready list watches it: poll on /proc/self/mounts reports every mount since)
    if not mounts:
        mounts["f"] = open("/proc/self/mounts")
        mounts["p"] = select.poll()
        mounts["p"].register(mounts["f"], select.POLLPRI | select.POLLERR)
        return False
    return bool(mounts["p"].poll(0))
def private_mounts():
    # as root, a mount namespace of our own: other processes' mounts do not reach it
    libc = ctypes.CDLL(None, use_errno=True)
    if os.geteuid() == 0 and libc.unshare(0x00020000) == 0:  # CLONE_NEWNS
        libc.mount(b"none", b"/", None, 0x40000 | 0x4000, None)  # MS_PRIVATE|MS_REC
def build(name):
    moved = mounts_changed()
    before = cache.fast_builds
    rules = [(p, landlock.ACCESS[a]) for p, a in RULES] + [("/usr", landlock.ACCESS["rox"]),
             (sys.prefix, landlock.ACCESS["rox"])]
    fd, skipped = landlock.build_ruleset(abi, rules, handle_net=False, bind_tcp=[],
                                         connect_tcp=[], scoped=0, cache=cache,
                                         cached=len(rules))
    seen = []
    def confined():
        landlock.restrict_self(fd)  # this thread only
        for path in READS:
            try:
                with open(path) as f:
                    seen.append(f.read())
            except OSError as e:
                seen.append(e.strerror)
    t = threading.Thread(target=confined)
    t.start(); t.join()
    os.close(fd)
    out[name] = [cache.fast_builds > before, seen]
    out[name + " mounts"] = moved
"""


def in_child(rules: list, reads: list, script: str) -> dict:
    code = f"REPO = {str(REPO)!r}\nRULES = {rules!r}\nREADS = {reads!r}\n" + CACHE_PRELUDE \
        + textwrap.dedent(script) + "\nprint(json.dumps(out))\n"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def test_ready_list_follows_replaced_created_and_retargeted_paths(tmp_path: Path) -> None:
    """A build of the same paths is served from the ready list only while nothing on the
    way to them changed: a file renamed over, a missing path created, a symlink retargeted,
    a file replaced in the directory a symlink leads to each make the next build check in
    full."""
    d = tmp_path / "etc"
    d.mkdir()
    (d / "conf").write_text("v1")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "data").write_text("in a")
    (tmp_path / "b" / "data").write_text("in b")
    os.symlink("a", tmp_path / "link")
    conf, late, via = str(d / "conf"), str(d / "late"), str(tmp_path / "link" / "data")
    out = in_child([(conf, "ro"), (late, "ro"), (via, "ro")], [conf, late, via], f"""
        private_mounts()
        build("first")
        build("again")
        tmp = {str(d / "conf.new")!r}
        with open(tmp, "w") as w:
            w.write("v2")
        os.rename(tmp, {conf!r})
        build("renamed")
        build("renamed again")
        with open({late!r}, "w") as w:
            w.write("late")
        build("created")
        os.symlink("b", {str(tmp_path / "link.new")!r})
        os.rename({str(tmp_path / "link.new")!r}, {str(tmp_path / "link")!r})
        build("retargeted")
        build("retargeted again")
        with open({str(tmp_path / "b" / "data.new")!r}, "w") as w:
            w.write("b2")
        os.rename({str(tmp_path / "b" / "data.new")!r}, {str(tmp_path / "b" / "data")!r})
        build("target replaced")
    """)
    denied = "Permission denied"

    def fast_unless_mounts_moved(name: str, seen: list) -> None:
        # The ready list's watch of the mount table fires on any mount in the namespace
        # (another server's, on a busy machine): the fast path is due only when the mount
        # table did not change since the build before (as root, in a namespace of its own).
        fast, got = out[name]
        assert got == seen
        assert fast or out[name + " mounts"], f"{name}: checked in full with nothing changed"
    assert out["first"] == [False, ["v1", "No such file or directory", "in a"]]
    fast_unless_mounts_moved("again", ["v1", "No such file or directory", "in a"])
    assert out["renamed"] == [False, ["v2", "No such file or directory", "in a"]]
    fast_unless_mounts_moved("renamed again", ["v2", "No such file or directory", "in a"])
    assert out["created"] == [False, ["v2", "late", "in a"]]
    assert out["retargeted"] == [False, ["v2", "late", "in b"]]
    fast_unless_mounts_moved("retargeted again", ["v2", "late", "in b"])
    assert out["target replaced"] == [False, ["v2", "late", "b2"]]  # seen beyond the link
    assert denied not in str(out)


@pytest.mark.skipif(os.geteuid() != 0, reason="bind mounts need root")
def test_ready_list_follows_a_mount(tmp_path: Path) -> None:
    """A bind mount over a cached file changes no directory entry: the mount table's
    change is what makes the next build check in full (in a mount namespace of its own)."""
    (tmp_path / "conf").write_text("original")
    (tmp_path / "other").write_text("mounted")
    conf = str(tmp_path / "conf")
    out = in_child([(conf, "ro")], [conf], f"""
        libc = ctypes.CDLL(None, use_errno=True)
        assert libc.unshare(0x00020000) == 0  # CLONE_NEWNS
        assert libc.mount(b"none", b"/", None, 0x40000 | 0x4000, None) == 0  # MS_PRIVATE|MS_REC
        build("first")
        build("again")
        assert libc.mount({str(tmp_path / "other")!r}.encode(), {conf!r}.encode(), None,
                          0x1000, None) == 0  # MS_BIND
        build("mounted")
        build("mounted again")
    """)
    assert out["first"] == [False, ["original"]] and out["again"] == [True, ["original"]]
    assert out["mounted"] == [False, ["mounted"]]
    assert out["mounted again"] == [True, ["mounted"]]


def test_no_ready_list_where_inotify_would_not_see_changes(tmp_path: Path) -> None:
    """/proc is not a filesystem whose changes inotify reports: paths through it are
    checked in full at every build."""
    out = in_child([("/proc/self/status", "ro")], [], """
        build("first")
        build("again")
    """)
    assert (out["first"], out["again"]) == ([False, []], [False, []])


def test_abi_version_gives_a_number_or_a_reason() -> None:
    abi, why = landlock.abi_version()
    assert (abi > 0 and why is None) or (abi == 0 and why)
