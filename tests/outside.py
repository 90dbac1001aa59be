"""Where test servers start: a directory outside the checkout (issue 26).

Users start toolsrv anywhere but in its checkout, and a server started in the checkout
can import toolsrv from its working directory where a user's cannot (the warm boot once
did, unseen).  So every test server starts here: conftest.py moves the test process into
OUTSIDE for the session (in-process servers, AppThread and the runners, inherit it), and
the helpers that spawn `toolsrv serve` pass cwd=OUTSIDE.  It is 0755 (a root server's
tools run as nobody) and holds nothing."""
from __future__ import annotations

import atexit
import os
import shutil
import tempfile

CHECKOUT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUTSIDE = tempfile.mkdtemp(prefix="toolsrv-tests-cwd.", dir="/tmp")
os.chmod(OUTSIDE, 0o755)
assert not os.path.realpath(OUTSIDE).startswith(os.path.realpath(CHECKOUT) + os.sep)
atexit.register(shutil.rmtree, OUTSIDE, True)
