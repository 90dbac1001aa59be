# toolsrv/cli/sandbox_check.py — `toolsrv sandbox check [PROFILE]`: what this host enforces.
#
# Theory of operation.  It resolves a sandbox profile as a call would (run/sandbox.py:
# load_profile, placeholder_values, Profile.resolve), asks the kernel what it offers
# (landlock_status; then the launcher a server would start, started and stopped: its PID
# namespaces, the switch to the tools' uid as root, a per-run cgroup, seccomp, each tried
# for real), and prints the paths, the network rule and a verdict: enforced, degraded (a
# best_effort profile) or refused.  It runs no tool and starts no server.
from __future__ import annotations

import asyncio
import os
import sys

from ..run.launcher import LauncherDied
from ..run.runner import Runner
from ..run.sandbox import (ProfileError, landlock_status, load_profile, missing_parts,
                           placeholder_values)


def _started() -> Runner:
    """A runner as a server's, its launcher started (what it could get, tried for real,
    as at a server's start) and stopped again; raises ValueError or LauncherDied."""
    runner = Runner()

    async def once() -> None:
        try:
            await runner.launcher.ensure()
        finally:
            await runner.launcher.close()
    asyncio.run(once())
    return runner


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
        from ..dirs import bundled
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
    try:
        runner = _started()
    except (ValueError, LauncherDied) as e:
        print(f"verdict: refused: {e}")
        return 1
    la = runner.launcher
    print(f"  per-run cgroup: {la.cgroups}" + ("; RLIMIT_NPROC, counted per uid, is the only "
          "process bound" if la.cgroups.startswith("none") else ""))
    print(f"  no ptrace in a run (seccomp): {'yes' if la.seccomp else 'no (unknown arch)'}")
    uid = runner.tool_uid()
    print(f"  pid namespace per run: {runner.pidns_text()}")
    who = f"uid {uid[0]}" if uid else "the server's uid"
    print(f"  tools run as {who}" + (f": no ({la.uid_switch})" if la.uid_switch else ""))
    for line in filter(None, [runner.limits_note()]):
        print(f"  {line}")
    if runner.uid_problem():
        print(f"verdict: refused: every call: {runner.uid_problem()}")
        return 1
    missing = missing_parts(policy, status, netns)
    if not missing:
        print("verdict: enforced")
        return 0
    if policy.best_effort:
        print(f"verdict: degraded (best_effort): {'; '.join(missing)}")
        return 0
    print(f"verdict: refused: sandbox: landlock unavailable: {'; '.join(missing)}")
    return 1
