"""proto's cost per message, in process: construct, encode, decode.

Every request the server handles is decoded (a message object built from the frame) and
every reply constructed and encoded, so these are on the path of every 9P message.
Measured for the ten messages of an agent's call (Twalk of 7 names, Rwalk of 7 qids, Topen,
Ropen, Twrite and Rread of ~100 bytes, Rwrite, Tread, Tclunk, Rclunk), and Qid and Dir
(built for every walk and stat):

  construct   cls(*fields), as the codec's decoders and the server build them
  encode      proto.encode(msg)
  decode      proto.decode(frame)

Blocks of N operations, figure and baseline alternating block by block.  Baseline for
construct: a plain mutable class with the same __slots__ and an __init__ that assigns them
(the floor of a Python object with those fields).  With `--against DIR`, every figure's
baseline is instead the proto package of another checkout (e.g. `git worktree add` of an
older commit), loaded in this same process as `proto_against`: a before/after comparison
that the host's noise hits alike.  `--detail` adds one row per message type.

    python bench/bench_codec.py [--quick] [--detail] [--against DIR] [--json FILE]
"""
from __future__ import annotations

import importlib.util
import os
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    __package__ = "bench"

import toolsrv.proto as proto  # noqa: E402

from .common import PAYLOAD, finish, lat, parser, row  # noqa: E402

B = "codec"
CALL = ("session", "s", "agent", "a", "tools", "echo", "call")
CALL_MESSAGES = ["Twalk", "Rwalk", "Topen", "Ropen", "Twrite", "Rwrite", "Tread", "Rread",
                 "Tclunk", "Rclunk"]


def cases(P: Any) -> list[tuple[str, type, tuple]]:
    """(name, class, positional fields) of each measured type, built from package P."""
    q = P.Qid(P.QTDIR, 7, 0x0123456789ABCDEF)
    d = (0, 0, q, P.DMDIR | 0o755, 1700000000, 1700000000, 0, "call", "me", "me", "me")
    return [
        ("Twalk", P.Twalk, (1, 0, 7, CALL)),
        ("Rwalk", P.Rwalk, (1, tuple(P.Qid(P.QTDIR, 0, i) for i in range(7)))),
        ("Topen", P.Topen, (2, 7, P.ORDWR)),
        ("Ropen", P.Ropen, (2, q, 0)),
        ("Twrite", P.Twrite, (3, 7, 0, PAYLOAD)),
        ("Rwrite", P.Rwrite, (3, len(PAYLOAD))),
        ("Tread", P.Tread, (4, 7, 0, 65536)),
        ("Rread", P.Rread, (4, PAYLOAD)),
        ("Tclunk", P.Tclunk, (5, 7)),
        ("Rclunk", P.Rclunk, (5,)),
        ("Qid", P.Qid, (P.QTDIR, 7, 0x0123456789ABCDEF)),
        ("Dir", P.Dir, d),
    ]


def plain_class(cls: type) -> type:
    """A mutable class with cls's fields, assigned by a plain __init__ (the floor)."""
    names = list(cls.__slots__)
    src = (f"def __init__(self, {', '.join(names)}):\n"
           + "".join(f"    self.{n} = {n}\n" for n in names))
    ns: dict = {}
    exec(src, ns)
    return type("Plain" + cls.__name__, (), {"__slots__": tuple(names),
                                             "__init__": ns["__init__"]})


def load_against(path: str) -> ModuleType:
    """The proto package of another checkout, imported under the name proto_against."""
    pkg = os.path.join(path, "toolsrv", "proto")   # since issue 26; before: a top-level proto/
    if not os.path.isdir(pkg):
        pkg = os.path.join(path, "proto")
    spec = importlib.util.spec_from_file_location(
        "proto_against", os.path.join(pkg, "__init__.py"), submodule_search_locations=[pkg])
    if spec is None or spec.loader is None:
        raise SystemExit(f"no proto package in {path}")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["proto_against"] = mod
    spec.loader.exec_module(mod)
    return mod


def block(fn: Callable, args: tuple, n: int) -> float:
    """Seconds per call of fn(*args), over n calls."""
    pc, rng = time.perf_counter, range(n)
    t0 = pc()
    for _ in rng:
        fn(*args)
    return (pc() - t0) / n


def ns(samples: list[float]) -> dict[str, float]:
    d = lat(samples)                 # ms
    return {"median": d["median"] * 1e6, "p99": d["p99"] * 1e6, "n": d["n"]}


def main(argv: list[str] | None = None) -> list[dict]:
    ap = parser(__doc__)
    ap.add_argument("--detail", action="store_true", help="one row per message type")
    ap.add_argument("--against", metavar="DIR", help="baseline: the proto of this checkout")
    opts = ap.parse_args(argv)
    n, rounds = (2000, 20) if opts.quick else (5000, 60)
    ours = cases(proto)
    other = load_against(opts.against) if opts.against else None
    theirs = cases(other) if other else [(nm, plain_class(c), a) for nm, c, a in ours]
    bname = f"proto of {opts.against}" if other else "plain mutable __slots__ classes"
    # (figure name) -> ((fn, args) measured, (fn, args) baseline or None)
    ops: dict[str, tuple[tuple, tuple | None]] = {}
    for (name, cls, args), (_, bcls, bargs) in zip(ours, theirs):
        ops[f"construct {name}"] = ((cls, args), (bcls, bargs))
        if name in CALL_MESSAGES:
            m = cls(*args)
            frame = proto.encode(m)
            base_enc = base_dec = None
            if other:
                bm = bcls(*bargs)
                assert other.encode(bm) == frame
                base_enc, base_dec = (other.encode, (bm,)), (other.decode, (frame,))
            ops[f"encode {name}"] = ((proto.encode, (m,)), base_enc)
            ops[f"decode {name}"] = ((proto.decode, (frame,)), base_dec)
    got: dict[str, list[float]] = {k: [] for k in ops}
    base: dict[str, list[float]] = {k: [] for k in ops}
    for r in range(rounds):                      # alternate which goes first
        for k, (fig, bl) in ops.items():
            pair = [(got[k], fig)] + ([(base[k], bl)] if bl else [])
            for out, (fn, args) in (pair if r % 2 == 0 else pair[::-1]):
                out.append(block(fn, args, n))

    def total(d: dict[str, list[float]], op: str) -> list[float]:
        return [sum(x) for x in zip(*(d[f"{op} {k}"] for k in CALL_MESSAGES))]

    rows = []
    for op in ("construct", "encode", "decode"):
        b = ns(total(base, op)) if base[f"{op} Twalk"] else None
        rows.append(row(B, f"{op}, the 10 messages of a call", "ns", ns(total(got, op)),
                        bname if b else None, b, "informative"))
    for name in ("Qid", "Dir"):
        rows.append(row(B, f"construct {name}", "ns", ns(got[f"construct {name}"]), bname,
                        ns(base[f"construct {name}"]), "informative"))
    if opts.detail:
        for name in CALL_MESSAGES:
            for op in ("construct", "encode", "decode"):
                k = f"{op} {name}"
                rows.append(row(B, k, "ns", ns(got[k]), bname if base[k] else None,
                                ns(base[k]) if base[k] else None, "informative"))
    finish(rows, opts)
    return rows


if __name__ == "__main__":
    main()
