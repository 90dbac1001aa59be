"""The warm boot needs nothing importable (issue 26): BOOT makes its modules from the memfd
bundle alone, relative imports included, in an interpreter that cannot import toolsrv
(here one whose sys.path[0] holds a decoy `toolsrv` package that fails when imported, as
another project's would); and a boot that fails says so in one line on its socket, with
nothing on stderr (no traceback reaches the server's log or an MCP client)."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

from toolsrv.run.init import warm as warminit

PY = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable


def memfd(bundle: list) -> int:
    fd = os.memfd_create("bundle", 0)
    os.write(fd, json.dumps(bundle).encode())
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def decoy(tmp: Path) -> Path:
    """A directory whose toolsrv package raises on import: any search of sys.path fails."""
    (tmp / "toolsrv").mkdir()
    (tmp / "toolsrv" / "__init__.py").write_text("raise ImportError('decoy toolsrv imported')\n")
    return tmp


def boot(program: str, bundle: list, cwd: Path) -> tuple[subprocess.CompletedProcess, bytes]:
    """Run program (argv as BOOT gets it: socket fd, memfd, WARMED) from cwd, with no
    PYTHONPATH; (the process, what it sent on its socket)."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    fd = memfd(bundle)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    try:
        p = subprocess.run([PY, "-c", program, str(theirs.fileno()), str(fd),
                            ",".join(warminit.WARMED)], cwd=cwd, env=env, timeout=120,
                           pass_fds=(theirs.fileno(), fd), capture_output=True, text=True)
    finally:
        theirs.close()
        os.close(fd)
    ours.settimeout(5)
    try:
        said = ours.recv(65536)
    except (TimeoutError, OSError):
        said = b""
    ours.close()
    return p, said


def test_the_bundle_loads_with_nothing_importable(tmp_path: Path) -> None:
    probe = warminit.LOAD + (
        "import sys\n"
        "mods = [n for n in sys.modules if n.startswith('toolsrv')]\n"
        "print(sorted(mods))\n"
        "print(callable(sys.modules['toolsrv.run.init.warm'].serve))\n"
        "print(sys.modules['toolsrv.run.kernel.rules'].landlock is sys.modules['toolsrv.run.kernel.landlock'])\n")
    bundle = json.loads(warminit.bundle())
    p, _ = boot(probe, bundle, decoy(tmp_path))
    assert p.returncode == 0 and p.stderr == "", p.stderr
    names, serve, same = p.stdout.splitlines()
    assert eval(names) == sorted(["toolsrv", "toolsrv.run", "toolsrv.run.init", "toolsrv.run.kernel",
                                  *warminit.SOURCES])
    assert serve == "True" and same == "True"


def test_relative_imports_resolve_within_the_bundle(tmp_path: Path) -> None:
    bundle = [["toolsrv.run.a", "/nonexistent/a.py", "X = 41\n"],
              ["toolsrv.run.b", "/nonexistent/b.py",
               "from . import a\nfrom .a import X\nfrom toolsrv.run import a as a2\n"
               "Y = X + 1 if a is a2 else None\n"]]
    probe = warminit.LOAD + "import sys\nprint(sys.modules['toolsrv.run.b'].Y)\n"
    p, _ = boot(probe, bundle, decoy(tmp_path))
    assert p.returncode == 0 and p.stderr == "", p.stderr
    assert p.stdout.strip() == "42"


def test_a_failed_boot_is_one_line_on_its_socket_and_nothing_on_stderr(tmp_path: Path) -> None:
    bundle = [["toolsrv.run.kernel.landlock", "/nonexistent/landlock.py",
               "import toolsrv_no_such_module\n"]]
    p, said = boot(warminit.BOOT, bundle, decoy(tmp_path))
    assert p.returncode == 1
    assert p.stderr == "" and p.stdout == ""
    assert said.startswith(b"F"), said
    why = json.loads(said[1:])
    assert why == "warm boot: ModuleNotFoundError: No module named 'toolsrv_no_such_module'"
