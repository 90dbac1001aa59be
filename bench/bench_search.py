"""Discovery (`tools/search`, issues 18 and 32): ranking quality against BM25, and its costs.

Figures, each beside its baseline measured in the same run:
  recall@5, MRR  per public set (searchsets.py: Gorilla's APIBench TorchHub, TensorFlow
                 Hub, HuggingFace; BFCL v4's four files as one pool; both Apache-2.0),
                 converted to `.meta` tools and ranked by toolsrv's SearchIndex, the code
                 tools/search serves, in three columns: the fusion tools/search ships,
                 BM25 alone (toolsrv's lexical ranker: search without the extra) and the
                 embedding alone; each against rank-bm25's BM25Okapi over name +
                 description of the same tools, for the same queries: goal recall@5 >=
                 1.5x.  Then the held-out split (the queries bench/search_fusion.py did not
                 choose the fusion on): the fusion against the better single ranker, goal
                 at least its recall@5 less 0.01.  With APIBench also recall@5 where any
                 tool of the target's very description counts (one API per model variant,
                 often with one text).
  own sample     bench/data/search_sample.json (written for this project): the same.
  keywords       a need whose words appear only in one tool's keywords: its rank (target 1).
  10,000 tools   search latency over bench_registry's generated 10,000 tools, median,
                 excluding the first search (model load + embedding of all tools: its own
                 row): target <= 10 ms; baseline BM25Okapi.get_scores over the same tools.
  one change     one .meta rewritten, the registry's rescan of it, then the index's
                 re-index of it (sync): target <= 5 ms; baseline rank-bm25's rebuild.
  RSS            of a `toolsrv serve` over the 10,000 tools: idle, and after the first search.

The public files are not shipped (this repository keeps no copy of fetched data):
`--apibench DIR` (gorilla's data/api/*_api.jsonl and data/apibench/*_eval.json,
github.com/ShishirPatil/gorilla, or $TOOLSRV_APIBENCH) and `--bfcl DIR` (gorilla's
berkeley-function-call-leaderboard/bfcl_eval/data: BFCL_v4_*.json and possible_answer/,
or $TOOLSRV_BFCL); by default ../shared/data/{apibench,bfcl} beside the project, where this
workplace keeps them (doc/search.md).  Without them those rows say so and the rest runs.
`--sets FILE...` adds sets already converted to search_sample.json's form ({"tools": [...],
"queries": [{"query", "relevant"}]}).

    python bench/bench_search.py [--apibench DIR] [--bfcl DIR] [--sets FILE...] [--quick]
                                 [--only quality|scale] [--json FILE]
"""
from __future__ import annotations

import json
import os
import random
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    __package__ = "bench"

from toolsrv.registry.registry import Registry  # noqa: E402
from toolsrv.registry.search.index import SearchIndex  # noqa: E402

from .common import REPO, finish, lat, one, parser, row  # noqa: E402
from .searchsets import APIBANK, SHARED, public_sets, write_tools  # noqa: E402

B = "search"
SAMPLE = REPO / "bench" / "data" / "search_sample.json"


def _tok(s: str) -> list[str]:
    return re.findall(r"\w+", s.lower())


def metrics(ranked: list[list[str]], queries: list[dict[str, Any]], key: str = "relevant"
            ) -> tuple[float, float]:
    """(recall@5, MRR over the first 100) of rankings against the queries' relevant sets
    (`key` "siblings": any tool with the target's very description counts, once)."""
    rec, mrr = [], []
    for names, q in zip(ranked, queries):
        rel = set(q[key])
        if key == "siblings":
            names = [n if n not in rel else "*" for n in names]
            rel = {"*"}
        rec.append(len(rel & set(names[:5])) / len(rel))
        mrr.append(next((1.0 / (i + 1) for i, n in enumerate(names) if n in rel), 0.0))
    return statistics.mean(rec), statistics.mean(mrr)


def rank_ours(tools_dir: str, queries: list[dict[str, Any]], semantic: Any = None,
              limit: int = 100) -> list[list[str]]:
    reg = Registry([tools_dir])
    reg.load()
    idx = SearchIndex(reg, semantic=semantic)
    idx.load_semantic()
    return [[n for n, _, _ in idx.search(q["query"], limit)] for q in queries]


def rank_bm25(tools: list[dict[str, Any]], queries: list[dict[str, Any]]) -> list[list[str]]:
    from rank_bm25 import BM25Okapi
    bm = BM25Okapi([_tok(t["name"] + " " + t["description"]) for t in tools])
    names = [t["name"] for t in tools]
    out = []
    for q in queries:
        scores = bm.get_scores(_tok(q["query"]))
        order = sorted(range(len(names)), key=lambda i: (-scores[i], names[i]))[:100]
        out.append([names[i] for i in order])
    return out


def quality_rows(label: str, data: dict[str, Any], semantic: Any) -> list[dict]:
    """Per set, all queries: the fusion tools/search ships, BM25 alone (toolsrv's lexical
    ranker: what search is without the extra) and the embedding alone, recall@5 and MRR,
    each beside rank-bm25 over name + description; then the held-out split (the queries
    search_fusion.py did not choose the fusion on): the fusion beside the better single
    ranker."""
    from toolsrv.registry.search.fusion import FUSION

    from .search_fusion import SINGLES, Scored
    tools, queries = data["tools"], data["queries"]
    base = rank_bm25(tools, queries)
    base_r, base_m = metrics(base, queries)
    sc = Scored(data, semantic)
    n = f"{label} ({len(tools)} tools, {len(queries)} queries)"
    out = []
    for how, what in ((FUSION, "fusion (tools/search)"), (SINGLES[0], "BM25 alone"),
                      (SINGLES[1], "embedding alone")):
        r, m, _ = sc.metrics(how)
        fused = how is FUSION
        out.append(row(B, f"recall@5, {n}, {what}", "", one(r), "BM25Okapi name+descr",
                       one(base_r), ">= 1.5x baseline" if fused else "informative",
                       r >= 1.5 * base_r if fused else None))
        out.append(row(B, f"MRR, {n}, {what}", "", one(m), "BM25Okapi name+descr",
                       one(base_m), "informative"))
    if "siblings" in queries[0]:
        ranked = rank_ours(write_tools(tools), queries, semantic)
        r2, _ = metrics(ranked, queries, "siblings")
        b2, _ = metrics(base, queries, "siblings")
        out.append(row(B, f"recall@5, {n}, tools/search, a tool of the same description "
                       "counts", "", one(r2), "BM25Okapi name+descr", one(b2), "informative",
                       note="APIBench lists one API per model variant, many with the very "
                       "same description; here any of them counts"))
    r, m, q = sc.metrics(FUSION, 1)
    singles = [sc.metrics(h, 1) for h in SINGLES]
    best = max(singles, key=lambda x: x[0])
    which = SINGLES[singles.index(best)][0]
    out.append(row(B, f"recall@5, {label}, held-out split ({q} queries), fusion", "", one(r),
                   f"better single ranker ({which})", one(best[0]),
                   ">= baseline - 0.01", r >= best[0] - 0.01))
    out.append(row(B, f"MRR, {label}, held-out split ({q} queries), fusion", "", one(m),
                   f"{which} alone", one(best[1]), "informative"))
    return out


def keyword_rows() -> list[dict]:
    """A tool whose keywords alone hold the need's words, among 200 that do not."""
    tools = [{"name": f"tool_{i:03d}", "description": f"Tool {i}: works on records of kind {i}.",
              "keywords": ["records", f"kind {i}"]} for i in range(200)]
    tools.append({"name": "pdf_split", "description": "Cut a document into parts.",
                  "keywords": ["split pdf pages", "extract a page range", "burst"]})
    d = write_tools(tools)
    ranked = rank_ours(d, [{"query": "burst pdf pages", "relevant": ["pdf_split"]}])
    rank = ranked[0].index("pdf_split") + 1 if "pdf_split" in ranked[0] else 0
    return [row(B, "need in keywords only: rank of its tool (of 201)", "rank", one(rank),
                target="1", met=rank == 1)]


def scale_rows(n: int, samples: int) -> list[dict]:
    from rank_bm25 import BM25Okapi

    from .bench_registry import generate
    d = tempfile.mkdtemp(prefix="bench-search10k.", dir="/tmp")
    generate(d, n)
    reg = Registry([d])
    reg.load()
    idx = SearchIndex(reg)
    t0 = time.perf_counter()
    idx.load_semantic()
    idx.search("read the lines of a file", 10)
    first = time.perf_counter() - t0
    needs = ["find the owner of a repository", "tail a pod's output", "glob files recursively",
             "query a namespace with a timeout", "change the encoding of a body of text"]
    docs = [t.name + " " + t.description for t in reg.tools.values()]
    bm = BM25Okapi([_tok(x) for x in docs])
    ours, base = [], []
    for i in range(samples):
        q = needs[i % len(needs)]
        t = time.perf_counter()
        idx.search(q, 10)
        ours.append(time.perf_counter() - t)
        t = time.perf_counter()
        bm.get_scores(_tok(q))
        base.append(time.perf_counter() - t)
    v = lat(ours)
    rows = [row(B, f"first search over {n:,} tools (model load + embedding all)", "ms",
                one(first * 1e3), target="informative"),
            row(B, f"search over {n:,} tools", "ms", v, "BM25Okapi.get_scores", lat(base),
                "<= 10 ms", v["median"] <= 10)]
    # one change: rewrite one .meta, rescan it, re-index it
    names = sorted(reg.tools)
    change, rescan_only, rebuild = [], [], []
    rng = random.Random(3)
    for i in range(max(5, samples // 4)):
        name = rng.choice(names)
        path = Path(d, name + ".meta")
        meta = json.loads(path.read_text())
        meta["description"] = f"Changed {i}: archives old branches of a repository."
        path.write_text(json.dumps(meta))
        t = time.perf_counter()
        reg.rescan([str(path)])
        t1 = time.perf_counter()
        idx.sync()
        t2 = time.perf_counter()
        change.append(t2 - t)
        rescan_only.append(t1 - t)
        t = time.perf_counter()
        BM25Okapi([_tok(x) for x in docs])
        rebuild.append(time.perf_counter() - t)
        assert idx.search(f"Changed {i} archives old branches", 1)[0][0] == name
    v = lat(change)
    rows += [row(B, f"one .meta change, rescan + re-index, of {n:,}", "ms", v,
                 "BM25Okapi rebuild", lat(rebuild), "<= 5 ms", v["median"] <= 5,
                 f"of which the registry's rescan: {lat(rescan_only)['median']:.2f} ms median")]
    rows += rss_rows(d, n, samples)
    return rows


def rss_rows(tools_dir: str, n: int, samples: int) -> list[dict]:
    """A `toolsrv serve` over the tools: idle RSS, its first search through 9P (model load
    and embedding inside the server), searches after it, and RSS after them."""
    from toolsrv.cli.client import Client

    from .common import ToolsrvProcess
    needs = [b"find the owner of a repository", b"tail a pod's output", b"glob files"]
    with ToolsrvProcess(tools_dir) as srv:
        time.sleep(0.5)
        idle = srv.rss_kib()
        c = Client.connect(srv.addr)
        try:
            t = time.perf_counter()
            c.rdwr("tools/search", b"read the lines of a file")
            first = time.perf_counter() - t
            ours, base = [], []
            for i in range(samples):
                t = time.perf_counter()
                c.rdwr("tools/search", needs[i % len(needs)])
                t1 = time.perf_counter()
                c.read("revision")
                ours.append(t1 - t)
                base.append(time.perf_counter() - t1)
        finally:
            c.close()
        after = srv.rss_kib()
    v = lat(ours)
    return [row(B, f"first tools/search through the server, {n:,} tools", "ms",
                one(first * 1e3), target="informative",
                note="rdwr: model load and embedding of every tool, in the server"),
            row(B, f"tools/search rdwr through the server, {n:,} tools", "ms", v,
                "read revision (a 9P round trip)", lat(base), "informative"),
            row(B, f"server RSS after the first search, {n:,} tools", "MiB",
                one(after / 1024), "the same server idle", one(idle / 1024), "reported")]


def main(argv: list[str] | None = None) -> list[dict]:
    ap = parser(__doc__)
    ap.add_argument("--apibench", default=os.environ.get("TOOLSRV_APIBENCH") or
                    str(SHARED / "apibench"),
                    help="directory with gorilla's data/api and data/apibench files")
    ap.add_argument("--bfcl", default=os.environ.get("TOOLSRV_BFCL") or str(SHARED / "bfcl"),
                    help="directory with BFCL v4's question files and possible_answer/")
    ap.add_argument("--apibank", default=str(APIBANK),
                    help="API-Bank's api-bank/ folder (DAMO-ConvAI; $TOOLSRV_APIBANK)")
    ap.add_argument("-n", type=int, default=10000, help="tools in the scale figures")
    ap.add_argument("--sets", nargs="*", default=[], metavar="FILE",
                    help="more converted sets, each JSON in search_sample.json's form")
    ap.add_argument("--only", choices=("quality", "scale"),
                    help="only the ranking figures, or only the costs")
    opts = ap.parse_args(argv)
    from toolsrv.registry.search.semantic import _numpy_one_thread
    _numpy_one_thread()             # numpy as the server has it (before rank-bm25 loads it)
    from toolsrv.registry.search.semantic import Semantic
    sem = Semantic()
    sem.load()
    rows: list[dict] = []
    if opts.only != "scale":
        rows += all_quality_rows(opts, sem)
    if opts.only != "quality":
        rows += keyword_rows()
        rows += scale_rows(opts.n, 40 if opts.quick else 200)
    finish(rows, opts)
    return rows


def all_quality_rows(opts: Any, sem: Any) -> list[dict]:
    rows = quality_rows("own sample", json.loads(SAMPLE.read_text()), sem)
    sets = public_sets(Path(opts.apibench) if opts.apibench else None,
                       Path(opts.bfcl) if opts.bfcl else None,
                       Path(opts.apibank) if opts.apibank else None)
    for label, data in sets:
        if data is None:
            rows.append(row(B, f"recall@5, {label}", "", None, target="skipped",
                            note="its files are missing: give --apibench/--bfcl/--apibank DIR "
                            "(bench/searchsets.py says where to get them)"))
            continue
        if opts.quick:
            data["queries"] = data["queries"][:60]
        rows += quality_rows(label, data, sem)
    for f in opts.sets:
        rows += quality_rows(Path(f).stem, json.loads(Path(f).read_text()), sem)
    return rows


if __name__ == "__main__":
    main()
