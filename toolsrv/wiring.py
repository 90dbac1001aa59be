"""The server's parts, each made from the Options and joined to the parts it needs.

Rule.  Nothing here awaits or stops.  Each method makes one part (the runner, the
registry, the session store, the search index, the tree, the calls, the imports, the
gate, the audit trail, the metrics, the traces) or what the listeners will use (their
configs, the TLS context), and joins it to the parts made before it; a part that works
on its own starts as it is made (the imports dial their hosts, --metrics listens).  The
order they are made in, the 9P listeners and the shutdown are App's (app.py): an App is
the Parts, running.

Who gets in (SECURITY.md).  serve/peers.py decides: a Unix-socket peer must have the
server's uid or one allowed by --allow-uid, and must not be one of our own tool
processes; a TCP peer must prove the shared secret (serve/auth.py) when --auth-secret is
given, which --listen-any requires; a TLS peer (serve/tls.py) too, and under mutual TLS
its certificate alone may stand for the secret.  A tool whose profile asks for it gets a
connection of its own, scoped to its agent (serve/peers.py Internal).  No --import may
prove this server's own secret unless told (`refuse_own_secret`).

Where things are kept.  dirs/layout.py's: the state directory (one named for the first
address unless --state; locked, so a second server on it is refused), the work base and
its nostate/ directories, each proved ours before serving, or the server refuses to
start and says what is wrong.

Imports.  A part's module is imported where the part is made, so that the server
answers its first request before it imports what only calls need (doc/performance.md,
Start-up); the parts' types are imported for the type checker alone.
"""
from __future__ import annotations

import asyncio
import logging
import os
import sys
from typing import TYPE_CHECKING, Any

from .dirs import bundled
from .dirs.serverdir import ServerDir
from .record import replace
from .serve import dial
from .serve.loopwatch import LoopWatch
from .serve.peers import Internal, PeerPolicy
from .serve.server import ServerConfig
from .serve.transport import Gate, NinePProtocol
from .tree.root import ToolsrvFS
from .tree.state.sessions import SessionStore

if TYPE_CHECKING:
    import ssl

    from .dirs import trusted
    from .dirs.statedir import StateLock
    from .hosts.ctlfile import Lazy
    from .hosts.hosts import Hosts
    from .hosts.imports import Spec
    from .options import Options
    from .registry.registry import Registry
    from .run.runner import Runner
    from .serve.metrics import Metrics
    from .serve.traces import Traces
    from .tree.calls.apply import Calls
    from .tree.searchfile import Searcher
    from .tree.state.audit import Audit

log = logging.getLogger("toolsrv")

BUNDLED_TOOLS = bundled.TOOLS         # the bundled tools (dirs/bundled.py)


def default_tools_path() -> list[str]:
    """$OLLIE_TOOLS_PATH, else the user's tools followed by the bundled ones."""
    env = os.environ.get("OLLIE_TOOLS_PATH")
    if env:
        return [p for p in env.split(":") if p]
    return [os.path.expanduser("~/.config/ollie/tools"), BUNDLED_TOOLS]


def refuse_own_secret(specs: list[Spec], own: bytes) -> None:
    """Raise ValueError when an import would prove this server's own --auth-secret: a
    --import's secret= file, or $TOOLSRV_SECRET_FILE (what hosts/ctl's imports and a
    --import without secret= prove).  A remote that holds the secret could speak for this
    server's clients wherever it is accepted (SECURITY.md).  A file that cannot be read
    proves nothing: its import fails when dialled, saying why."""
    import hmac
    from .serve.auth import load_secret
    env = os.environ.get("TOOLSRV_SECRET_FILE")
    named = [(f"--import {s.name}: secret={s.secret}", s.secret) for s in specs if s.secret]
    if env:
        named.append((f"$TOOLSRV_SECRET_FILE ({env}), which imports prove when they name no "
                      "secret=,", env))
    for what, path in named:
        try:
            same = hmac.compare_digest(load_secret(path), own)
        except (OSError, ValueError):
            continue
        if same:
            raise ValueError(f"{what} holds this server's own --auth-secret: a remote that "
                             "knows it may speak for this server's clients; give each "
                             "remote a secret of its own (doc/hosts.md), or pass "
                             "--import-own-secret to allow it")


class Parts:
    """The server's parts.  Those made at start (App.start) are None, or unset, before."""

    registry: Registry          # the tools on disk
    store: SessionStore         # sessions and agents, and their state
    fs: ToolsrvFS               # the tree the listeners serve
    gate: Gate                  # who may connect, and how many (serve/transport.py)

    def __init__(self, opts: Options) -> None:
        self.opts = opts
        self.addrs = [dial.parse(a) for a in opts.addrs] or [dial.default_addr()]
        self.internal = Internal()    # the connections tools are given (serve/peers.py)
        self.conns: set[NinePProtocol] = set()   # the live connections, the listeners'
        self.runner: Runner | None = None
        self.calls: Calls | None = None
        self.searcher: Searcher | None = None   # tools/search, in its worker thread
        self.hosts: Hosts | Lazy | None = None   # the imports of other hosts' trees
        self.lock: StateLock | None = None       # held while serving with state
        self.nostate: ServerDir | None = None    # the work base's nostate/ (dirs/layout.py)
        self.audit: Audit | None = None          # the trail, None without one
        self.metrics: Metrics | None = None      # the root's metrics file
        self.metrics_port: int | None = None     # where --metrics listens
        self.traces: Traces | None = None        # when spans are exported
        self.watch: LoopWatch | None = None      # the loop's lag, in /status (loopwatch.py)

    # -- what the listeners use --
    def _configs(self) -> tuple[ServerConfig, ServerConfig]:
        """The server config for Unix sockets, and the one for TCP listeners (plain or TLS).
        A non-loopback listener needs --listen-any and a way to tell who is there: the
        shared secret, or for a tls! one, client certificates (--tls-client-ca)."""
        opts = self.opts
        config = ServerConfig(msize=opts.msize, max_fids=opts.max_fids,
                              max_inflight=opts.max_inflight, max_held=opts.max_held,
                              trace=self._trace if opts.trace else None)
        if opts.auth_secret:
            from .serve.auth import Authenticator, load_secret
            return config, replace(config, auth=Authenticator(load_secret(opts.auth_secret)))
        mtls = bool(opts.tls_client_ca)
        far = [a for a in self.addrs if a.is_tcp and not a.is_loopback()
               and not (a.kind == "tls" and mtls)]
        if far:
            raise ValueError(f"{far[0]}: a non-loopback listener needs --listen-any and "
                             "--auth-secret FILE" + (" (or tls! with --tls-client-ca FILE)"
                                                     if far[0].kind == "tls" else ""))
        for a in self.addrs:
            if a.kind == "tcp" or (a.kind == "tls" and not mtls):
                log.warning("%s: no --auth-secret: any local user can connect", a)
        return config, config

    def _tls_context(self) -> ssl.SSLContext | None:
        """The tls! listeners' context, or None when there are none."""
        opts = self.opts
        if not any(a.kind == "tls" for a in self.addrs):
            if opts.tls_cert or opts.tls_client_ca:
                log.warning("--tls-cert/--tls-client-ca given but no tls!HOST!PORT address")
            return None
        if not (opts.tls_cert and opts.tls_key):
            raise ValueError("a tls! address needs --tls-cert FILE and --tls-key FILE")
        from .serve.tls import TLSError, server_context
        try:
            return server_context(opts.tls_cert, opts.tls_key, opts.tls_client_ca)
        except TLSError as e:
            raise ValueError(str(e)) from None

    def _trace(self, line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    def _import_specs(self) -> list[Spec]:
        """The --import specs, parsed (ValueError: a bad one)."""
        if not self.opts.imports:
            return []
        from .hosts.imports import Spec
        return [Spec.parse(i) for i in self.opts.imports]

    # -- the state directory --
    def _state_dir(self) -> str | None:
        """The state directory (None with --no-state): --state, else one named for the
        first address (statedir.py)."""
        if not self.opts.persist:
            return None
        from .dirs.statedir import default_state_dir
        return self.opts.state_dir or default_state_dir(str(self.addrs[0]),
                                                         str(dial.plan9port_default()))

    def _lock_state(self, state: str | None) -> None:
        """Lock the state directory for this server: a second server on it is refused
        with the holder's pid and address (statedir.py)."""
        if state is None:
            return
        from .dirs.statedir import StateLock
        lock = StateLock(state)
        lock.acquire([str(a) for a in self.addrs])
        self.lock = lock

    def _unlock(self) -> None:
        if self.lock is not None:
            self.lock.release()
            self.lock = None

    # -- the parts --
    def _make_runner(self) -> tuple[Runner, tuple[int, int] | None]:
        """The runner (its launcher not started yet), and the uid:gid tools run as."""
        from .run.elevation import broker_socket    # where `toolsrv approve` listens too
        from .run.runner import Runner, RunnerConfig
        runner = Runner(RunnerConfig(timeout=self.opts.timeout, run_as=self.opts.run_as,
                                     warm=self.opts.warm, run_limits=self._run_limits(),
                                     stdout_cap=self.opts.max_output,
                                     stderr_cap=self.opts.max_output,
                                     bypass_socket=broker_socket(os.environ, dial.namespace())))
        from .registry import warmstart
        warmstart.OFF = None if self.opts.warm else \
            "warm starts are off (toolsrv serve --no-warm)"
        return runner, runner.tool_uid()

    def _run_limits(self) -> dict[str, Any]:
        """Each run's cgroup limits, and those of all runs together (doc/reliability.md):
        memory by default half of what the server may use; idle warm interpreters by
        default an eighth of that, at most 256 MiB."""
        from .run.kernel.cgroups import default_total_memory
        from .run.runner import DEFAULT_RUN_LIMITS
        total = self.opts.max_run_memory or default_total_memory()
        warm = self.opts.max_warm_memory
        return {**DEFAULT_RUN_LIMITS, "total_memory": total,
                "total_pids": self.opts.max_run_pids or None,
                "warm_memory": warm if warm is not None else min(256 << 20, total // 8)}

    def _make_registry(self) -> Registry:
        from .registry.registry import Registry
        return Registry(self.opts.tools if self.opts.tools is not None else default_tools_path())

    def _make_store(self, state: str | None, work: trusted.Dir,
                    tool_uid: tuple[int, int] | None) -> SessionStore:
        """The session store (not restored yet), its cwds under `work` (dirs/layout.py)."""
        o = self.opts
        return SessionStore(state, work, tool_uid, self._check_profile,
                            max_sessions=o.max_sessions, max_agents=o.max_agents)

    def _check_profile(self, name: str) -> None:
        """The session store's check of a sandbox value: the profile loads."""
        from .run.sandbox import load_profile
        load_profile(name)

    def _make_searcher(self) -> Searcher:
        """tools/search's index: made now (it follows the registry from here on), built
        and its model loaded on the first search, never at start-up."""
        from .registry.search.index import SearchIndex
        from .tree.searchfile import Searcher
        return Searcher(SearchIndex(self.registry))

    def _make_fs(self, revwait_timeout: float) -> ToolsrvFS:
        """The tree, over the registry and the store (and /status when the runner has
        figures to show)."""
        return ToolsrvFS(self.registry, self.store, revwait_timeout=revwait_timeout,
                         status=self._status_text if hasattr(self.runner, "status_text")
                         else None, searcher=self.searcher)

    def _status_text(self) -> str:
        """/status: the runner's figures, the resident processes, the loop's lag."""
        assert self.runner is not None       # no status file without one (_make_fs)
        text = self.runner.status_text()
        if self.calls is not None:
            text += self.calls.sched.residents.status_text()
        return text + (self.watch.status_line() if self.watch is not None else "")

    def _start_calls(self) -> Calls:
        """The calls (ctl, the scheduler) and an agent's files over them."""
        from .tree.agent import AgentFiles
        from .tree.calls.apply import Calls
        o = self.opts
        calls = self.calls = Calls(
            self.registry, self.store, self.runner, max_runs=o.max_runs,
            max_queued=o.max_queued, addr=str(self.addrs[0]), connect=self.internal.connect,
            per_session=o.max_runs_per_session, per_agent=o.max_runs_per_agent,
            max_args=o.max_args, timeout=o.timeout)
        self.fs.agent_files = AgentFiles(calls, self.searcher)
        self.fs.call_timeout = o.timeout      # tools/<tool>/meta states it
        return calls

    def _start_hosts(self, specs: list[Spec], state: str | None) -> None:
        """The imports (toolsrv/hosts): their tools join the registry as they answer.  With
        none to make (no --import, none kept in the state), made on the first hosts/ctl
        write (ctlfile.Lazy)."""
        from .hosts.ctlfile import STATE_FILE, Lazy, hosts_dir

        def make() -> Hosts:
            from .hosts.hosts import Hosts
            made = Hosts(self.registry, specs, state)
            made.start()
            return made
        kept = state is not None and os.path.exists(os.path.join(state, STATE_FILE))
        hosts = self.hosts = make() if specs or kept else Lazy(make)
        self.fs.add_root(hosts_dir(self.fs, hosts))
        self.store.on_remove_agent.append(lambda a: hosts.forget(
            a, self.store.sessions.get(a.session.name) is not a.session))
        self.store.on_remove_session.append(lambda s: hosts.forget_session(s.name))

    def _make_gate(self) -> Gate:
        """Who may connect (serve/peers.py), and how many: never one of our own tools."""
        o = self.opts
        launcher = lambda: getattr(getattr(self.runner, "launcher", None), "zygote_pid", None)
        return Gate(o.max_conns, o.max_conns_per_peer,
                    PeerPolicy(o.allow_uids, launcher).peer_check)

    def audit_path(self, state: str | None) -> str | None:
        """Where the trail goes: --audit FILE, else the state directory's audit.jsonl;
        None with --no-audit, or --no-state and no --audit."""
        from .tree.state.audit import FILE
        if self.opts.audit is None:
            return None
        return self.opts.audit or (os.path.join(state, FILE) if state is not None else None)

    def _start_audit(self, state: str | None, calls: Calls) -> None:
        """The trail, opened (an OSError stops the start) and handed to its hooks."""
        path = self.audit_path(state)
        if path is None:
            return
        from .tree.state.audit import Audit
        o = self.opts
        audit = self.audit = Audit(path, o.audit_max_size, o.audit_keep, o.audit_args,
                                   o.audit_fsync).open()
        audit.approver = "broker at " + str(self.runner.config.bypass_socket) \
            if self.runner is not None else ""
        self.fs.audit = calls.sched.audit = audit
        self.gate.on_refuse = audit.connection_refused

    def _start_metrics(self, calls: Calls) -> None:
        """The root's metrics file, and --metrics HOST:PORT (loopback but for --listen-any:
        the tools' names and how they are used are the server's business)."""
        from .serve.metrics import Metrics, parse_listen
        from .tree.node import TextFile
        m = self.metrics = Metrics(self, asyncio.get_running_loop())
        calls.sched.metrics = m
        self.fs.add_root(TextFile("metrics", self.fs.q("metrics"), self.fs.root, m.text))
        if self.opts.metrics:
            host, port = parse_listen(self.opts.metrics)
            if not (self.opts.listen_any or dial.Addr("tcp", host=host, port=port)
                    .is_loopback()):
                raise ValueError(f"--metrics {self.opts.metrics}: not a loopback address "
                                 "(give --listen-any to serve the metrics beyond this host)")
            self.metrics_port = m.serve_http(host, port)

    def _start_traces(self, calls: Calls) -> None:
        """A span per call, when configured: the SDK is imported then, never otherwise."""
        o = self.opts
        kind = os.environ.get("OTEL_TRACES_EXPORTER", "")
        if not (o.span_exporter or o.otlp_endpoint or (kind != "none" if kind else any(
                os.environ.get(f"OTEL_EXPORTER_OTLP{v}_ENDPOINT") for v in ("", "_TRACES")))):
            return
        try:
            from .serve.traces import Traces
        except ImportError as e:
            raise ValueError(f"traces asked for (--otlp-endpoint or OTEL_*), but {e}: "
                             "pip install 'toolsrv[otel]'") from None
        self.traces = calls.sched.traces = Traces(o.otlp_endpoint, o.span_exporter)
