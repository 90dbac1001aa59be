"""The server process: wires the registry, session store, runner and tree to
listeners, and runs until SIGTERM/SIGINT.

Start-up order: what answering 9P needs, then listeners opened, then what only
tool calls need.  Runner made (its launcher process not started yet), registry
(initial scan, then watching), the state directory locked (statedir.py: a
second server on it is refused), session state restored, listeners opened; then
the launcher started (calls arriving meanwhile wait for it), then jsonschema
imported in a worker thread.  Imports not needed to answer the first request
are deferred to where they are used (doc/performance.md, Start-up).
Shutdown is graceful: stop accepting, hang up connections (their calls are
cancelled), kill every run, save state, release the state lock, remove the Unix
socket, exit 0 (1, saying why, when that last save fails).

Where things are kept is dirs/layout.py's (the state directory, the work base and
its nostate/ directories, each proved ours before serving, or the server refuses to
start and says what is wrong).

Who gets in (SECURITY.md) is serve/peers.py's: a Unix-socket peer must have the
server's uid or one allowed by --allow-uid, and must not be one of our own tool
processes; a TCP peer must prove the shared secret (auth.py) when --auth-secret is
given, which --listen-any requires; a TLS peer (serve/tls.py) too, and under mutual TLS
its certificate alone may stand for the secret.  A tool whose profile asks for it gets
a connection of its own, scoped to its agent (serve/peers.py Internal).
Every limit of reliability.md is a `serve` flag and an Options field, declared once
(options.py).
"""
from __future__ import annotations

import asyncio
import logging
import os
import resource
import signal
import sys
from typing import Any

from .dirs import bundled
from .dirs.layout import sweep, work_dir
from .dirs.serverdir import ServerDir
from .options import Options       # serve's options, declared once
from .record import replace
from .serve import dial
from .serve.server import ServerConfig
from .serve.peers import Internal, PeerPolicy
from .serve.loopwatch import LoopWatch
from .serve.transport import Gate, NinePProtocol, check_free, listen
from .tree.root import ToolsrvFS
from .tree.state.sessions import SessionStore

log = logging.getLogger("toolsrv")

BUNDLED_TOOLS = bundled.TOOLS         # the bundled tools (dirs/bundled.py)


def _warm_imports() -> None:
    import jsonschema.validators  # noqa: F401  (jsonargs imports it lazily)
    from .registry import schemaref
    schemaref.registry()          # the refusing registry every validator is built with


def default_tools_path() -> list[str]:
    """$OLLIE_TOOLS_PATH, else the user's tools followed by the bundled ones."""
    env = os.environ.get("OLLIE_TOOLS_PATH")
    if env:
        return [p for p in env.split(":") if p]
    return [os.path.expanduser("~/.config/ollie/tools"), BUNDLED_TOOLS]


def _refuse_own_secret(specs: list[Any], own: bytes) -> None:
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


def raise_fd_limit() -> None:
    """Connections and runs are fds: take the hard limit as our soft one."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = hard if hard != resource.RLIM_INFINITY else 1 << 16
    if soft != resource.RLIM_INFINITY and soft < want:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
        except (ValueError, OSError):
            pass


class App:
    def __init__(self, opts: Options) -> None:
        self.opts = opts
        self.stopping = asyncio.Event()
        self.servers: list[asyncio.AbstractServer] = []
        self.unix_paths: list[str] = []
        self.conns: set[NinePProtocol] = set()
        self.addrs = [dial.parse(a) for a in opts.addrs] or [dial.default_addr()]
        self.runner: Any = None
        self.calls: Any = None
        self.searcher: Any = None
        self.nostate: ServerDir | None = None   # the work base's nostate/ (dirs/layout.py)
        self._sweeping: asyncio.Future[None] | None = None
        self.lock: Any = None         # statedir.StateLock, held while serving with state
        self.stop_error: str | None = None   # why stop() failed (the final save): exit 1
        self.hosts: Any = None        # hosts.Hosts: the imports of other hosts' trees
        self.internal = Internal()    # the connections tools are given (serve/peers.py)
        self.watch: LoopWatch | None = None   # the loop's lag, in /status (loopwatch.py)
        self.audit: Any = None        # state/audit.Audit: the trail, None without one
        self.metrics: Any = None      # serve/metrics.Metrics: the root's metrics file
        self.metrics_port: int | None = None   # where --metrics listens
        self.traces: Any = None       # serve/traces.Traces, when spans are exported
        self.policy: Any = None       # tree/policy/gate.PolicyGate: policy.yaml, the blocks

    def _make_registry(self) -> Any:
        from .registry.registry import Registry
        return Registry(self.opts.tools if self.opts.tools is not None else default_tools_path())

    def _make_searcher(self) -> Any:
        """tools/search's index: made now (it follows the registry from here on), built
        and its model loaded on the first search, never at start-up."""
        from .registry.search.index import SearchIndex
        from .tree.searchfile import Searcher
        return Searcher(SearchIndex(self.registry))

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

    def _tls_context(self) -> Any:
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

    async def start(self) -> None:
        self._catch_signals()  # a SIGTERM from here on stops the server cleanly, even one
        try:                   # that comes before run() (between the banner and the loop)
            await self._start()
        except BaseException:         # a server that does not start holds no state lock
            self._unlock()
            raise

    async def _start(self) -> None:
        opts = self.opts
        raise_fd_limit()
        unix_config, tcp_config = self._configs()
        tls_context = self._tls_context()
        specs: list[Any] = []
        if opts.imports:
            from .hosts.imports import Spec
            specs = [Spec.parse(i) for i in opts.imports]     # ValueError: a bad --import
        if tcp_config.auth is not None and not opts.import_own_secret:
            _refuse_own_secret(specs, tcp_config.auth.secret)
        self.runner, tool_uid = self._make_runner()
        state = self._state_dir()
        work = work_dir(state, tool_uid,         # proves the state directory ours, too
                        lambda kept: setattr(self, "nostate", kept))
        for a in self.addrs:           # a clash of addresses first: then the state's lock
            check_free(a)
        self._lock_state(state)
        if self.runner is not None:
            self.runner.check()         # its scratch base, proved ours like the others
            self.runner.config.hidden = (work.path,)   # the sessions' cwds: elevated runs
            #                                            see only their own (doc/sandbox.md)
        self.registry = self._make_registry()
        await self.registry.start()
        self.store = SessionStore(state, work, tool_uid, self._check_profile,
                                  max_sessions=opts.max_sessions, max_agents=opts.max_agents)
        self.store.sweep_temp()        # the directory is locked: no live server's temp files
        for problem in self.store.restore():
            print(f"toolsrv: {problem}", file=sys.stderr)
        self.store.start_writer()      # state saves from now on off the event loop, grouped
        self.searcher = self._make_searcher()
        self.fs = ToolsrvFS(self.registry, self.store, revwait_timeout=opts.revwait_timeout,
                            status=self._status_text if hasattr(self.runner, "status_text")
                            else None,
                            searcher=self.searcher)
        self._start_calls()
        self._start_hosts(specs, state)
        launcher = lambda: getattr(getattr(self.runner, "launcher", None), "zygote_pid", None)
        self.gate = Gate(opts.max_conns, opts.max_conns_per_peer,
                         PeerPolicy(opts.allow_uids, launcher).peer_check)
        self._start_audit(state)
        self._start_policy(state)
        self._start_metrics()
        self._start_traces()

        def factory(config: ServerConfig) -> Any:
            return lambda: NinePProtocol(self.fs, config, self.conns, self.gate,
                                         opts.frame_timeout)

        self.internal.serve_with(factory, unix_config)
        for i, a in enumerate(self.addrs):
            f = factory(unix_config if a.kind == "unix" else tcp_config)
            srv = await listen(a, f, allow_nonloopback=opts.listen_any, ssl=tls_context)
            self.servers.append(srv)
            if a.kind == "unix":
                self.unix_paths.append(a.path)
            elif a.port == 0 and srv.sockets:       # tcp!host!0: say the port we got
                self.addrs[i] = dial.Addr(a.kind, host=a.host,
                                          port=srv.sockets[0].getsockname()[1])
        if self.lock is not None:                   # the addresses, a port 0 resolved
            self.lock.update([str(a) for a in self.addrs])
        self.watch = LoopWatch().start()
        # Serving already.  Now the launcher (a process of its own: started sooner, it takes
        # a CPU from the start-up on a busy machine); calls arriving meanwhile wait for it
        # in Runner.run.  Then the call validator's library, off the loop, before a call
        # needs it; not sooner: the import holds the GIL, and the first requests would
        # wait for it (up to the 5 ms switch interval per reply).
        if self.runner is not None:
            await self.runner.start()
        loop = asyncio.get_running_loop()
        loop.run_in_executor(None, _warm_imports)
        if self.nostate is not None:
            self._sweeping = loop.run_in_executor(None, sweep, self.nostate)

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

    def _make_runner(self) -> tuple[Any, tuple[int, int] | None]:
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

    def _run_limits(self) -> dict:
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

    def _check_profile(self, name: str) -> None:
        from .run.sandbox import load_profile
        load_profile(name)

    def _status_text(self) -> str:
        """/status: the runner's figures, the resident processes, the loop's lag."""
        text = self.runner.status_text()
        if self.calls is not None:
            text += self.calls.sched.residents.status_text()
        return text + (self.watch.status_line() if self.watch is not None else "")

    def _start_calls(self) -> None:
        from .tree.agent import AgentFiles
        from .tree.calls.apply import Calls
        o = self.opts
        self.calls = Calls(self.registry, self.store, self.runner, max_runs=o.max_runs,
                           max_queued=o.max_queued, addr=str(self.addrs[0]),
                           connect=self.internal.connect, per_session=o.max_runs_per_session,
                           per_agent=o.max_runs_per_agent, max_args=o.max_args,
                           timeout=o.timeout)
        self.fs.agent_files = AgentFiles(self.calls, self.searcher)
        self.fs.call_timeout = o.timeout      # tools/<tool>/meta states it

    def _start_hosts(self, specs: list[Any], state: str | None) -> None:
        """The imports (toolsrv/hosts): their tools join the registry as they answer.  With
        none to make (no --import, none kept in the state), made on the first hosts/ctl
        write (ctlfile.Lazy)."""
        from .hosts.ctlfile import STATE_FILE, Lazy, hosts_dir

        def make() -> Any:
            from .hosts.hosts import Hosts
            hosts = Hosts(self.registry, specs, state)
            hosts.start()
            return hosts
        kept = state is not None and os.path.exists(os.path.join(state, STATE_FILE))
        self.hosts = make() if specs or kept else Lazy(make)
        self.fs.add_root(hosts_dir(self.fs, self.hosts))
        self.store.on_remove_agent.append(lambda a: self.hosts.forget(
            a, self.store.sessions.get(a.session.name) is not a.session))
        self.store.on_remove_session.append(lambda s: self.hosts.forget_session(s.name))

    def audit_path(self, state: str | None) -> str | None:
        """Where the trail goes: --audit FILE, else the state directory's audit.jsonl;
        None with --no-audit, or --no-state and no --audit."""
        from .tree.state.audit import FILE
        if self.opts.audit is None:
            return None
        return self.opts.audit or (os.path.join(state, FILE) if state is not None else None)

    def _start_audit(self, state: str | None) -> None:
        """The trail, opened (an OSError stops the start) and handed to its hooks."""
        path = self.audit_path(state)
        if path is None:
            return
        from .tree.state.audit import Audit
        o = self.opts
        self.audit = Audit(path, o.audit_max_size, o.audit_keep, o.audit_args,
                           o.audit_fsync).open()
        self.audit.approver = "broker at " + str(self.runner.config.bypass_socket) \
            if self.runner is not None else ""
        self.fs.audit = self.calls.sched.audit = self.audit
        self.gate.on_refuse = self.audit.connection_refused

    def _start_policy(self, state: str | None) -> None:
        """policy.yaml (--policy FILE, else ~/.config/ollie/policy.yaml) and the kill switch's
        blocks (kept in the state directory): a broken file stops the start (ValueError)."""
        from .tree.policy.files import add_files
        from .tree.policy.gate import PolicyGate
        g = self.policy = PolicyGate(self.opts.policy, state)
        g.audit = self.audit
        g.load()
        g.sched = self.calls.sched
        g.broker = self.runner.config.bypass_socket if self.runner is not None else None
        self.calls.policy = self.fs.policy = g
        add_files(self.fs, g)
        g.start()

    def _start_metrics(self) -> None:
        """The root's metrics file, and --metrics HOST:PORT (loopback but for --listen-any:
        the tools' names and how they are used are the server's business)."""
        from .serve.metrics import Metrics, parse_listen
        from .tree.node import TextFile
        m = self.metrics = Metrics(self, asyncio.get_running_loop())
        self.calls.sched.metrics = m
        self.fs.add_root(TextFile("metrics", self.fs.q("metrics"), self.fs.root, m.text))
        if self.opts.metrics:
            host, port = parse_listen(self.opts.metrics)
            if not (self.opts.listen_any or dial.Addr("tcp", host=host, port=port)
                    .is_loopback()):
                raise ValueError(f"--metrics {self.opts.metrics}: not a loopback address "
                                 "(give --listen-any to serve the metrics beyond this host)")
            self.metrics_port = m.serve_http(host, port)

    def _start_traces(self) -> None:
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
        self.traces = self.calls.sched.traces = Traces(o.otlp_endpoint, o.span_exporter)

    def _trace(self, line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    def _catch_signals(self) -> None:
        """SIGTERM and SIGINT set `stopping` (main thread only: a server in a thread, as in
        the tests, is stopped by its owner)."""
        loop = asyncio.get_running_loop()
        try:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self.stopping.set)
        except (ValueError, RuntimeError):
            pass

    async def run(self) -> None:
        self._catch_signals()
        await self.stopping.wait()
        await self.stop()

    async def stop(self) -> None:
        if self.watch is not None:
            self.watch.stop()
        for s in self.servers:
            s.close()
        for p in list(self.conns):
            p.close()
            if p.conn is not None:
                p.conn.hangup()
        if self.hosts is not None:
            await self.hosts.close()
        if self.calls is not None:
            await self.calls.close()
        if self.runner is not None:
            await self.runner.close()
        await self.registry.close()
        if self.policy is not None:
            await self.policy.close()
        if self.searcher is not None:
            self.searcher.close()
        await self.store.stop_writer()
        if not self.store.save():
            self.stop_error = (f"state not saved at stop: {self.store.save_error} "
                               "(the state saved before it is kept)")
            print(f"toolsrv: {self.stop_error}", file=sys.stderr, flush=True)
        self._unlock()
        if self._sweeping is not None:   # its thread uses nostate's fd: not closed under it
            await asyncio.wait({self._sweeping}, timeout=10)
        if self.nostate is not None and (self._sweeping is None or self._sweeping.done()):
            self.nostate.close()      # claimed without state: nothing will restore its cwds
            self.nostate.base.close()
        self.store.close()
        if self.audit is not None:
            self.audit.close()
        if self.metrics is not None:      # off the loop: a scrape may be waiting on it
            await asyncio.to_thread(self.metrics.close)
        if self.traces is not None:       # the batch sent: off the loop
            await asyncio.to_thread(self.traces.close)
        for path in self.unix_paths:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
        for s in self.servers:
            try:
                await asyncio.wait_for(s.wait_closed(), 2)
            except (asyncio.TimeoutError, Exception):
                pass
