"""The project's own Landlock binding (toolsrv/landlock.py), exercised in child processes:
ABI masks, file-only rights on file rules, missing paths, TCP ports, and the path cache
following a file that is replaced under it."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from toolsrv import landlock

REPO = Path(__file__).resolve().parents[1]
ABI, WHY = landlock.abi_version()
pytestmark = pytest.mark.skipif(ABI < 1, reason=f"kernel has no usable Landlock ({WHY})")


def confined(script: str, rules: list[tuple[str, str]], **kw: object) -> dict:
    """Build a ruleset from (path, ro|rox|rw|rwx) rules in a fresh interpreter, restrict it,
    run script there (it sets `out`), and return out."""
    code = textwrap.dedent(f"""
        import json, os, socket, sys
        sys.path.insert(0, {str(REPO)!r})
        from toolsrv import landlock
        abi = landlock.abi_version()[0]
        cache = landlock.PathCache(limit={kw.pop("limit", 128)!r})
        rules = [(p, landlock.ACCESS[a]) for p, a in {rules!r}]
        for _ in range(2):  # the second build comes from the cache
            fd, skipped = landlock.build_ruleset(abi, rules, cache=cache, cached=len(rules),
                                                 **{kw!r})
        landlock.restrict_self(fd)
        out = {{"skipped": skipped}}
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


def test_file_rules_keep_only_file_rights_and_missing_paths_skip(tmp_path: Path) -> None:
    f = tmp_path / "f.txt"
    f.write_text("v1")
    out = confined(can(f"open({str(f)!r}, 'a').write('x')") + "out['append'] = ok\n"
                   + can(f"open({str(tmp_path / 'new')!r}, 'w')") + "out['create'] = ok\n"
                   + can("open('/etc/hostname').read()") + "out['other'] = ok\n",
                   [(str(f), "rw"), (str(tmp_path / "missing"), "ro"), ("/usr", "rox"),
                    (sys.prefix, "rox")], handle_net=False, bind_tcp=[], connect_tcp=[],
                   scoped=0)
    assert out["skipped"] == [str(tmp_path / "missing")]
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
        from toolsrv import landlock
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
    assert out["read"] == "ok"


def test_abi_version_gives_a_number_or_a_reason() -> None:
    abi, why = landlock.abi_version()
    assert (abi > 0 and why is None) or (abi == 0 and why)
