"""What search work costs other clients (issue 25 section 4): this tree against another
(the tree before the fix), in one run, servers alternating.

Figures, per tree, each a `toolsrv serve` process over the same tools:
  stall   the worst wait of another client's `revision` read, polled in a loop while a
          search indexes ten tools that have just appeared, each with a description just
          under the 64 KiB limit (random words, as ../shared/repro/round3/huge_desc.py
          does with 900 KB ones, which this tree refuses); the server has searched once
          before, so the index is built and only the ten are new.  Goal: <= 50 ms.
  search  tools/search rdwr over N generated tools (bench_registry), median and p99,
          after the first search: what moving search into a worker thread costs.

    python bench/bench_search_stall.py --old DIR [-n 1000] [--quick] [--json FILE]

DIR is a checkout of the other tree (e.g. `git archive 515daa9 | tar -x -C DIR`).
"""
from __future__ import annotations

import json
import os
import random
import shutil
import socket
import string
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    __package__ = "bench"

from toolsrv.cli.client import Client  # noqa: E402

from .common import PY, REPO, finish, lat, one, parser, row  # noqa: E402

B = "search_stall"


class Server:
    """`python -m toolsrv serve` from a given tree (its folder first on sys.path)."""

    def __init__(self, tree: Path, tools: str) -> None:
        self.tmp = tempfile.mkdtemp(prefix="bench-stall.", dir="/tmp")
        self.path = f"{self.tmp}/ns/toolsrv"
        self.addr = f"unix!{self.path}"
        env = {**os.environ, "PYTHONPATH": str(tree)}
        self.log = open(f"{self.tmp}/log", "wb")
        self.proc = subprocess.Popen(
            [PY, "-m", "toolsrv", "serve", "-a", self.addr, "--tools", tools,
             "--state", f"{self.tmp}/state"], cwd=str(tree), env=env,
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(Path(f"{self.tmp}/log").read_text()[-2000:])
            try:
                with socket.socket(socket.AF_UNIX) as s:
                    s.connect(self.path)
                return
            except OSError:
                time.sleep(0.01)
        raise RuntimeError("toolsrv did not start")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)
        self.log.close()
        shutil.rmtree(self.tmp, ignore_errors=True)


def huge_tools(d: str, tag: str, n: int = 10) -> None:
    rnd = random.Random(1)
    for i in range(n):
        words, size = [], 0
        while size < 60_000:
            w = "".join(rnd.choice(string.ascii_lowercase) for _ in range(rnd.randint(3, 10)))
            words.append(w)
            size += len(w) + 1
        Path(d, f"huge_{tag}_{i}.meta").write_text(json.dumps(
            {"description": " ".join(words), "cmd": "cat", "args": {"type": "object"}}))


def worst_read_during(addr: str, search: Client | None, need: bytes, secs: float = 0.0
                      ) -> tuple[float, float]:
    """(the worst `revision` read of a second client while `search` searches `need`, how
    long the search took); with `search` None, while the server idles for `secs`."""
    probe = Client.connect(addr)
    done = threading.Event()
    worst = 0.0
    t0 = time.perf_counter()

    def run() -> None:
        try:
            if search is None:
                time.sleep(secs)
            else:
                search.rdwr("tools/search", need)
        finally:
            done.set()
    th = threading.Thread(target=run)
    th.start()
    try:
        while not done.is_set():
            t = time.perf_counter()
            probe.read("revision")
            worst = max(worst, time.perf_counter() - t)
    finally:
        th.join()
        took = time.perf_counter() - t0
        probe.close()
    return worst, took


def stall_once(tree: Path, tools: str, tag: str) -> tuple[float, float]:
    """(worst read during the indexing search, worst read while the same server idles as
    long: the machine's own noise)."""
    srv = Server(tree, tools)
    try:
        with Client.connect(srv.addr) as c:
            c.rdwr("tools/search", b"read a file")            # the index is built
            rev = int(c.read("revision"))
            huge_tools(tools, tag)
            c.rdwr("revwait", str(rev).encode())              # the registry has them
            worst, took = worst_read_during(srv.addr, c, b"huge words")
            idle, _ = worst_read_during(srv.addr, None, b"", max(took, 0.5))
            return worst, idle
    finally:
        srv.stop()
        for p in Path(tools).glob(f"huge_{tag}_*.meta"):
            p.unlink()


def main(argv: list[str] | None = None) -> list[dict]:
    ap = parser(__doc__)
    ap.add_argument("--old", required=True, help="a checkout of the tree to compare with")
    ap.add_argument("-n", type=int, default=1000, help="generated tools")
    opts = ap.parse_args(argv)
    from .bench_registry import generate
    tools = tempfile.mkdtemp(prefix="bench-stall-tools.", dir="/tmp")
    generate(tools, opts.n)
    trees = {"this tree": REPO, "old tree": Path(opts.old).resolve()}
    rounds = 2 if opts.quick else 4
    stalls: dict[str, list[float]] = {k: [] for k in trees}
    idles: dict[str, list[float]] = {k: [] for k in trees}
    for i in range(rounds):
        for k, tree in trees.items():
            worst, idle = stall_once(tree, tools, f"{i}")
            stalls[k].append(worst)
            idles[k].append(idle)
    servers = {k: Server(tree, tools) for k, tree in trees.items()}
    times: dict[str, list[float]] = {k: [] for k in trees}
    try:
        clients = {k: Client.connect(s.addr) for k, s in servers.items()}
        for c in clients.values():
            c.rdwr("tools/search", b"read a file")
        needs = [b"find the owner of a repository", b"tail a pod's output", b"glob files"]
        for i in range(40 if opts.quick else 200):
            for k, c in clients.items():
                t = time.perf_counter()
                c.rdwr("tools/search", needs[i % len(needs)])
                times[k].append(time.perf_counter() - t)
        for c in clients.values():
            c.close()
    finally:
        for s in servers.values():
            s.stop()
    rows = []
    for k in trees:
        v, b = lat(stalls[k]), lat(idles[k])
        rows.append(row(B, f"{k}: worst revision read while a search indexes 10 new ~60 KB "
                        "descriptions", "ms", v, "the same server idle as long", b,
                        "<= 50 ms over idle" if k == "this tree" else "informative",
                        v["median"] - b["median"] <= 50 if k == "this tree" else None,
                        f"median and worst of {rounds} servers; each the worst read of one"))
    rows.append(row(B, f"tools/search rdwr, {opts.n:,} tools", "ms", lat(times["this tree"]),
                    "old tree", lat(times["old tree"]), "informative"))
    shutil.rmtree(tools, ignore_errors=True)
    finish(rows, opts)
    return rows


if __name__ == "__main__":
    main()
