"""No user namespaces inside a run (issue 25, section 7), cold and warm: unshare and clone
with CLONE_NEWUSER answer EPERM, clone3 answers ENOSYS (its flags are in a struct the
filter cannot read), and fork, threads and subprocesses still work (the C library falls
back from clone3 to clone)."""
from __future__ import annotations

import json
import os
import shutil
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
from sandbox_support import LANDLOCK, NO_LANDLOCK, Harness, marker  # noqa: E402

pytestmark = pytest.mark.skipif(LANDLOCK.abi < 1, reason=NO_LANDLOCK)

NR = {"x86_64": {"clone": 56, "clone3": 435}, "aarch64": {"clone": 220, "clone3": 435}}
ATTEMPTS = r"""
import ctypes, json, os, subprocess, sys, threading
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
CLONE_NEWUSER, SIGCHLD = 0x10000000, 17
def err(rc):
    return "ok" if rc >= 0 else os.strerror(ctypes.get_errno())
out = {"unshare": err(libc.unshare(CLONE_NEWUSER))}
nr = json.loads(sys.argv[1])
pid = libc.syscall(nr["clone"], CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0)
if pid == 0:
    os._exit(0)
if pid > 0:
    os.waitpid(pid, 0)
out["clone"] = err(pid)
args = (ctypes.c_uint64 * 11)()
args[0] = CLONE_NEWUSER
args[4] = SIGCHLD
pid = libc.syscall(nr["clone3"], ctypes.byref(args), ctypes.sizeof(args))
if pid == 0:
    os._exit(0)
if pid > 0:
    os.waitpid(pid, 0)
out["clone3"] = err(pid)
pid = os.fork()
if pid == 0:
    os._exit(7)
out["fork"] = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
t = threading.Thread(target=lambda: out.setdefault("thread", "ran"))
t.start(); t.join()
out["subprocess"] = subprocess.run(["/bin/echo", "hi"], capture_output=True).stdout.decode()
u = "/usr/bin/unshare"
if os.path.exists(u):
    r = subprocess.run([u, "-U", "/bin/true"], capture_output=True, text=True)
    out["unshare -U"] = r.returncode
print(json.dumps(out))
"""


@pytest.fixture(scope="module", params=["cold", "warm"])
def h(request: pytest.FixtureRequest) -> Iterator[Harness]:
    harness = Harness(warm=request.param == "warm")
    yield harness
    harness.close()


@pytest.mark.skipif(os.uname().machine not in NR, reason="raw clone numbers for this arch")
def test_a_run_cannot_make_a_user_namespace(h: Harness) -> None:
    script = h.tools / f"userns-{marker()}.py"
    script.write_text("#!/usr/bin/python3\n" + textwrap.dedent(ATTEMPTS))
    script.chmod(0o755)
    res = h.run([str(script), json.dumps(NR[os.uname().machine])])
    assert res.exit_code == 0 and res.warm == h.warm, res
    out = json.loads(res.stdout)
    assert out["unshare"] == out["clone"] == "Operation not permitted", out
    assert out["clone3"] == "Function not implemented", out
    assert out["fork"] == 7 and out["thread"] == "ran" and out["subprocess"] == "hi\n", out
    if shutil.which("unshare"):
        assert out["unshare -U"] != 0, out
