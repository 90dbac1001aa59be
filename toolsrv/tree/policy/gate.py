"""The policy in force: policy.yaml followed on disk, and the checks the tree asks of it.

Where the file is.  `serve --policy FILE`, else `policy.yaml` beside the user's profiles
directory: ~/.config/ollie/policy.yaml (profiles are ~/.config/ollie/sandbox/*.yaml).  No
file there means no policy: every check answers at once, as before there was one.

Following it.  The file's directory is watched as the registry watches its search
directories (registry/watch.py's Follower: inotify, a tick every 2 s, polling without
inotify); each hint and tick stats the file and parses it again when it moved (a small
file, parsed on the loop as .meta files are).  A file that appears starts a policy.

Rule 1: never open by accident.  A file that does not parse, or one that vanishes while it
was in force, keeps the last good rules, and says so in tools/errors (`policy.yaml<TAB>
why; the last good policy, read at T, holds`), in the log and in the audit trail.  A
broken file at start stops the start (App: ValueError, naming the key and its line), as
does a --policy FILE that is not there: a server never starts more open than it was told.

The checks (doc/sandbox.md, Policy): at tool_load (check_load), at each call's write
(check_call, then take_run as it starts), at a session's mkdir (check_session).  A
refusal names the rule (`policy principals."uid:1000".tools: ...`), carries 9pfuse's
word (permission denied, resource busy) and is in the audit trail: the call's record
(outcome invalid), or a `policy` event for a load or a mkdir.

The kill switch (blocks.py): `block WORD` / `unblock WORD` written to the root's block
file by the operator; a block refuses new loads and calls at once and kills the calls
under way of that tool or principal; each change is a `policy` event in the trail.
"""
from __future__ import annotations

import logging
import os
import time
from typing import Any, Callable

from ...errors import P9Error, fit
from .blocks import Blocks, bad_word, is_principal
from .limits import Counters
from .rules import PolicyError, Rules, parse

log = logging.getLogger("toolsrv.policy")

MAX_FILE = 1 << 20
MAX_VERDICTS = 1 << 16      # (principal, tool) verdicts kept; past it, worked out afresh
EPOLICY = "permission denied: policy "


def default_path() -> str:
    """policy.yaml beside the user's profiles (run/sandbox.py: ~/.config/ollie/sandbox)."""
    return os.path.join(os.path.expanduser("~"), ".config", "ollie", "policy.yaml")


class PolicyGate:
    """policy.yaml's rules in force, the counters, the blocks; the checks."""

    def __init__(self, path: str | None = None, state: str | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.explicit = path is not None        # --policy FILE: it must be there
        self.path = os.path.abspath(path) if path else default_path()
        self.rules: Rules | None = None
        self.error = ""               # why the file on disk is not the rules in force
        self.read_at = ""             # when the rules in force were read
        self.revision = 0             # moves with each reload that changed something
        self._key: Any = None         # the file's stat when last read
        self.counters = Counters(clock)
        self.blocks = Blocks(state).load()
        self.audit: Any = None        # state/audit.Audit, or None
        self.sched: Any = None        # calls/scheduler.Scheduler: the calls to kill
        self.broker: str | None = None    # the approval broker's socket (confirm)
        self.approval_timeout = 60.0
        self._follower: Any = None
        self._verdicts: dict[tuple[str, str], Any] = {}   # (who, tool) -> (rule, verdict)

    @property
    def active(self) -> bool:
        """False while there is neither a policy nor a block: nothing to check."""
        return self.rules is not None or bool(self.blocks.words)

    # -- the file --
    def load(self) -> None:
        """The first read (ValueError: a broken file, or --policy FILE missing)."""
        if self.explicit and not os.path.exists(self.path):
            raise ValueError(f"--policy {self.path}: no such file")
        self.reload()
        if self.error:
            raise ValueError(f"policy {self.error} (fix it, or move it away to serve "
                             "without a policy)")

    def reload(self) -> bool:
        """Read the file again if it moved; True when the rules in force changed."""
        try:
            st = os.stat(self.path)
            key: Any = (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)
        except FileNotFoundError:
            key = None
        except OSError as e:
            key = ("error", e.strerror)
        if key == self._key:
            return False
        self._key = key
        if key is None:
            if self.rules is None:
                return False
            return self._broken(f"{self.path}: gone")
        try:
            rules = self._read()
        except (OSError, PolicyError) as e:
            return self._broken(str(e) if isinstance(e, PolicyError) else
                                f"{self.path}: {e.strerror or e}")
        self.rules, self.error = rules, ""
        self._verdicts.clear()
        self.read_at = time.strftime("%Y-%m-%d %H:%M:%S")
        self.revision += 1
        # a window whose limit moved is dropped: the new limit starts a fresh one
        self.counters.windows = {k: v for k, v in self.counters.windows.items()
                                 if rules.rule(k[0]).limits.get("calls_per_minute") == k[1]}
        log.info("policy: %s read", self.path)
        self._event("reloaded", file=self.path)
        return True

    def _read(self) -> Rules:
        with open(self.path, "rb") as f:
            raw = f.read(MAX_FILE + 1)
        if len(raw) > MAX_FILE:
            raise PolicyError(f"{self.path}: longer than {MAX_FILE} bytes")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise PolicyError(f"{self.path}: not UTF-8") from None
        return parse(text, self.path)

    def _broken(self, why: str) -> bool:
        held = (f"; the last good policy, read {self.read_at}, holds" if self.rules is not None
                else "")
        changed = self.error != why + held
        self.error = why + held
        self.revision += changed
        log.warning("policy: %s", self.error)
        self._event("broken", file=self.path, reason=self.error)
        return changed

    def errors_text(self) -> str:
        """tools/errors' line for the file (rule 1), or nothing."""
        return f"{self.path}\t{self.error}\n" if self.error else ""

    def text(self) -> str:
        """The root's policy file: where the rules come from, their state, the rules, the
        blocks."""
        head = (f"file\t{self.path}\n" + (f"read\t{self.read_at}\n" if self.read_at else "")
                + (f"error\t{self.error}\n" if self.error else ""))
        body = self.rules.text() if self.rules is not None else "none\tevery tool, no limits\n"
        blocks = "".join(f"blocked\t{w}\n" for w in self.blocks.words)
        return head + body + blocks

    def start(self) -> None:
        """Follow the file's directory (on the running loop)."""
        from ...registry.watch import Follower
        self._follower = Follower([os.path.dirname(self.path)],
                                  lambda hints, recheck: self.reload())
        self._follower.start()

    async def close(self) -> None:
        if self._follower is not None:
            await self._follower.close()
            self._follower = None

    # -- the checks --
    def check_load(self, who: str, tool: str) -> None:
        """Raise the refusal of `who` loading `tool`, or return."""
        if not self.active:
            return
        try:
            self._allowed(who, tool, "load")
        except P9Error as e:
            self._event("refused", principal=who, tool=tool, reason=e.full, op_of="load")
            raise

    def check_call(self, who: str, tool: str, nested: bool) -> str | None:
        """Raise the refusal of a call of `tool` for `who`; else None, or the rule that asks
        for the broker's confirmation (the call waits for it: `confirm`).  Counts the call
        against calls_per_minute."""
        if not self.active:
            return None
        ask = self._allowed(who, tool, "call")
        if self.rules is None:
            return None
        rule = self.rules.rule(who)
        n = rule.limits.get("calls_per_minute")
        if n is not None:
            wait = self.counters.take_call(who, n)
            if wait:
                raise P9Error(fit(f"resource busy: policy {rule.named('limits.calls_per_minute')}"
                                  ": ", f"{who} made {n} calls in the last minute (limit {n})",
                                  f"; retry in {wait:.1f}s"))
        return ask

    def take_run(self, who: str, call: Any) -> None:
        """Count `call` under way for `who` until it ends, or raise when `runs` is reached.
        A nested call runs under its parent's: it is not counted again."""
        call.who = who
        if self.rules is None or getattr(call, "parent", None) is not None:
            return
        rule = self.rules.rule(who)
        n = rule.limits.get("runs")
        if n is None:
            return
        have = self.counters.running(who)
        if have >= n:
            raise P9Error(fit(f"resource busy: policy {rule.named('limits.runs')}: ",
                              f"{who} has {have} calls under way (limit {n})",
                              "; try again when one ends"))
        call.waiters.append(self.counters.run_started(who))

    def check_session(self, who: str) -> None:
        if self.rules is None and not self.blocks.words:
            return
        if who in self.blocks.words:
            raise P9Error(fit(f"permission denied: blocked: {who}", "",
                              f" (toolsrv unblock {who} lifts it)"))
        if self.rules is None:
            return
        rule = self.rules.rule(who)
        n = rule.limits.get("sessions")
        if n is not None and self.counters.alive_sessions(who) >= n:
            why = fit(f"resource busy: policy {rule.named('limits.sessions')}: ",
                      f"{who} has {n} sessions (limit {n})", "; remove one first")
            self._event("refused", principal=who, reason=why.full, op_of="mkdir")
            raise P9Error(why)

    def session_made(self, who: str, s: Any) -> None:
        if self.rules is not None:
            self.counters.session_made(who, s)

    def _allowed(self, who: str, tool: str, what: str) -> str | None:
        if self.blocks.words:
            word = who if who in self.blocks.words else self.blocks.tool_blocked(tool)
            if word is not None:
                raise P9Error(fit(f"permission denied: blocked: {word}", "",
                                  f" (toolsrv unblock {word} lifts it)"))
        if self.rules is None:
            return None
        got = self._verdicts.get((who, tool))
        if got is None:              # globs matched once per principal and tool (O(1) after)
            if len(self._verdicts) >= MAX_VERDICTS:
                self._verdicts.clear()
            rule = self.rules.rule(who)
            got = self._verdicts[(who, tool)] = (rule, rule.verdict(tool))
        rule, v = got
        if v is None:
            return None
        kind, glob = v
        if kind == "deny":
            raise P9Error(fit(f"{EPOLICY}{rule.named('deny')}: ",
                              f"{who} may not {what} {glob}; {tool} matches it", ""))
        if kind == "tools":
            raise P9Error(fit(f"{EPOLICY}{rule.named('tools')}: ",
                              f"{who} may {what} {', '.join(rule.tools)}; {tool} is not "
                              "among them", ""))
        return rule.named("confirm") if what == "call" else None

    async def confirm(self, where: str, who: str | None, request: dict,
                      broker: str | None = None) -> None:
        """Ask the approval broker (run/elevation.py) to confirm a call: `broker`, the
        one the call's connection named (consent.py), else the server's; raise the
        refusal naming the rule (`where`: policy.yaml's, or the .meta's `confirm`) when
        it does not say yes."""
        from .consent import confirm
        await confirm(broker or self.broker, self.approval_timeout, where, who, request)

    # -- the kill switch --
    def block(self, words: list[str], who: Any) -> int:
        """Block each word (saved first: OSError when it cannot be kept); kill the calls
        under way it covers; how many were killed."""
        for w in words:
            why = bad_word(w)
            if why:
                raise P9Error(fit("block: ", why))
        new = [w for w in dict.fromkeys(words) if w not in self.blocks.words]
        if new:
            old = list(self.blocks.words)
            self.blocks.words += new
            self._keep(old)
        killed = 0
        if self.sched is not None:
            for c in list(self.sched.live):
                if any(self._covers(w, c) for w in words):   # its children end with it
                    self.sched.stop(c)
                    killed += 1
        for w in words:
            self._event("blocked", word=w, by=who, killed=killed)
        return killed

    def unblock(self, words: list[str], who: Any) -> None:
        gone = [w for w in words if w in self.blocks.words]
        if gone:
            old = list(self.blocks.words)
            self.blocks.words = [w for w in old if w not in gone]
            self._keep(old)
        for w in words:
            self._event("unblocked", word=w, by=who, was_blocked=w in gone)

    def _keep(self, old: list[str]) -> None:
        try:
            self.blocks.save()
        except OSError as e:
            self.blocks.words = old
            raise P9Error(fit("input/output error: block list not saved: ",
                              f"{e.strerror or e}; nothing was changed", "")) from None

    @staticmethod
    def _covers(word: str, call: Any) -> bool:
        if is_principal(word):
            return getattr(call, "who", None) == word
        import fnmatch
        return fnmatch.fnmatchcase(call.tool, word)

    def _event(self, op: str, **more: Any) -> None:
        if self.audit is not None:
            if "op_of" in more:
                more["of"] = more.pop("op_of")
            self.audit.event({"event": "policy", "op": op, **more})
