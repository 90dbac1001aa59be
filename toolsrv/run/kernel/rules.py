# toolsrv/run/kernel/rules.py — an init's memory of rulesets: the fixed path lists it was sent.
#
# Theory of operation.  A run's Landlock rules come in its request: the per-call paths
# ({CWD}, {TMPDIR}) in full, a profile's fixed paths (the same in every call of the profile)
# in full once per init and then by reference [epoch, ref] (toolsrv/run/launcher.py names
# them).  RuleCache keeps the lists by reference and a PathCache (toolsrv/run/kernel/landlock.py) of
# their O_PATH fds and ready rules, so a build is one landlock_add_rule per fixed path.  The
# cold init (toolsrv/run/init/cold.py) and the warm one (toolsrv/run/init/warm.py) share it.
# Standard library and landlock.py only: a warm init loads it into the tool's interpreter.
from __future__ import annotations

import errno

from toolsrv.run.kernel import landlock


class RuleCache:
    """What one init keeps between runs to build rulesets fast."""

    def __init__(self) -> None:
        self.fixed: dict[tuple[int, int], list[tuple[str, int]]] = {}
        self.cache: landlock.PathCache | None = None

    def build(self, rules: dict) -> int:
        """The run's ruleset fd from the request's rules (fixed paths by reference)."""
        ref = tuple(rules["fixed"]) if "fixed" in rules else None
        if ref is not None and "fixed_paths" in rules:
            self.fixed[ref] = [(p, a) for p, a in rules["fixed_paths"]]
        fixed = self.fixed.get(ref, []) if ref is not None else []
        if ref is not None and ref not in self.fixed:
            raise OSError(errno.EINVAL, f"landlock: unknown fixed path list {ref}")
        if self.cache is None:
            self.cache = landlock.PathCache()
        fd, _skipped = landlock.build_ruleset(
            rules["abi"], fixed + [(p, a) for p, a in rules["paths"]], handle_net=rules["net"],
            bind_tcp=rules["bind_tcp"], connect_tcp=rules["connect_tcp"],
            scoped=rules["scoped"], cache=self.cache, cached=len(fixed))
        return fd
