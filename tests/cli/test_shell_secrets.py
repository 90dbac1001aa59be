"""A secret through a real 9pfuse mount (issue 50.1's done-when): a tool that prints its
secret shows `[secret NAME]` to `cat`, and `grep -r` of the mounted tree, of the state
directory and of the server's log finds no value.  Skips, saying why, where 9pfuse or FUSE
is missing."""
from __future__ import annotations

import os
import subprocess
import tempfile

from shellhelpers import mounted_or_skip, serving, sh

VALUE = "tok-5e3f9a1c-not-for-models"
LEAK = """\
#!/bin/sh
cat >/dev/null
echo "token=$LEAK_TOKEN"
echo "to stderr: $LEAK_TOKEN" >&2
"""


def test_a_printed_secret_is_redacted_everywhere_the_mount_shows(tmp_path):
    creds = tempfile.mkdtemp(prefix="creds.", dir="/tmp")     # systemd's, 0700 and ours
    with open(os.path.join(creds, "LEAK_TOKEN"), "w", opener=lambda p, f: os.open(
            p, f, 0o600)) as f:
        f.write(VALUE + "\n")
    with serving(tools={"leak": (LEAK, {"secrets": ["LEAK_TOKEN"]})},
                 CREDENTIALS_DIRECTORY=creds) as (env, _, p):
        with mounted_or_skip(env) as mnt:
            a = f"{mnt}/session/s/agent/a"
            r = sh(f"mkdir {mnt}/session/s {a} && echo tool_load leak > {a}/ctl && "
                   f"echo '{{}}' > {a}/tools/leak/call; cat {a}/tools/leak/out; "
                   f"cat {a}/tools/leak/err; cat {a}/log", env)
            assert "token=[secret LEAK_TOKEN]" in r.stdout, (r.stdout, r.stderr)
            assert "to stderr: [secret LEAK_TOKEN]" in r.stdout, r.stdout
            assert VALUE not in r.stdout + r.stderr
            found = sh(f"grep -rl -- {VALUE} {mnt} {env['XDG_STATE_HOME']}; echo rc=$?", env)
            assert found.stdout.strip().endswith("rc=1"), found.stdout  # read all, found none
            assert "status" in sh(f"ls {a}/tools/leak", env).stdout    # the walk saw the call
    rest = p.stderr.read() if p.stderr else ""
    assert VALUE not in rest
    subprocess.run(["rm", "-rf", creds], check=False)
