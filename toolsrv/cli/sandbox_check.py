# toolsrv/cli/sandbox_check.py — `toolsrv sandbox check [PROFILE]`: what this host enforces.
#
# Theory of operation.  It resolves a sandbox profile as a call would (run/sandbox.py:
# load_profile, placeholder_values, Profile.resolve), asks the kernel what it offers
# (landlock_status, a per-run cgroup, the seccomp program), and prints the paths, the
# network rule and a verdict: enforced, degraded (a best_effort profile) or refused.  It
# runs no tool and starts no server.
from __future__ import annotations

import os
import sys

from ..run.kernel.cgroups import RunGroups
from ..run.kernel.seccomp import program
from ..run.sandbox import (ProfileError, landlock_status, load_profile, missing_parts,
                           placeholder_values)


def sandbox_check_main(argv: list[str]) -> int:
    """`toolsrv sandbox check [PROFILE]`: print the ABI, the resolved profile, the verdict.

    Exit status: 0 enforceable (or best-effort), 1 refused here, 2 profile error."""
    name = argv[0] if argv and argv[0] else "default"
    status = landlock_status()
    print(status)
    try:
        profile = load_profile(name)
    except ProfileError as e:
        from ..run.sandbox import default_user_dir
        from .. import bundled
        where = f" (looked for {name}.yaml in {default_user_dir()} and {bundled.PROFILES})" \
            if str(e).endswith(": not found") else ""
        print(f"toolsrv sandbox check: {e}{where}", file=sys.stderr)
        return 2
    print(f"profile {profile.name}: {profile.source}")
    values = placeholder_values(os.getcwd(), "<per-call tmp>", "<tool dir>")
    policy = profile.resolve(values)
    for path, access in policy.paths:
        exists = "<" in path or os.path.exists(path)
        print(f"  {access:<4} {path}{'' if exists else '  (missing: skipped)'}")
    for raw in policy.skipped:
        print(f"  skip {raw}  (placeholder unset)")
    netns = os.geteuid() == 0
    print(f"  network: {policy.network}"
          + (f" bind {list(policy.bind_tcp)} connect {list(policy.connect_tcp)}"
             if policy.network == "tcp" else "")
          + (" (udp/raw blocked by an empty network namespace)" if policy.network == "none"
             and netns else ""))
    print("  env: " + " ".join(profile.env))
    groups = RunGroups.setup()
    print(f"  per-run cgroup: {groups.kind if groups.bases else 'none (' + groups.why + ')'}"
          + ("" if groups.bases else "; RLIMIT_NPROC, counted per uid, is the only process "
             "bound"))
    groups.close()
    print(f"  no ptrace in a run (seccomp): {'yes' if program() else 'no (unknown arch)'}")
    missing = missing_parts(policy, status, netns)
    if not missing:
        print("verdict: enforced")
        return 0
    if policy.best_effort:
        print(f"verdict: degraded (best_effort): {'; '.join(missing)}")
        return 0
    print(f"verdict: refused: sandbox: landlock unavailable: {'; '.join(missing)}")
    return 1
