"""npm packages the interop tests run (the MCP Inspector, the TypeScript SDK, a language
server), installed once into a cache directory: ~/.cache/toolsrv-tests, or
$TOOLSRV_TEST_CACHE.  Without node and npm, or when npm cannot install (offline), the test
is skipped, saying so.  An install that failed because npm could not reach its registry
(offline, a proxy's certificate npm does not trust) is remembered for the rest of the run:
the other installs skip at once with that reason instead of each waiting out npm's
retries (about 70 s apiece)."""
from __future__ import annotations

import os
import shutil
import subprocess

import pytest


UNREACHABLE = ("ENOTFOUND", "EAI_AGAIN", "ECONNREFUSED", "ECONNRESET", "ETIMEDOUT",
               "ENETUNREACH", "CERT", "network", "proxy")
_registry_down: list[str] = []     # why npm could not reach its registry, once it could not


def need_node(test: str) -> None:
    """Skip unless node and npm are on PATH; `test` says what needs them ("the ... test
    needs node 18+")."""
    if not shutil.which("node") or not shutil.which("npm"):
        pytest.skip(f"node is absent (no node or npm on PATH): {test} and npm "
                    "(apt install nodejs npm)")


def npm_prefix(name: str, packages: list[str], installed: str, test: str) -> str:
    """The cache directory `name` in which npm installed `packages`; `installed` (a path
    in it) is there once they are, else they are installed now."""
    need_node(test)
    cache = os.environ.get("TOOLSRV_TEST_CACHE") or os.path.expanduser("~/.cache/toolsrv-tests")
    prefix = os.path.join(cache, name)
    if not os.path.exists(os.path.join(prefix, installed)):
        if _registry_down:
            pytest.skip(f"npm could not install {' '.join(packages)}: its registry was "
                        f"unreachable earlier in this run: {_registry_down[0]}")
        os.makedirs(prefix, exist_ok=True)
        p = subprocess.run([shutil.which("npm") or "npm", "install", "--no-audit", "--no-fund",
                            "--loglevel=error", "--prefix", prefix, *packages],
                           capture_output=True, text=True, timeout=900,
                           stdin=subprocess.DEVNULL)
        if p.returncode or not os.path.exists(os.path.join(prefix, installed)):
            said = (p.stderr or p.stdout).strip()
            if any(w in said for w in UNREACHABLE):
                _registry_down.append(said[-300:])
            pytest.skip(f"npm could not install {' '.join(packages)} (offline?): "
                        f"{said[-300:]}")
    return prefix
