"""`serve`'s options and the Options record they make: each option declared once.

The table.  OPTIONS holds one `Opt` per `serve` flag, in the order of the usage line:
its spellings, the Options field it sets, its type, its default and its help (argparse's
other words, metavar and dest, ride along; "group": _LIMITS puts it in that group of the
help).  A bool flag is a switch (store_true), a flag whose default is a list may be
given again (append).  A flag that is the command's and not the server's (-v, --mount,
--uvloop, --no-audit) sets no field.

What is derived from it.
    cli/serveargs.py    argparse's parser (for -h and unusual spellings) and the fast
                        path (parse_serve) both read SERVE_OPTIONS, the table in
                        argparse's own terms
    Options             FIELDS, the constructor and its defaults (below)
    from_args           the Options of parsed `serve` arguments: each field is its flag's
                        value, or what the row's `get` makes of the arguments (--no-state:
                        persist False)

Options' defaults are what from_args makes of the flags' defaults, so `serve` with no
flag runs the server Options() describes (tests/cli/test_serveargs.py).  A field that no
flag sets (span_exporter, the tests' in-memory exporter) is in EXTRA.  The record's
fields are annotated at class level for the type checker: their names and order are
checked against the table there too.
"""
from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Callable

from .record import Record

_LIMITS = "limits (doc/reliability.md)"


def size(text: str) -> int:   # argparse: "invalid size value: 'foo'"
    """A size in bytes: a number, optionally followed by K, M, G or T (powers of 1024)."""
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}.get(t[-1:], 1)
    try:
        n = float(t[:-1] if mult > 1 else t)
    except ValueError:
        raise ValueError(f"not a size: {text!r} (say e.g. 8G or 512M)") from None
    if n <= 0:
        raise ValueError(f"not a size: {text!r} (must be above 0)")
    return int(n * mult)


class Opt:
    """One `serve` flag: see the module's doc.  `dest` is the attribute argparse sets
    (named from the flags unless given); `get(args)`, when given, makes the field's value
    from the parsed arguments."""

    __slots__ = ("flags", "field", "type", "default", "help", "dest", "kw", "get")

    def __init__(self, flags: tuple[str, ...], field: str | None, type: Callable[[str], Any],
                 default: Any, help: str, get: Callable[[Any], Any] | None = None,
                 dest: str | None = None, **kw: Any) -> None:
        self.flags, self.field, self.type, self.default = flags, field, type, default
        self.help, self.get, self.kw = help, get, kw
        long = [f for f in flags if f.startswith("--")]
        self.dest = dest or (long or list(flags))[0].lstrip("-").replace("-", "_")

    def argparse(self) -> dict[str, Any]:
        """add_argument's keywords (but the flags)."""
        kw: dict[str, Any] = {}
        if self.dest != self.flags[-1].lstrip("-").replace("-", "_"):
            kw["dest"] = self.dest
        if self.type is bool:
            kw["action"] = "store_true"
        elif isinstance(self.default, list):
            kw["action"] = "append"
        if self.type not in (bool, str):
            kw["type"] = self.type
        if self.default not in (None, False):
            kw["default"] = self.default
        return {**kw, **self.kw, "help": self.help}


OPTIONS: list[Opt] = [
    Opt(("-a", "--addr"), "addrs", str, [], "listen on this dial string (repeatable): "
        "unix!PATH, tcp!HOST!PORT or tls!HOST!PORT (with --tls-cert)"),
    Opt(("--tools",), "tools", str, None, "tool search path, colon-separated (default: "
        "$OLLIE_TOOLS_PATH, else ~/.config/ollie/tools then the bundled tools)",
        get=lambda a: a.tools.split(":") if a.tools else None),
    Opt(("--state",), "state_dir", str, None, "state directory", metavar="DIR"),
    Opt(("--no-state",), "persist", bool, False, "keep no state on disk",
        get=lambda a: not a.no_state),
    Opt(("-D",), "trace", bool, False, "print every 9P message", dest="trace"),
    Opt(("-v",), None, bool, False, "log more", dest="verbose"),
    Opt(("--msize",), "msize", int, 65536 + 24, "the largest 9P message offered at "
        "Tversion, bytes (default 65560: 64 KiB of data per read)"),
    Opt(("--listen-any",), "listen_any", bool, False,
        "allow a non-loopback TCP address (needs --auth-secret)"),
    Opt(("--allow-uid",), "allow_uids", int, [], "also accept Unix-socket peers with this "
        "uid (repeatable; by default only the server's own uid)"),
    Opt(("--timeout",), "timeout", float, 30.0, "a call's time limit, seconds (default 30; "
        "a .meta's timeout or timeoutArg may lower it)"),
    Opt(("--max-output",), "max_output", size, 10 << 20, "bytes of a call's stdout, and of "
        "its stderr, kept: past them the run is killed and out (err) keeps the first SIZE "
        "(default 10M)", metavar="SIZE"),
    Opt(("--max-runs",), "max_runs", int, 16, "concurrent tool runs, server-wide"),
    Opt(("--max-runs-per-session",), "max_runs_per_session", int, None, "concurrent runs "
        "one session may hold (default: half of --max-runs; doc/toolsrv.4.md, Run slots)",
        metavar="N"),
    Opt(("--max-runs-per-agent",), "max_runs_per_agent", int, None, "concurrent runs one "
        "agent may hold (default: half of --max-runs-per-session)", metavar="N"),
    Opt(("--run-as",), "run_as", str, "nobody",
        "the user tools run as when serving as root (default nobody)"),
    Opt(("--no-warm",), "warm", bool, False, "start every Python tool cold (a fresh "
        "interpreter per call; doc/performance.md, Warm starts)", get=lambda a: not a.no_warm),
    Opt(("--revwait-timeout",), "revwait_timeout", float, 60.0, "seconds a read of revwait "
        "waits for the revision to move before it answers the same one (default 60)"),
    Opt(("--auth-secret",), "auth_secret", str, None, "TCP clients must prove this shared "
        "secret (9P Tauth); a mode-600 file of at least 16 bytes; required with "
        "--listen-any (but for tls! under --tls-client-ca)", metavar="FILE"),
    Opt(("--tls-cert",), "tls_cert", str, None,
        "the PEM certificate (chain) of the tls!HOST!PORT listeners", metavar="FILE"),
    Opt(("--tls-key",), "tls_key", str, None, "the PEM key of --tls-cert", metavar="FILE"),
    Opt(("--tls-client-ca",), "tls_client_ca", str, None, "mutual TLS: tls! clients must "
        "show a certificate this CA signed; its subject names the peer", metavar="FILE"),
    Opt(("--import",), "imports", str, [], "serve the tools of the toolsrv at ADDR as "
        "NAME.TOOL, its calls run there (repeatable; doc/hosts.md)", dest="imports",
        metavar="NAME=ADDR[,ca=F,cert=F,key=F,secret=F]"),
    Opt(("--import-own-secret",), "import_own_secret", bool, False, "let an import prove "
        "this server's own --auth-secret (refused by default: a remote holding it may speak "
        "for this server's clients; give each remote a secret of its own)"),
    *[Opt((flag,), flag[2:].replace("-", "_"), typ, default, f"{what} (default {default})",
          group=_LIMITS) for flag, typ, default, what in [
        ("--max-conns", int, 512, "connections, server-wide"),
        ("--max-conns-per-peer", int, 256, "connections per uid (Unix) or host (TCP)"),
        ("--max-fids", int, 4096, "fids per connection"),
        ("--max-inflight", int, 256, "outstanding requests per connection"),
        ("--max-held", int, 64 << 20, "bytes a connection's fids may hold: unfinished "
         "writes and read snapshots"),
        ("--frame-timeout", float, 60.0, "seconds a partial frame may stall"),
        ("--max-sessions", int, 10000, "sessions"),
        ("--max-agents", int, 256, "agents per session"),
        ("--max-queued", int, 1024, "calls waiting for a run slot"),
        ("--max-args", int, 1 << 20, "bytes of one call's JSON args"),
        ("--max-run-pids", int, 4096, "processes of all runs together (the server's "
         "cgroup)")]],
    Opt(("--max-run-memory",), "max_run_memory", size, None, "memory of all runs together "
        "(the server's cgroup), e.g. 8G (default half of the host's memory, or of the "
        "server's own cgroup's limit)", metavar="SIZE", group=_LIMITS),
    Opt(("--max-warm-memory",), "max_warm_memory", size, None, "memory the idle warm "
        "interpreters may hold together, as PSS, their standby children included (default "
        "an eighth of --max-run-memory, at most 256M)", metavar="SIZE", group=_LIMITS),
    Opt(("--audit",), "audit", str, None, "the audit trail's file (default audit.jsonl in "
        "the state directory; none with --no-state unless given; doc/operations.md)",
        get=lambda a: None if a.no_audit else (a.audit or ""), metavar="FILE"),
    Opt(("--no-audit",), None, bool, False, "keep no audit trail"),
    Opt(("--audit-args",), "audit_args", bool, False, "write each call's args in its audit "
        "record (by default only their SHA-256 and size)"),
    Opt(("--audit-fsync",), "audit_fsync", bool, False, "sync each audit record to disk "
        "before its reply (by default it is written to the kernel: it survives a kill of "
        "the server, not a power cut)"),
    Opt(("--audit-max-size",), "audit_max_size", size, 64 << 20,
        "rotate the audit trail past SIZE (default 64M)", metavar="SIZE"),
    Opt(("--audit-keep",), "audit_keep", int, 5, "rotated audit files kept (default 5)",
        metavar="N"),
    Opt(("--metrics",), "metrics", str, None, "also serve the root's metrics file over "
        "HTTP here, for Prometheus (e.g. 127.0.0.1:9464; loopback but with --listen-any)",
        metavar="HOST:PORT"),
    Opt(("--otlp-endpoint",), "otlp_endpoint", str, None, "a span per call to this "
        "OTLP/HTTP collector (e.g. http://127.0.0.1:4318; the otel extra); also "
        "OTEL_EXPORTER_OTLP_ENDPOINT; default none", metavar="URL"),
    Opt(("--policy",), "policy", str, None, "who may load and call which tools, and how "
        "often: this policy.yaml (default ~/.config/ollie/policy.yaml when it is there; "
        "doc/sandbox.md, Policy)", metavar="FILE"),
    Opt(("--mount",), None, str, None, "mount with 9pfuse on start, unmount on exit",
        metavar="DIR"),
    Opt(("--uvloop",), None, bool, False,
        "run on uvloop (the fast extra; also TOOLSRV_UVLOOP=1)"),
]
EXTRA: dict[str, Any] = {"span_exporter": None}   # fields no flag sets, and their defaults
_SET = [o for o in OPTIONS if o.field is not None]


def _fields(args: Any) -> dict[str, Any]:
    return {o.field: getattr(args, o.dest) if o.get is None else o.get(args)
            for o in _SET if o.field is not None}


def from_args(args: Any) -> Options:
    """The Options of parsed `serve` arguments (argparse's or parse_serve's namespace)."""
    return Options(**_fields(args))


def flag_defaults() -> SimpleNamespace:
    """The namespace `serve` with no flag parses to (but its verb)."""
    return SimpleNamespace(**{o.dest: list(o.default) if isinstance(o.default, list)
                              else o.default for o in OPTIONS})


class _Signed(type):
    """Options' metaclass: inspect.signature(Options) names FIELDS with their defaults, as
    a written-out __init__'s would (tests/test_record.py).  Made when asked: importing
    inspect would cost every `toolsrv` command 7 ms at start."""

    @property
    def __signature__(cls) -> Any:
        import inspect
        kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
        return inspect.Signature([inspect.Parameter(n, kind, default=d)
                                  for n, d in _DEFAULTS.items()])


class Options(Record, metaclass=_Signed):
    """What one server process is started with: a field per `serve` flag that the server
    reads (OPTIONS, whose help says what each means), and EXTRA.  Options(**fields),
    positionally too in FIELDS' order; the rest take their defaults (the module's doc)."""

    FIELDS = tuple(o.field for o in _SET if o.field is not None) + tuple(EXTRA)

    addrs: list[str]                # dial strings; empty: the default address
    tools: list[str] | None         # the search path; None: $OLLIE_TOOLS_PATH or defaults
    state_dir: str | None
    persist: bool                   # --no-state: False
    trace: bool
    msize: int
    listen_any: bool
    allow_uids: list[int]
    timeout: float
    max_output: int                 # bytes of a run's stdout, and of its stderr, kept
    max_runs: int
    max_runs_per_session: int | None   # fair shares of max_runs (tree/calls/slots.py);
    max_runs_per_agent: int | None     # None: half of max_runs, half of that
    run_as: str | None
    warm: bool                      # --no-warm: False
    revwait_timeout: float
    auth_secret: str | None         # the file holding the TCP shared secret
    tls_cert: str | None            # PEM files of the tls! listeners (serve/tls.py)
    tls_key: str | None
    tls_client_ca: str | None
    imports: list[str]              # NAME=ADDR[,...]
    import_own_secret: bool
    max_conns: int                  # the limits (doc/reliability.md): each hit answers a
    max_conns_per_peer: int         # clear Rerror
    max_fids: int
    max_inflight: int
    max_held: int
    frame_timeout: float
    max_sessions: int
    max_agents: int
    max_queued: int
    max_args: int
    max_run_pids: int
    max_run_memory: int | None      # all runs, the server's cgroup (run/kernel/cgroups.py);
    max_warm_memory: int | None     # None: default_total_memory(); WarmPool.budget()
    audit: str | None               # its file; "": the state directory's audit.jsonl (none
                                    # with --no-state); None: none (--no-audit)
    audit_args: bool
    audit_fsync: bool
    audit_max_size: int
    audit_keep: int
    metrics: str | None             # HOST:PORT of the metrics over HTTP; None: none
    otlp_endpoint: str | None       # traces (serve/traces.py): OTLP/HTTP to this URL, or
                                    # to span_exporter; else as OTEL_* say, or none
    policy: str | None              # policy.yaml (tree/policy/); None: the default place
    span_exporter: Any              # the SpanExporter of traces (the tests' in-memory one)

    def __init__(self, *args: Any, **kw: Any) -> None:
        if len(args) > len(self.FIELDS):
            raise TypeError(f"Options() takes {len(self.FIELDS)} fields, not {len(args)}")
        for name, value in zip(self.FIELDS, args):
            if name in kw:
                raise TypeError(f"Options() got multiple values for {name!r}")
            kw[name] = value
        for name, default in _DEFAULTS.items():
            value = kw.pop(name, _DEFAULTS)
            if value is _DEFAULTS:
                value = list(default) if isinstance(default, list) else default
            setattr(self, name, value)
        if kw:
            raise TypeError(f"Options() got an unexpected keyword argument {min(kw)!r}")


_DEFAULTS: dict[str, Any] = {**_fields(flag_defaults()), **EXTRA}   # in FIELDS' order
