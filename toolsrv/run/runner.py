# toolsrv/run/runner.py — run one tool call confined, bounded and killable (the public API).
#
# Theory of operation.  Runner.run() checks the call may run (Landlock present, or the
# profile is best_effort; an elevated call needs the broker's yes), takes a fresh private
# directory from Scratch, resolves the profile for this call, asks warmplan.py whether it
# starts warm, and hands the spawn request through the Launcher (toolsrv/run/launcher.py)
# straight to an idle init (toolsrv/run/init/cold.py, pid 1 of a PID namespace of its own,
# or a warm one, toolsrv/run/init/warm.py); the zygote (toolsrv/run/init/zygote.py, started
# by Runner.start()) only forks inits ahead, off a call's path, and the server itself never
# forks.  The server keeps its ends of the three pipes and pumps them from the event loop
# (pumps.py): stdin written without blocking, stdout and stderr read in 64 KiB chunks into
# buffers capped per stream.  One deadline covers the whole call.
#
# Every way a run can end early is the Launcher's kill: SIGKILL to the run's init through
# its pidfd, which ends the run's whole PID namespace: timeout, an output cap hit,
# cancellation of the caller's task, close().  Invariants: the server holds at most cap +
# 64 KiB per stream; a run's directory is removed only after the init has reported, or its
# pidfd shown, the run's namespace empty (nothing is still writing in it); a cancelled
# run() sends the kill before it re-raises CancelledError.
from __future__ import annotations

import asyncio
import logging
import math
import os
import pwd
import resource
import time
from collections.abc import Callable, Coroutine
from typing import Any

from toolsrv.run.kernel import landlock
from toolsrv.run.elevation import reach, request_approval
from toolsrv.dirs.layout import work_base
from toolsrv.run.kernel.idmap import Planner, seclude
from toolsrv.run.launcher import Launcher, LauncherDied, LaunchHandle
from toolsrv.run.ownscript import ScriptCache
from toolsrv.run.init.wire import DEFAULT_PATH
from toolsrv.run.pumps import Collector, Feeder
from toolsrv.record import Record
from toolsrv.run.scratch import Scratch
from toolsrv.run.warmplan import WARM_RETRY, WarmKind, warm_request
from toolsrv.run.warmpool import WARM_IDLE
from toolsrv.run.sandbox import Policy, Profile, landlock_status, missing_parts, placeholder_values

DEFAULT_RLIMITS = {"as": 8 << 30, "fsize": 1 << 30, "nofile": 4096, "core": 0, "nproc": 4096}
DEFAULT_RUN_LIMITS = {"pids": 1024, "memory": 4 << 30}
DRAIN_GRACE = 2.0  # seconds to reach EOF on the pipes after the run has ended or been killed
log = logging.getLogger("toolsrv.warm")


class RunnerConfig(Record):
    """Server-wide settings of the runner; a profile's general.timeout overrides timeout.

    rlimits: name -> value (soft = hard) among cpu, as, fsize, nofile, core, nproc, data,
    stack, memlock.  Without "cpu", each run gets ceil(timeout) + 1 CPU seconds."""
    FIELDS = ("timeout", "stdout_cap", "stderr_cap", "run_as", "rlimits", "tmp_base",
              "approval_timeout", "bypass_socket", "namespaces", "run_limits", "warm",
              "hidden")

    def __init__(self, timeout: float = 30.0, stdout_cap: int = 10 * 2**20,
                 stderr_cap: int = 10 * 2**20, run_as: str | int | None = "nobody",
                 rlimits: dict[str, int] | None = None, tmp_base: str | None = None,
                 approval_timeout: float = 60.0, bypass_socket: str | None = None,
                 namespaces: bool = True, run_limits: dict | None = None,
                 warm: bool = True, hidden: tuple[str, ...] = ()) -> None:
        self.timeout = timeout
        self.stdout_cap = stdout_cap
        self.stderr_cap = stderr_cap
        self.run_as = run_as            # used only when the server runs as root
        self.rlimits: dict[str, int] = dict(DEFAULT_RLIMITS) if rlimits is None else rlimits
        self.tmp_base = tmp_base        # per-call dirs go here; default: default_tmp_base()
        self.approval_timeout = approval_timeout    # no answer from the broker in time means no
        self.bypass_socket = bypass_socket  # the approval broker's socket (unset: the
        # server's $OLLIE_BYPASS_SOCKET); the server's alone, never in a tool's environment
        self.namespaces = namespaces    # PID/network namespaces where the kernel allows;
                                        # False: none (subreapers end a run)
        # A cgroup per run where one may be made: {"pids": N, "memory": bytes} bound the
        # run as a whole ({"cgroups": False}: none); see toolsrv/run/kernel/cgroups.py.
        self.run_limits = dict(DEFAULT_RUN_LIMITS) if run_limits is None else run_limits
        self.warm = warm                # Python scripts start warm (toolsrv/run/init/warm.py)
        # hidden from an elevated run, with the work base (/var/tmp/toolsrv.<euid>) and the
        # scratch base, but for its own cwd and TMPDIR: other sessions' directories
        self.hidden = hidden


class RunRequest(Record):
    """One tool call: the resolved command and everything it runs with."""
    FIELDS = ("argv", "stdin", "cwd", "env", "profile", "tool_dir", "timeout", "elevated",
              "context", "kill", "extra_fds", "warm")

    def __init__(self, argv: list[str], stdin: bytes, cwd: str, env: dict[str, str],
                 profile: Profile, tool_dir: str | None = None, timeout: float | None = None,
                 elevated: bool = False, context: dict | None = None,
                 kill: asyncio.Event | None = None, extra_fds: tuple[int, ...] = (),
                 warm: Callable[..., tuple[Any, str | None]] | None = None) -> None:
        self.argv = argv
        self.stdin = stdin
        self.cwd = cwd
        self.env = env
        self.profile = profile
        self.tool_dir = tool_dir
        self.timeout = timeout
        self.elevated = elevated
        self.context: dict = {} if context is None else context
        self.kill = kill                # set: kill the run, keep what it printed (cancelled)
        self.extra_fds = extra_fds      # given to the tool as fds 3, 4, ... (caller keeps them)
        self.warm = warm                # plan(argv, env, cwd) of a warm start, or None: cold


class RunResult(Record):
    """How a run ended. error is set when it was refused or could not be launched."""
    FIELDS = ("stdout", "stderr", "exit_code", "signal", "timed_out", "cancelled", "truncated",
              "duration", "error", "timeout_used", "warm")

    def __init__(self, stdout: bytes = b"", stderr: bytes = b"", exit_code: int | None = None,
                 signal: int | None = None, timed_out: bool = False, cancelled: bool = False,
                 truncated: str | None = None, duration: float = 0.0, error: str | None = None,
                 timeout_used: float = 0.0, warm: bool = False) -> None:
        self.stdout = stdout
        self.stderr = stderr
        self.exit_code = exit_code
        self.signal = signal
        self.timed_out = timed_out
        self.cancelled = cancelled
        self.truncated = truncated
        self.duration = duration        # seconds from launch (after any approval) to the end
        self.error = error
        self.timeout_used = timeout_used
        self.warm = warm                # it ran in a warm interpreter (toolsrv/run/init/warm.py)


class Runner:
    """Runs tool calls through a pre-started launcher process; create one per server."""

    def __init__(self, config: RunnerConfig | None = None) -> None:
        self.config = config or RunnerConfig()
        for name in self.config.rlimits:
            if name not in ("cpu", "as", "fsize", "nofile", "core", "nproc", "data", "stack",
                            "memlock"):
                raise ValueError(f"rlimits: unknown limit {name!r}")
        self.status = landlock_status()
        self.clamped: list[tuple[str, int, int]] = []  # (limit, what runs get, not what)
        self._uid = self._resolve_uid()
        # A root server maps the grants its tools' uid cannot reach (toolsrv/run/kernel/idmap.py).
        self.planner = Planner(*self._uid) if self._uid else None
        self.launcher = Launcher(self._launcher_limits(), self.config.namespaces,
                                 limits=self.config.run_limits, idmap=self._uid)
        self.scratch = Scratch(self.config.tmp_base, self._uid)
        self._background: set[asyncio.Task[None]] = set()
        self._warm_broken: dict[WarmKind, tuple[float, str]] = {}  # kind -> (when, why)
        self.warm_failures = 0  # warm starts that failed (each logged, its kind cold a while)
        self._warm_said: set[str] = set()  # fallback reasons logged once
        self._magic: dict[WarmKind, str] = {}  # kind -> the bytecode magic of its interpreter
        self._codes = ScriptCache()        # tools' own scripts, compiled (ownscript.py)

    def _launcher_limits(self) -> dict[str, int]:
        """The server-wide rlimits, which the zygote takes on itself and passes to every tool.

        The zygote must still work under them, hence floors; cpu is set per run instead.
        A limit above the server's own hard limit, which no process of it may raise, is
        lowered to that (self.clamped, which the banner tells)."""
        limits = {k: v for k, v in self.config.rlimits.items() if k != "cpu"}
        for name, value in limits.items():
            hard = resource.getrlimit(getattr(resource, f"RLIMIT_{name.upper()}"))[1]
            if hard != resource.RLIM_INFINITY and hard < value:
                limits[name] = hard
                self.clamped.append((name, hard, value))
        for name, floor in (("nofile", 64), ("as", 256 << 20), ("data", 256 << 20),
                            ("stack", 1 << 20), ("nproc", 64)):
            if name in limits and limits[name] < floor:
                want = [w for n, _, w in self.clamped if n == name]
                raise ValueError(f"rlimits: {name} below {floor} would starve the launcher"
                                 + (f" (the server's hard limit is {limits[name]}: raise it, "
                                    f"e.g. --ulimit {name}={want[0]}:{want[0]} in a container)"
                                    if want else ""))
        return limits

    def limits_note(self) -> str | None:
        """The line that says which rlimits runs get lower than asked, and why."""
        if not self.clamped:
            return None
        got = "; ".join(f"{name} {have}, not {want}" for name, have, want in self.clamped)
        many = len(self.clamped) > 1
        return (f"runs get {got}: the server's hard limit{'s' if many else ''} (raise "
                f"{'them' if many else 'it'} before the server starts: prlimit, or --ulimit "
                "in a container)")

    def uid_problem(self) -> str | None:
        """Why every call is refused, when the launcher found it cannot switch to the
        tools' uid: what failed and the remedy; None when it can (or need not)."""
        why = self.launcher.uid_switch
        if not self._uid or not why:
            return None
        head = f"tools run as uid {self._uid[0]}, and the switch to it fails here ({why})"
        if self.launcher.userns:
            return (f"{head}: without CAP_SYS_ADMIN the runs' namespaces are made in a user "
                    "namespace that maps root alone; the remedy: --cap-add SYS_ADMIN in a "
                    "container, or serve as an ordinary user (tools then run as it)")
        return (f"{head}; the remedy: CAP_SETUID and CAP_SETGID for the server (--cap-add "
                "in a container), or serve as an ordinary user (tools then run as it)")

    def _resolve_uid(self) -> tuple[int, int] | None:
        who = self.config.run_as
        if who is None or os.geteuid() != 0:
            return None
        try:
            pw = pwd.getpwnam(who) if isinstance(who, str) else pwd.getpwuid(who)
            return pw.pw_uid, pw.pw_gid
        except KeyError:
            if isinstance(who, int):
                return who, who
            raise ValueError(f"run_as: no such user {who!r}") from None

    def tool_uid(self) -> tuple[int, int] | None:
        """(uid, gid) tools run as, or None when the runner does not switch users."""
        return self._uid

    def summary(self) -> str:
        """One line for the start-up log: Landlock parts and the containment in use."""
        la = self.launcher
        who = f"uid {self._uid[0]}" if self._uid else "the server's uid"
        if self.uid_problem():
            who += f": no ({la.uid_switch})"
        return (f"{self.status}; pid namespace per run: {self.pidns_text()}; "
                f"no-network netns: {'yes' if la.netns else 'no'}; "
                f"per-run cgroup: {la.cgroups}; "
                f"no ptrace in a run (seccomp): {'yes' if la.seccomp else 'no'}; "
                + (f"idmapped grants: {la.idmap}; " if self._uid else "") +
                f"tools run as {who}; Python tools start "
                + ("warm (a fork of a warm interpreter)" if self.config.warm else
                   "cold (--no-warm)")
                + "; resident ones (the bundled file tools) in an interpreter per agent")

    def pidns_text(self) -> str:
        """Whether runs get a PID namespace of their own: none does when none starts."""
        if self.uid_problem():
            return "no (no run starts: the uid switch fails)"
        return "yes" if self.launcher.pidns else "no"

    def check(self) -> None:
        """Prove the scratch base ours now (trusted.open_dir); raises trusted.Untrusted."""
        self.scratch.open()

    async def start(self) -> None:
        """Start the zygote (call early, while the server is small)."""
        await self.launcher.ensure()
        self.scratch.open()
        self.scratch.sweep_later()
        self.scratch.refill()

    async def close(self) -> None:
        """Kill every running run and stop the zygote."""
        await self.launcher.close()
        if self._background:
            await asyncio.wait(self._background, timeout=5)
        await self.scratch.close()

    async def run(self, req: RunRequest) -> RunResult:
        """Run one call to its end; see RunResult. Cancellation kills the run, then re-raises."""
        t0 = time.monotonic()
        timeout = req.timeout or req.profile.timeout or self.config.timeout
        res = RunResult(timeout_used=timeout)
        await self.launcher.ensure()
        refusal = await self._denial(req)
        if refusal:
            res.error, res.duration = refusal, time.monotonic() - t0
            return res
        t0 = time.monotonic()  # the deadline and the duration start here, after any approval
        try:
            tmpdir = await self.scratch.take()
        except OSError as e:
            res.error = f"sandbox: temporary directory (input/output error): {e}"
            res.duration = time.monotonic() - t0
            return res
        if req.kill is not None and req.kill.is_set():   # stopped before it could start
            self.scratch.release(tmpdir)
            res.cancelled, res.duration = True, time.monotonic() - t0
            return res
        warm = None
        for attempt in (0, 1):
            try:
                if attempt == 0:
                    policy = req.profile.resolve(
                        placeholder_values(req.cwd, tmpdir, req.tool_dir))
                    msg = self._spawn_message(req, policy, tmpdir, timeout)
                    warm = self._warm_start(req, msg, policy)
                handle = self.launcher.spawn(msg, req.extra_fds, warm)
            except (OSError, LauncherDied, ValueError) as e:
                self.scratch.release(tmpdir)
                res.error = f"sandbox: launch failed (input/output error): {e}"
                res.duration = time.monotonic() - t0
                return res
            try:
                await self._pump(handle, req.stdin, t0 + timeout, res, req.kill,
                                 req.context.get("live"))
            except asyncio.CancelledError:
                self.launcher.kill(handle)
                handle.close_fds()
                self._later(self._reap_then_remove(handle, tmpdir))
                raise
            res.warm = handle.warm is not None and handle.warm_failed is None
            if res.warm and handle.magic and warm is not None:
                self._magic[warm[0]] = handle.magic
            if res.warm and res.error and "warm interpreter ended" in res.error:
                log.warning("the warm interpreter of %s ended during a call (killed or "
                            "crashed); the next call starts another", req.argv[0])
            if handle.warm_failed is None or warm is None or res.stdout or res.stderr:
                break
            self._warm_broken[warm[0]] = (time.monotonic(), handle.warm_failed)
            self.warm_failures += 1
            self._say(f"broken {warm[0]}", f"warm start of {warm[1]['python']} failed "
                      f"({handle.warm_failed}); its tools start cold for {WARM_RETRY:.0f} s")
            res, warm = RunResult(timeout_used=timeout), None  # the same call, cold
        self.scratch.release(tmpdir)
        res.duration = time.monotonic() - t0
        return res

    def _warm_start(self, req: RunRequest, msg: dict, policy: Policy
                    ) -> tuple[WarmKind, dict, bytes | None] | None:
        """(kind, the request that makes an init warm) for a call that starts warm, with
        the script put in msg; None for a cold start (the reason is logged once)."""
        if req.warm is None or not self.config.warm or req.elevated:
            return None     # an elevated run's mounts are its own: never a warm kind's
        plan, why = req.warm(req.argv, msg["env"], req.cwd)
        if plan is not None and not self.launcher.pidns:  # its end needs kill(-1) from a
            why, plan = "no PID namespace per run here (a warm start needs one)", None
        if plan is None:
            if why is not None:
                self._say(f"{req.argv[0]}: {why}", f"{req.argv[0]} starts cold: {why}")
            return None
        return warm_request(plan, req, msg, policy, self._warm_broken, self._magic, self._codes)

    def _say(self, key: str, text: str) -> None:
        """Log a warm-start fallback once."""
        if key not in self._warm_said and len(self._warm_said) < 1024:
            self._warm_said.add(key)
            log.warning("%s", text)

    def status_text(self) -> str:
        """The server's /status: runs, idle inits, and the warm interpreters' memory."""
        la = self.launcher
        rss: dict[WarmKind, list[int]] = {}
        for kind, pid in la.warm.pids():
            try:
                with open(f"/proc/{pid}/status") as f:
                    kib = next((int(line.split()[1]) for line in f
                                if line.startswith("VmRSS:")), 0)
            except (OSError, ValueError):
                continue
            rss.setdefault(kind, []).append(kib)
        every = [k for v in rss.values() for k in v]
        budget = la.warm.budget()
        held = la.warm.held()
        resident = sum(1 for h in la._handles.values() if h.resident)
        lines = [f"runs: {len(la._handles) - resident} running"
                 + (f", {resident} resident process{'es' if resident != 1 else ''} up between "
                    "calls" if resident else ""),
                 la.totals_text(),
                 f"inits: {len(la._spares)} idle",
                 f"warm: {'on' if self.config.warm else 'off (--no-warm)'}; {len(every)} "
                 f"idle, {sum(every) / 1024:.1f} MiB RSS"
                 + (f" (largest {max(every) / 1024:.1f} MiB)" if every else "")
                 + (f", {held / 2**20:.1f} MiB of it counted (PSS, with their standby "
                    f"children) against at most {budget / 2**20:.1f} MiB"
                    if budget is not None else "")
                 + f" and {WARM_IDLE:g} s idle; {la.warm.started} made warm, "
                 f"{la.warm.lost} found dead, {la.warm.shed} let go for memory, "
                 f"{self.warm_failures} failed"]
        for kind, kibs in sorted(rss.items(), key=lambda kv: repr(kv[0])):
            boot, uid = kind.boot, kind.uid
            lines.append(f"  {kind.python} ({' '.join(f'{k}={v}' for k, v in boot) or 'no env'}"
                         f"{f', uid {uid}' if uid is not None else ''}): {len(kibs)} idle, "
                         f"{sum(kibs) / 1024:.1f} MiB RSS")
        now = time.monotonic()
        for kind, (when, why) in sorted(self._warm_broken.items(), key=lambda kv: repr(kv[0])):
            if now - when < WARM_RETRY:   # why its tools start cold, until it is tried again
                lines.append(f"  {kind.python}: warm start failed ({why}); cold "
                             f"for {WARM_RETRY - (now - when):.0f} s more")
        return "\n".join(lines) + "\n"

    async def _denial(self, req: RunRequest) -> str | None:
        if req.elevated:
            uid = self._uid[0] if self._uid else os.geteuid()
            try:
                name = pwd.getpwuid(uid).pw_name
            except KeyError:
                name = "no name"
            ask = {"session": req.context.get("session"), "agent": req.context.get("agent"),
                   "tool": req.context.get("tool"), "args": req.context.get("args"),
                   "cwd": req.cwd, "reach": reach(uid, name)}
            # the broker the call's connection named (tree/policy/consent.py), else ours
            sock = req.context.get("broker") or self.config.bypass_socket or \
                os.environ.get("OLLIE_BYPASS_SOCKET")
            ok, reason = await request_approval(sock, ask, self.config.approval_timeout)
            return None if ok else f"elevation denied (permission denied): {reason}"
        missing = missing_parts(req.profile, self.status, self.launcher.netns)
        if missing and not req.profile.best_effort:
            return f"sandbox: landlock unavailable (not implemented): {'; '.join(missing)}"
        return None

    def _spawn_message(self, req: RunRequest, policy: Policy, tmpdir: str,
                       timeout: float) -> dict:
        env = {**policy.env, **req.env, "TMPDIR": tmpdir}
        env.setdefault("PATH", DEFAULT_PATH)
        env.pop("OLLIE_BYPASS_SOCKET", None)   # the broker is the server's to ask, not a tool's
        cpu = self.config.rlimits.get("cpu", math.ceil(timeout) + 1)
        rules = None
        if not req.elevated and self.status.abi > 0:
            tcp = policy.network != "unrestricted"
            scope = landlock.SCOPE_SIGNAL | (0 if policy.network == "unrestricted"
                                             else landlock.SCOPE_ABSTRACT_UNIX)
            rules = {"abi": self.status.abi, "net": tcp, "scoped": scope, "cached": policy.fixed,
                     "paths": [(p, landlock.ACCESS[a]) for p, a in policy.paths],
                     "bind_tcp": list(policy.bind_tcp), "connect_tcp": list(policy.connect_tcp)}
        uid = self._uid
        mounts = None
        if self.planner is not None:  # the private TMPDIR is the tool uid's own already
            grants = [(p, a) for p, a in policy.paths if p != tmpdir]
            mounts = self.planner.plan(grants)
        if req.elevated:    # it stays in its session: no other cwd or TMPDIR, no host /proc
            mounts = seclude(mounts, [work_base(), self.scratch.base, *self.config.hidden],
                             [req.cwd, tmpdir])
        return {"op": "spawn", "argv": list(req.argv), "env": env, "cwd": req.cwd,
                "mounts": mounts,
                "uid": uid[0] if uid else None, "gid": uid[1] if uid else None,
                "rlimits": {"cpu": [cpu, cpu]}, "landlock": rules,
                "netns": policy.network == "none" and not req.elevated,
                "nnp": not req.elevated}

    async def _pump(self, handle: LaunchHandle, stdin: bytes, deadline: float,
                    res: RunResult, kill: asyncio.Event | None = None,
                    live: Any = None) -> None:
        """Feed stdin, collect output, wait for the exit; fill res.  `live` (live.py) sees
        the output while the run lasts."""
        out = Collector(handle.stdout, self.config.stdout_cap, lambda: self.launcher.kill(handle))
        err = Collector(handle.stderr, self.config.stderr_cap, lambda: self.launcher.kill(handle))
        if live is not None:
            live.attach(out, err)
        feeder = Feeder(handle.stdin, stdin)
        handle.taken()
        try:
            await self._wait_end(handle, out, err, deadline, res, kill)
        finally:
            out.stop()
            err.stop()
            feeder.stop()
            if live is not None:
                live.detach()
        res.stdout, res.stderr = out.value(), err.value()
        res.truncated = "stdout" if out.overflow else "stderr" if err.overflow else None
        res.cancelled = handle.killed and not res.timed_out and not res.truncated
        if not handle.exited.done():
            res.error = "sandbox: launcher lost the run (input/output error)"
            return
        status, error = handle.exited.result()
        if status is not None:
            code = os.waitstatus_to_exitcode(status)
            res.exit_code, res.signal = (code, None) if code >= 0 else (None, -code)
        if error and not res.error:
            res.error = f"sandbox: launch failed (input/output error): {error}"

    async def _wait_end(self, handle: LaunchHandle, out: Collector, err: Collector,
                        deadline: float, res: RunResult,
                        kill: asyncio.Event | None = None) -> None:
        """Wait for exit and EOF on both pipes; kill on the deadline or when `kill` is
        set (keeping what was printed); bounded drain after."""
        waits = (handle.exited, out.done, err.done)
        loop = asyncio.get_running_loop()
        wake = loop.create_future()   # one wait for all three, the kill and the deadline

        def check(_: Any = None) -> None:
            if not wake.done() and (all(f.done() for f in waits)
                                    or (kill is not None and kill.is_set())):
                wake.set_result(None)

        def expire() -> None:
            if not wake.done():
                wake.set_result(None)

        for f in waits:
            f.add_done_callback(check)
        killer = asyncio.ensure_future(kill.wait()) if kill is not None else None
        if killer is not None:
            killer.add_done_callback(check)
        timer = loop.call_later(max(0.0, deadline - time.monotonic()), expire)
        try:
            check()
            await wake
        finally:
            timer.cancel()
            for f in waits:
                f.remove_done_callback(check)
            if killer is not None:
                killer.cancel()
        pending = {f for f in waits if not f.done()}
        if handle.exited in pending:
            killed = kill is not None and kill.is_set()
            res.timed_out = not (out.overflow or err.overflow or killed)
            self.launcher.kill(handle)
        if pending:
            _, pending = await asyncio.wait(pending, timeout=DRAIN_GRACE)
        if handle.exited in pending:
            await asyncio.wait({handle.exited}, timeout=DRAIN_GRACE)

    async def _reap_then_remove(self, handle: LaunchHandle, tmpdir: str) -> None:
        await asyncio.wait({handle.exited}, timeout=10)
        self.scratch.release(tmpdir)

    def _later(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def open_resident(self, req: RunRequest, rewrite: Any = None
                            ) -> tuple[LaunchHandle | None, str | None]:
        """Start a resident run (toolsrv/tree/resident/process.py): launched as run() launches, its
        pipes left to the caller, no deadline and no CPU limit but the server-wide one
        (its calls have timeouts); (the handle, None) or (None, the refusal).  `rewrite`
        (argv, env, cwd) -> argv replaces the command once its environment is known (what
        it raises, but OSError or ValueError, goes to the caller)."""
        await self.launcher.ensure()
        refusal = await self._denial(req)
        if refusal:
            return None, refusal
        try:
            tmpdir = await self.scratch.take()
        except OSError as e:
            return None, f"sandbox: temporary directory (input/output error): {e}"
        try:
            policy = req.profile.resolve(placeholder_values(req.cwd, tmpdir, req.tool_dir))
            msg = self._spawn_message(req, policy, tmpdir, self.config.timeout)
            if rewrite is not None:
                msg["argv"] = rewrite(msg["argv"], msg["env"], req.cwd)
            cpu = self.config.rlimits.get("cpu")
            msg["rlimits"] = {"cpu": [cpu, cpu]} if cpu else {}
            handle = self.launcher.spawn(msg, req.extra_fds)
        except (OSError, LauncherDied, ValueError) as e:
            self.scratch.release(tmpdir)
            return None, f"sandbox: launch failed (input/output error): {e}"
        except BaseException:
            self.scratch.release(tmpdir)
            raise
        handle.taken()
        handle.resident = True     # up between its calls: /status counts it apart
        handle.exited.add_done_callback(lambda _: self.scratch.release(tmpdir))
        return handle, None
