"""The tool registry at scale: cold load, one change, and disk-to-wait_change latency.

Figures, on a generated directory of N (10,000) `.meta` files shaped like real tools (JSON
Schemas of 1-6 properties, prompts, keywords; 10% with an executable beside them, 10% with
`cmd` a bare name found on $PATH, 5% with variants, the rest shell commands):
  cold load      Registry.load() of all N in a fresh Registry, against the floor of merely
                 reading and json.loads-ing the same files: target < 1 s.
  one change     one file rewritten, then rescan([its path]) (what a watch event costs),
                 in a registry of N, against reading + json.loads of that one file:
                 target < 5 ms.  Also with tools/index and tools/errors regenerated after.
  disk -> wait   from just before a .meta is written to wait_change() returning the next
                 revision, inotify watching the N-file directory, against the raw inotify
                 floor (write to the watcher's callback, no batching or parsing):
                 target < 100 ms.
  informative    the periodic re-check of N tools' host probes, and a full stat rescan of
                 N with nothing changed (what polling costs per tick when inotify is absent).
Rounds alternate figure and baseline so host noise hits both alike.

    python bench/bench_registry.py [-n 10000] [--quick] [--json FILE]
"""
from __future__ import annotations

import asyncio
import json
import os
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    __package__ = "bench"

from toolsrv.registry.registry import Registry  # noqa: E402
from toolsrv.registry.watch import DirWatcher  # noqa: E402

from .common import finish, lat, one, parser, row  # noqa: E402

B = "registry"
WORDS = ("file path pattern limit query branch owner repo title body state namespace pod "
         "resource output follow tail glob encoding recursive depth timeout").split()


def schema_for(rng: random.Random, i: int) -> dict[str, Any]:
    props: dict[str, Any] = {}
    for w in rng.sample(WORDS, rng.randint(1, 6)):
        kind = rng.choice(("string", "string", "integer", "boolean", "array", "enum"))
        p: dict[str, Any] = {"description": f"The {w} to use for tool {i}."}
        if kind == "array":
            p.update(type="array", items={"type": "string"})
        elif kind == "enum":
            p.update(type="string", enum=["a", "b", f"c{i % 7}"])
        else:
            p["type"] = kind
            if kind == "integer" and rng.random() < 0.5:
                p.update(minimum=0, default=10)
        props[w] = p
    req = rng.sample(sorted(props), rng.randint(0, len(props)))
    return {"type": "object", "required": req, "properties": props}


def generate(d: str, n: int, seed: int = 1) -> None:
    """N tool definitions in `d`, deterministic for a seed."""
    rng = random.Random(seed)
    for i in range(n):
        name = f"tool_{i:05d}"
        meta: dict[str, Any] = {
            "description": f"Tool number {i}: does {rng.choice(WORDS)} things.",
            "prompt": f"## {name}\n\n" + " ".join(rng.choices(WORDS, k=40)) +
                      f"\n\n```\n{name}(path=\"/x\")\n```",
            "keywords": rng.sample(WORDS, 3), "args": schema_for(rng, i),
            "tier": rng.choice(("hot", "warm", "cold")), "readOnly": rng.random() < 0.5}
        if i % 20 == 0:
            meta["variants"] = [{"match": {"binary": rng.choice(("jq", "sh", "nope-xyz"))},
                                 "cmd": "sh"},
                                {"match": {"os": "linux", "nenv": "SSH_CONNECTION"},
                                 "cmd": "cat"}]
        elif i % 10 == 1:
            meta["cmd"] = rng.choice(("ls", "cat", "sh", "env"))
        elif i % 10 == 2:
            exe = Path(d, name)
            exe.write_text("#!/bin/sh\nexec cat\n")
            exe.chmod(0o755)
        else:
            meta["cmd"] = f"input=$(cat); echo \"$input\" | jq -r '.{rng.choice(WORDS)}'"
        Path(d, name + ".meta").write_text(json.dumps(meta, indent=1))


def floor_load(d: str) -> None:
    """What any loader must do at least: list, read and parse every .meta."""
    with os.scandir(d) as it:
        for e in it:
            if e.name.endswith(".meta"):
                with open(e.path, "rb") as f:
                    json.loads(f.read())


def alternate(a: Callable[[], Any], b: Callable[[], Any], rounds: int
              ) -> tuple[list[float], list[float]]:
    """Run a and b in turn `rounds` times; the durations of each."""
    ta: list[float] = []
    tb: list[float] = []
    for _ in range(rounds):
        for f, out in ((a, ta), (b, tb)):
            t0 = time.perf_counter()
            f()
            out.append(time.perf_counter() - t0)
    return ta, tb


def load_rows(d: str, n: int, rounds: int) -> tuple[list[dict], Registry]:
    reg: list[Registry] = []

    def cold() -> None:
        reg[:] = [Registry([d])]
        reg[0].load()

    cold()  # warm the page cache and imports for both sides
    t, base = alternate(cold, lambda: floor_load(d), rounds)
    r = reg[0]
    assert len(r.tools) > 0.9 * n, r.errors_text()[:500]
    v = lat(t)
    return [row(B, f"cold load, {n:,} .meta", "ms", v, "read + json.loads only", lat(base),
                "< 1000 ms", v["median"] < 1000)], r


def change_rows(d: str, r: Registry, n: int, samples: int) -> list[dict]:
    path = os.path.join(d, "tool_00003.meta")
    original = Path(path).read_text()
    work, base, served = [], [], []
    for k in range(samples):
        Path(path).write_text(original.replace("Tool number 3:", f"Tool number 3 ({k}):"))
        t0 = time.perf_counter()
        assert r.rescan([path])
        t1 = time.perf_counter()
        r.index_text()
        r.errors_text()
        t2 = time.perf_counter()
        with open(path, "rb") as f:
            json.loads(f.read())
        t3 = time.perf_counter()
        work.append(t1 - t0)
        served.append(t2 - t0)
        base.append(t3 - t2)
    Path(path).write_text(original)
    r.rescan([path])
    v = lat(work)
    return [
        row(B, f"one change applied, of {n:,}", "ms", v, "read + json.loads of it", lat(base),
            "< 5 ms", v["p99"] < 5),
        row(B, "  ... plus index and errors", "ms", lat(served), "read + json.loads of it",
            lat(base), "informative"),
    ]


def tick_rows(r: Registry, n: int, rounds: int) -> list[dict]:
    recheck, rescan = alternate(r.recheck, r.rescan, rounds)
    return [row(B, f"periodic re-check, {n:,} tools", "ms", lat(recheck), target="informative"),
            row(B, f"poll rescan, {n:,}, no change", "ms", lat(rescan), target="informative")]


async def wait_rows(d: str, n: int, samples: int) -> list[dict]:
    r = Registry([d], watch="inotify")
    await r.start()
    small = tempfile.mkdtemp(prefix="bench-reg-floor.")
    hinted = asyncio.Event()
    floor = DirWatcher([small], lambda path, state: hinted.set())
    floor.start(asyncio.get_running_loop())
    path = os.path.join(d, "tool_00004.meta")
    original = Path(path).read_text()
    t, base = [], []
    try:
        for k in range(samples):
            seen = r.revision
            t0 = time.perf_counter()
            Path(path).write_text(original.replace("Tool number 4:", f"Tool number 4 ({k}):"))
            got = await r.wait_change(seen, 5.0)
            t.append(time.perf_counter() - t0)
            assert got == seen + 1, (got, seen)
            hinted.clear()
            t0 = time.perf_counter()
            Path(small, "x.meta").write_text(str(k))
            await asyncio.wait_for(hinted.wait(), 5.0)
            base.append(time.perf_counter() - t0)
            await asyncio.sleep(0.02)  # let the floor's remaining events drain
    finally:
        floor.close()
        await r.close()
        shutil.rmtree(small)
        Path(path).write_text(original)
    v = lat(t)
    return [row(B, f"disk -> wait_change, {n:,}", "ms", v, "raw inotify event", lat(base),
                "< 100 ms", v["p99"] < 100,
                note=f"includes the {r_quiet()} ms quiet window that batches a burst")]


def r_quiet() -> str:
    from toolsrv.registry.watch import Batcher
    return f"{Batcher(lambda h: None).quiet * 1000:g}"


def main(argv: list[str] | None = None) -> list[dict]:
    ap = parser(__doc__)
    ap.add_argument("-n", type=int, default=10000, help="number of .meta files")
    opts = ap.parse_args(argv)
    q = opts.quick
    d = tempfile.mkdtemp(prefix="bench-registry.")
    try:
        t0 = time.perf_counter()
        generate(d, opts.n)
        gen = time.perf_counter() - t0
        rows, r = load_rows(d, opts.n, 3 if q else 7)
        rows += change_rows(d, r, opts.n, 50 if q else 300)
        rows += tick_rows(r, opts.n, 3 if q else 10)
        rows += asyncio.run(wait_rows(d, opts.n, 30 if q else 200))
        rows.append(row(B, f"generate {opts.n:,} files (setup)", "ms", one(gen * 1000),
                        target="informative"))
    finally:
        shutil.rmtree(d)
    finish(rows, opts)
    return rows


if __name__ == "__main__":
    main()
