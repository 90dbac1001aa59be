"""`serve`'s options: the one table (SERVE_OPTIONS) that both argparse's parser
(_serve_parser, built only for -h or an unusual spelling) and the fast path
(parse_serve, plain words without argparse) read, and the App's Options made from them.
"""
from __future__ import annotations

from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from ..serve import dial

if TYPE_CHECKING:
    import argparse


def _dest(flags: tuple[str, ...], kw: dict[str, Any]) -> str:
    """The attribute an option sets, named as argparse names it."""
    if "dest" in kw:
        return str(kw["dest"])
    long = [f for f in flags if f.startswith("--")]
    return (long or list(flags))[0].lstrip("-").replace("-", "_")


def parse_serve(words: list[str]) -> SimpleNamespace | None:
    """`serve`'s words parsed from SERVE_OPTIONS without argparse, or None for argparse to
    parse: building this parser and parsing took 6 M instructions (2 ms) of the server's
    launch, and importing argparse 9.5 M more where nothing else imports it before the
    listener does (elevation.py does now).  Only the plain forms are taken here: an option
    spelled in full, its value as the next word or after `=`, a value not starting with `-`
    and of the option's type.  Anything else (an abbreviation, -h, a bad value, a stray
    word) goes to argparse, so its results, messages and help are the ones it always gave."""
    opts: dict[str, tuple[str, bool, bool, Any]] = {}
    values: dict[str, Any] = {}
    for flags, kw in SERVE_OPTIONS:
        dest = _dest(flags, kw)
        store_true = kw.get("action") == "store_true"
        default = kw.get("default", False if store_true else None)
        values[dest] = list(default) if isinstance(default, list) else default
        for f in flags:
            opts[f] = (dest, store_true, kw.get("action") == "append", kw.get("type", str))
    i = 0
    while i < len(words):
        flag, eq, value = words[i], "", ""
        if flag.startswith("--"):
            flag, eq, value = flag.partition("=")
        if flag not in opts:
            return None
        dest, store_true, append, typ = opts[flag]
        i += 1
        if store_true:
            if eq:
                return None
            values[dest] = True
            continue
        if not eq:
            if i == len(words) or words[i].startswith("-"):
                return None
            value, i = words[i], i + 1
        try:
            v = typ(value)
        except ValueError:
            return None
        if append:
            values[dest].append(v)
        else:
            values[dest] = v
    return SimpleNamespace(verb="serve", **values)


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

# `serve`'s options, in their order in the usage line, as argparse's add_argument takes
# them; "group": _LIMITS puts one in that group of the help.  parse_serve reads the same.
SERVE_OPTIONS: list[tuple[tuple[str, ...], dict[str, Any]]] = [
    (("-a", "--addr"), dict(action="append", default=[], help="listen on this dial string "
                            "(repeatable): unix!PATH, tcp!HOST!PORT or tls!HOST!PORT (with --tls-cert)")),
    (("--tools",), dict(help="tool search path, colon-separated (default: $OLLIE_TOOLS_PATH, "
                        "else ~/.config/ollie/tools then the bundled toolsrv/data/tools)")),
    (("--state",), dict(metavar="DIR", help="state directory")),
    (("--no-state",), dict(action="store_true", help="keep no state on disk")),
    (("-D",), dict(dest="trace", action="store_true", help="print every 9P message")),
    (("-v",), dict(dest="verbose", action="store_true", help="log more")),
    (("--msize",), dict(type=int, default=65536 + 24, help="the largest 9P message offered "
                        "at Tversion, bytes (default 65560: 64 KiB of data per read)")),
    (("--listen-any",), dict(action="store_true",
                             help="allow a non-loopback TCP address (needs --auth-secret)")),
    (("--allow-uid",), dict(type=int, action="append", default=[],
                            help="also accept Unix-socket peers with this uid (repeatable; "
                            "by default only the server's own uid)")),
    (("--timeout",), dict(type=float, default=30.0, help="a call's time limit, seconds "
                          "(default 30; a .meta's timeout or timeoutArg may lower it)")),
    (("--max-output",), dict(type=size, default=10 << 20, metavar="SIZE", help="bytes of a "
                             "call's stdout, and of its stderr, kept: past them the run is "
                             "killed and out (err) keeps the first SIZE (default 10M)")),
    (("--max-runs",), dict(type=int, default=16, help="concurrent tool runs, server-wide")),
    (("--max-runs-per-session",), dict(type=int, default=None, metavar="N", help="concurrent "
                                       "runs one session may hold (default: half of "
                                       "--max-runs; doc/toolsrv.4.md, Run slots)")),
    (("--max-runs-per-agent",), dict(type=int, default=None, metavar="N", help="concurrent "
                                     "runs one agent may hold (default: half of "
                                     "--max-runs-per-session)")),
    (("--run-as",), dict(default="nobody", help="the user tools run as when serving as root "
                         "(default nobody)")),
    (("--no-warm",), dict(action="store_true", help="start every Python tool cold (a fresh "
                          "interpreter per call; doc/performance.md, Warm starts)")),
    (("--revwait-timeout",), dict(type=float, default=60.0, help="seconds a read of revwait "
                                  "waits for the revision to move before it answers the "
                                  "same one (default 60)")),
    (("--auth-secret",), dict(metavar="FILE", help="TCP clients must prove this shared secret "
                              "(9P Tauth); a mode-600 file of at least 16 bytes; required "
                              "with --listen-any (but for tls! under --tls-client-ca)")),
    (("--tls-cert",), dict(metavar="FILE", help="the PEM certificate (chain) of the "
                           "tls!HOST!PORT listeners")),
    (("--tls-key",), dict(metavar="FILE", help="the PEM key of --tls-cert")),
    (("--tls-client-ca",), dict(metavar="FILE", help="mutual TLS: tls! clients must show a "
                                "certificate this CA signed; its subject names the peer")),
    (("--import",), dict(dest="imports", metavar="NAME=ADDR[,ca=F,cert=F,key=F,secret=F]",
                         action="append", default=[], help="serve the tools of the toolsrv "
                         "at ADDR as NAME.TOOL, its calls run there (repeatable; "
                         "doc/hosts.md)")),
    (("--import-own-secret",), dict(action="store_true", help="let an import prove this "
                                    "server's own --auth-secret (refused by default: a "
                                    "remote holding it may speak for this server's clients; "
                                    "give each remote a secret of its own)")),
    *[((flag,), dict(type=typ, default=default, help=f"{what} (default {default})",
                     group=_LIMITS)) for flag, typ, default, what in [
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
    (("--max-run-memory",), dict(type=size, default=None, metavar="SIZE", group=_LIMITS,
                                 help="memory of all runs together (the server's cgroup), "
                                 "e.g. 8G (default half of the host's memory, or of the "
                                 "server's own cgroup's limit)")),
    (("--max-warm-memory",), dict(type=size, default=None, metavar="SIZE", group=_LIMITS,
                                  help="memory the idle warm interpreters may hold together, "
                                  "as PSS, their standby children included (default an "
                                  "eighth of --max-run-memory, at most 256M)")),
    (("--audit",), dict(metavar="FILE", help="the audit trail's file (default audit.jsonl "
                        "in the state directory; none with --no-state unless given; "
                        "doc/operations.md)")),
    (("--no-audit",), dict(action="store_true", help="keep no audit trail")),
    (("--audit-args",), dict(action="store_true", help="write each call's args in its audit "
                             "record (by default only their SHA-256 and size)")),
    (("--audit-fsync",), dict(action="store_true", help="sync each audit record to disk "
                              "before its reply (by default it is written to the kernel: it "
                              "survives a kill of the server, not a power cut)")),
    (("--audit-max-size",), dict(type=size, default=64 << 20, metavar="SIZE", help="rotate "
                                 "the audit trail past SIZE (default 64M)")),
    (("--audit-keep",), dict(type=int, default=5, metavar="N", help="rotated audit files "
                             "kept (default 5)")),
    (("--metrics",), dict(metavar="HOST:PORT", help="also serve the root's metrics file "
                          "over HTTP here, for Prometheus (e.g. 127.0.0.1:9464; loopback "
                          "but with --listen-any)")),
    (("--otlp-endpoint",), dict(metavar="URL", help="a span per call to this OTLP/HTTP "
                                "collector (e.g. http://127.0.0.1:4318; the otel extra); "
                                "also OTEL_EXPORTER_OTLP_ENDPOINT; default none")),
    (("--mount",), dict(metavar="DIR", help="mount with 9pfuse on start, unmount on exit")),
    (("--uvloop",), dict(action="store_true", help="run on uvloop (the fast "
                         "extra; also TOOLSRV_UVLOOP=1)")),
]


def _serve_help() -> dict[str, str]:
    """The help of the options whose defaults depend on the environment, filled in here (only
    -h needs them: parse_serve never builds this parser)."""
    from ..dirs.statedir import default_state_dir, state_home
    addr, home = str(dial.default_addr()), state_home()
    state = default_state_dir(addr, str(dial.plan9port_default()))
    where = (f"default {home}; with another first -a, a subdirectory of it named for that "
             "address" if state == home else
             f"default here {state}, named for {addr}; {home} for plan9port's default address")
    return {"--addr": f"; default unix!$NAMESPACE/toolsrv, here {addr}",
            "--state": f" ({where}; kept across restarts, locked while serving)"}


def _serve_parser(s: argparse.ArgumentParser) -> None:
    lim = s.add_argument_group(_LIMITS)
    extra = _serve_help()
    for flags, kw in SERVE_OPTIONS:
        kw = dict(kw)
        more = next((extra[f] for f in flags if f in extra), "")
        if more:
            kw["help"] = (kw["help"] + more).replace("%", "%%")
        (lim if kw.pop("group", None) else s).add_argument(*flags, **kw)



def serve_options(args: Any) -> Any:
    """The App's Options from parsed `serve` arguments."""
    from ..app import Options
    return Options(addrs=args.addr, tools=args.tools.split(":") if args.tools else None,
                   state_dir=args.state, persist=not args.no_state, msize=args.msize,
                   trace=args.trace, listen_any=args.listen_any, allow_uids=args.allow_uid,
                   timeout=args.timeout, max_runs=args.max_runs, run_as=args.run_as,
                   revwait_timeout=args.revwait_timeout, auth_secret=args.auth_secret,
                   max_conns=args.max_conns, max_conns_per_peer=args.max_conns_per_peer,
                   max_fids=args.max_fids, max_inflight=args.max_inflight,
                   max_held=args.max_held,
                   frame_timeout=args.frame_timeout, max_sessions=args.max_sessions,
                   max_agents=args.max_agents, max_queued=args.max_queued,
                   max_args=args.max_args, warm=not args.no_warm,
                   max_run_memory=args.max_run_memory, max_run_pids=args.max_run_pids,
                   max_warm_memory=args.max_warm_memory, tls_cert=args.tls_cert,
                   tls_key=args.tls_key, tls_client_ca=args.tls_client_ca,
                   imports=args.imports, import_own_secret=args.import_own_secret,
                   max_runs_per_session=args.max_runs_per_session,
                   max_runs_per_agent=args.max_runs_per_agent,
                   max_output=args.max_output,
                   audit=None if args.no_audit else (args.audit or ""),
                   audit_args=args.audit_args, audit_fsync=args.audit_fsync,
                   audit_max_size=args.audit_max_size, audit_keep=args.audit_keep,
                   metrics=args.metrics, otlp_endpoint=args.otlp_endpoint)
