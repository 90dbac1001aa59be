"""The server process: its parts made in order (wiring.py), listened on, and run until
SIGTERM/SIGINT.

Start-up order.  What answering 9P needs, then listeners opened, then what only tool
calls need.  Runner made (its launcher process not started yet), registry (initial
scan, then watching), the state directory locked (statedir.py: a second server on it
is refused), session state restored, listeners opened; then the launcher started (calls
arriving meanwhile wait for it), then jsonschema imported in a worker thread.  Imports
not needed to answer the first request are deferred to where they are used
(doc/performance.md, Start-up).

Shutdown.  Graceful: stop accepting, hang up connections (their calls are cancelled),
kill every run, save state, release the state lock, remove the Unix socket, exit 0 (1,
saying why, when that last save fails).

What each part is, who gets in and where things are kept: wiring.py.  Every limit of
reliability.md is a `serve` flag and an Options field, declared once (options.py).
"""
from __future__ import annotations

import asyncio
import os
import resource
import signal
import sys
from typing import TYPE_CHECKING, Any, Callable

from .dirs.layout import sweep, work_dir
from .options import Options       # serve's options, declared once
from .serve import dial
from .serve.server import ServerConfig
from .serve.loopwatch import LoopWatch
from .serve.transport import NinePProtocol, check_free, listen
from .wiring import Parts, refuse_own_secret

if TYPE_CHECKING:
    from .tree.calls.apply import Calls


def _warm_imports() -> None:
    import jsonschema.validators  # noqa: F401  (jsonargs imports it lazily)
    from .registry import schemaref
    schemaref.registry()          # the refusing registry every validator is built with


def raise_fd_limit() -> None:
    """Connections and runs are fds: take the hard limit as our soft one."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = hard if hard != resource.RLIM_INFINITY else 1 << 16
    if soft != resource.RLIM_INFINITY and soft < want:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
        except (ValueError, OSError):
            pass


class App(Parts):
    """One server: its Parts (wiring.py), started in order, listened on, stopped."""

    def __init__(self, opts: Options) -> None:
        super().__init__(opts)
        self.stopping = asyncio.Event()
        self.servers: list[asyncio.Server] = []
        self.unix_paths: list[str] = []
        self._sweeping: asyncio.Future[None] | None = None
        self.stop_error: str | None = None   # why stop() failed (the final save): exit 1
        self.policy: Any = None       # tree/policy/gate.PolicyGate: policy.yaml, the blocks

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
        specs = self._import_specs()
        if tcp_config.auth is not None and not opts.import_own_secret:
            refuse_own_secret(specs, tcp_config.auth.secret)
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
        self.store = self._make_store(state, work, tool_uid)
        self.store.sweep_temp()        # the directory is locked: no live server's temp files
        for problem in self.store.restore():
            print(f"toolsrv: {problem}", file=sys.stderr)
        self.store.start_writer()      # state saves from now on off the event loop, grouped
        self.searcher = self._make_searcher()
        self.fs = self._make_fs(opts.revwait_timeout)
        calls = self._start_calls()
        self._start_hosts(specs, state)
        self.gate = self._make_gate()
        self._start_audit(state, calls)
        if self.audit is not None and tcp_config.auth is not None:   # a failed proof, too
            tcp_config.auth.on_refuse = self.audit.connection_refused
        self._start_policy(state, calls)
        self._start_metrics(calls)
        self._start_traces(calls)

        def factory(config: ServerConfig) -> Callable[[], NinePProtocol]:
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

    def _start_policy(self, state: str | None, calls: Calls) -> None:
        """policy.yaml (--policy FILE, else ~/.config/ollie/policy.yaml) and the kill switch's
        blocks (kept in the state directory): a broken file stops the start (ValueError)."""
        from .tree.policy.consent import add_file as add_consent
        from .tree.policy.files import add_files
        from .tree.policy.gate import PolicyGate
        g = self.policy = PolicyGate(self.opts.policy, state)
        g.audit = self.audit
        g.load()
        g.sched = calls.sched
        g.broker = self.runner.config.bypass_socket if self.runner is not None else None
        calls.policy = self.fs.policy = g
        add_files(self.fs, g)
        add_consent(self.fs)                # /consent: a connection's own broker
        g.start()

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
