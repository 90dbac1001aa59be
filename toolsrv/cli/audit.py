"""`toolsrv audit`: the audit trail read as a table, or as JSON Lines for a pipeline.

The file is found as `serve` finds it: --audit FILE, else audit.jsonl in the state
directory of --state DIR, else in the one `serve -a ADDR` would use (dirs/statedir.py),
whether a server runs there or not.  Rotated files (audit.jsonl.N, oldest the highest)
are read first.  -f follows the file as a server appends to it, across rotations.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from typing import Any, Iterator

from ..dirs.statedir import default_state_dir
from ..serve import dial
from ..tree.state.audit import FILE, stamp

COLUMNS = ("TIME", "WHO", "SESSION/AGENT", "WHAT", "OUTCOME", "SECONDS", "OUT")
_SPAN = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="toolsrv audit", description="print the audit trail "
                                "of the server at ADDR (or of --state DIR, or --audit FILE): "
                                "every call, session, agent, ctl command and refused "
                                "connection, oldest first")
    p.add_argument("-a", "--addr", default=os.environ.get("TOOLSRV_ADDR"),
                   help="the server's first address, as given to serve -a (default "
                   "$TOOLSRV_ADDR, else unix!$NAMESPACE/toolsrv)")
    p.add_argument("--state", metavar="DIR", help="the server's state directory")
    p.add_argument("--audit", metavar="FILE", help="the trail's file, as given to serve")
    p.add_argument("-f", dest="follow", action="store_true",
                   help="print records as they are written, until interrupted")
    p.add_argument("--since", metavar="T", help="records from T on: a UTC time "
                   "(2026-12-05T04:00, or a prefix of one) or an age (30s, 10m, 2h, 1d)")
    p.add_argument("--agent", metavar="A", help="records of agent A (a name, or SESSION/AGENT)")
    p.add_argument("--tool", metavar="T", help="records of tool T")
    p.add_argument("--json", action="store_true", help="JSON Lines, as written")
    return p


def trail_path(args: Any) -> str:
    if args.audit:
        return str(args.audit)
    state = args.state
    if not state:
        addr = dial.parse(args.addr) if args.addr else dial.default_addr()
        state = default_state_dir(str(addr), str(dial.plan9port_default()))
    return os.path.join(state, FILE)


def since(text: str | None, now: float | None = None) -> str | None:
    """The earliest time stamp wanted, in the trail's own form (they sort as text)."""
    if not text:
        return None
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([smhd])", text.strip())
    if m:
        return stamp((time.time() if now is None else now) - float(m[1]) * _SPAN[m[2]])
    t = text.strip().replace(" ", "T")
    if not re.fullmatch(r"\d{4}-\d\d-\d\d(T\d\d(:\d\d(:\d\d(\.\d+)?)?)?)?Z?", t):
        raise ValueError(f"--since {text!r}: not a time (2026-12-05T04:00) nor an age (10m)")
    return t.rstrip("Z")


def wanted(rec: dict, args: Any, start: str | None) -> bool:
    if start is not None and str(rec.get("time", "")) < start:
        return False
    if args.tool and rec.get("tool") != args.tool:
        return False
    if args.agent:
        s, _, a = args.agent.rpartition("/")
        if rec.get("agent") != a or (s and rec.get("session") != s):
            return False
    return True


def who(p: Any) -> str:
    if not isinstance(p, dict):
        return "-"
    kind = p.get("kind")
    if kind == "unix":
        text = f"uid {p.get('uid')}"
    elif kind == "tls":
        text = str(p.get("subject") or p.get("host"))
    else:
        text = str(p.get("host") or kind or "-")
    if p.get("on_behalf_of"):
        text = f"{p['on_behalf_of']} via {text}"
    return text + (" (tool)" if p.get("via") == "tool" else "")


def row(rec: dict) -> list[str]:
    ev = rec.get("event")
    where = "/".join(str(rec[k]) for k in ("session", "agent") if rec.get(k) is not None)
    if ev == "call":
        what = str(rec.get("tool")) + (" elevated" if rec.get("elevated") else "")
        if rec.get("parent"):
            what += f" (child of {rec['parent']})"
        out = str(rec.get("outcome"))
        if out == "exit":
            out += f" {rec.get('exit')}"
        elif rec.get("reason"):
            out += f": {rec['reason']}"
    else:
        what = f"{ev} {rec.get('op', '')}".strip()
        if rec.get("command"):
            what += f": {rec['command']}"
        out = str(rec.get("reason") or "")
    dur = rec.get("duration")
    return [str(rec.get("time", ""))[:19].replace("T", " "), who(rec.get("principal")),
            where or "-", what, out or "-", f"{dur:.3f}" if isinstance(dur, float) else "-",
            str(rec.get("out_bytes", "-"))]


def files(path: str) -> list[str]:
    """The trail's files, oldest first."""
    d, base = os.path.split(path)
    rotated = []
    for name in os.listdir(d or "."):
        m = re.fullmatch(re.escape(base) + r"\.(\d+)", name)
        if m:
            rotated.append((int(m[1]), os.path.join(d, name)))
    return [p for _, p in sorted(rotated, reverse=True)] + [path]


def records(f: Any) -> Iterator[tuple[dict, str]]:
    while True:
        at = f.tell()
        line = f.readline()
        if not line.endswith("\n"):      # the end, or a line being written: not yet
            f.seek(at)
            return
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict):
            yield rec, line


def audit_main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    try:
        start = since(args.since)
        path = trail_path(args)
    except ValueError as e:
        print(f"toolsrv audit: {e}", file=sys.stderr)
        return 2
    if not os.path.exists(path):
        print(f"toolsrv audit: no audit trail at {path} (a server with --no-audit or "
              "--no-state keeps none; --audit FILE names one kept elsewhere)", file=sys.stderr)
        return 1
    out = sys.stdout
    if not args.json:
        out.write("\t".join(COLUMNS) + "\n")

    def show(f: Any) -> None:
        for rec, line in records(f):
            if wanted(rec, args, start):
                out.write(line if args.json else "\t".join(row(rec)) + "\n")
        out.flush()
    try:
        for p in files(path):
            try:
                with open(p, encoding="utf-8", errors="replace", newline="\n") as f:
                    show(f)
            except FileNotFoundError:
                continue
        if args.follow:
            follow(path, show)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:          # | head
        return 1
    return 0


def follow(path: str, show: Any) -> None:
    """Print what is appended from the end on, reopening the file when it is rotated."""
    f = open(path, encoding="utf-8", errors="replace", newline="\n")
    f.seek(0, os.SEEK_END)
    try:
        while True:
            show(f)
            try:
                if os.stat(path).st_ino != os.fstat(f.fileno()).st_ino:
                    show(f)                  # the rest of the rotated file, then the new
                    f.close()
                    f = open(path, encoding="utf-8", errors="replace", newline="\n")
                    continue
            except FileNotFoundError:
                pass
            time.sleep(0.2)
    finally:
        f.close()
