"""No dead code in the product (issue 28): vulture over toolsrv/, with the names used only
where it does not look listed, each with its reason, in tests/vulture_allow.py."""
from __future__ import annotations

import ast
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_vulture_finds_nothing_unused_in_the_product():
    pytest.importorskip("vulture", reason="vulture is in the test extra: make test installs it")
    r = subprocess.run([sys.executable, "-m", "vulture", "toolsrv", "tests/vulture_allow.py",
                        "--min-confidence", "60", "--exclude", "toolsrv/man"],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and not r.stdout.strip(), (
        "vulture found unused code: remove it, or, if something vulture cannot see uses "
        "it, name it in tests/vulture_allow.py with why:\n" + r.stdout + r.stderr)


def test_the_allow_list_names_only_what_vulture_would_flag():
    """An allow-list entry whose code is gone, or used now, is one to drop."""
    pytest.importorskip("vulture", reason="vulture is in the test extra: make test installs it")
    r = subprocess.run([sys.executable, "-m", "vulture", "toolsrv", "--min-confidence", "60",
                        "--exclude", "toolsrv/man", "--make-whitelist"],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    flagged = {line.split()[0].removeprefix("_.") for line in r.stdout.splitlines() if line}
    with open(os.path.join(ROOT, "tests", "vulture_allow.py")) as f:
        tree = ast.parse(f.read())
    listed = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} | \
        {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    assert listed - {"_"} <= flagged, sorted(listed - {"_"} - flagged)
