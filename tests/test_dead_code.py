"""No dead code in toolsrv/ and proto/ (the codec, toolsrv.proto): vulture finds nothing
that nothing uses (issue 28).

vulture reads toolsrv/ and proto/, and tests/ and bench/ as their users (a function kept
for a test or a benchmark is used), with tests/vulture_allow.py, the short list of names
used where vulture cannot see it (asyncio's callbacks, the protocol's constants, source
text).
Confidence 60 is vulture's word for an unused function, class, method, attribute or
variable; 80 or more would report only unused imports and unreachable code, and the
dead code this check keeps out (issue 28's EmptyRegistry, semantic_ready, startup_env)
would pass it.  Only what it finds in toolsrv/ and proto/ counts.
"""
from __future__ import annotations

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ALLOW = os.path.join("tests", "vulture_allow.py")


def test_vulture_finds_no_dead_code_in_toolsrv():
    r = subprocess.run([sys.executable, "-m", "vulture", "toolsrv", "proto", "tests", "bench",
                        ALLOW, "--min-confidence", "60"],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert "No module named vulture" not in r.stderr, \
        "vulture is missing: install the test extra (pip install -e '.[test]', or make)"
    assert r.returncode in (0, 3), r.stderr      # 3: it found dead code; else it failed
    found = [line for line in r.stdout.splitlines()
             if line.startswith(("toolsrv" + os.sep, "proto" + os.sep))]
    assert not found, ("dead code (remove it, or list a name used where vulture cannot "
                       "see it in tests/vulture_allow.py):\n" + "\n".join(found))
