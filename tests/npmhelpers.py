"""npm packages the interop tests run (the MCP Inspector, the TypeScript SDK, a language
server), installed once into a cache directory: ~/.cache/toolsrv-tests, or
$TOOLSRV_TEST_CACHE.  Without node and npm, or when npm cannot install (offline), the test
is skipped, saying so."""
from __future__ import annotations

import os
import shutil
import subprocess

import pytest


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
        os.makedirs(prefix, exist_ok=True)
        p = subprocess.run([shutil.which("npm") or "npm", "install", "--no-audit", "--no-fund",
                            "--loglevel=error", "--prefix", prefix, *packages],
                           capture_output=True, text=True, timeout=900,
                           stdin=subprocess.DEVNULL)
        if p.returncode or not os.path.exists(os.path.join(prefix, installed)):
            pytest.skip(f"npm could not install {' '.join(packages)} (offline?): "
                        f"{(p.stderr or p.stdout).strip()[-300:]}")
    return prefix
