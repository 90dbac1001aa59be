"""Fusion of search's two rankers: per-query BM25 and cosine scores in, one score out.

Theory of operation.  BM25 and the cosine live on unrelated scales that move from query
to query (BM25 grows with the need's length and its words' rarity; cosines of a static
model crowd into a narrow band), so neither raw value can be added to the other.  Each
method here first puts both on a per-query scale, then weighs them.  All take numpy
arrays over the index's slots (`alive`: the mask of slots holding a tool, or None when
all do) and return the fused score of every slot, 0 for a free slot and the best tool
near 1, so `search` can print and cut them the same way whatever the method.

  scaled      BM25 / this query's best; the cosine above this query's mean cosine /
              (best - mean); w x lexical + (1 - w) x semantic.  (The fusion of issue 18.)
  zscore      each ranker's z-score over the tools (its mean and spread on this query;
              the cosines' spread taken as at least k, so a need no tool is about in
              meaning, a flat field of small cosines, does not outvote a word that only
              one tool has), w x lexical + (1 - w) x semantic, shifted and scaled into
              (0, 1].
  confidence  `scaled`, with each ranker's weight multiplied by its confidence on this
              query: 1 - (its 5th best / its best), on the scaled scores (a ranker that
              sees one clear winner counts more than one that sees a flat field).
  rrf         reciprocal-rank fusion, w / (k + lexical rank) + (1 - w) / (k + semantic
              rank), scaled by the best.

Which one `search` uses, and its constants, were chosen on a development split of public
tool-retrieval sets (bench/search_fusion.py; doc/search.md says how): FUSION.
"""
from __future__ import annotations

from typing import Any

# The method and its constants (bench/search_fusion.py chose them among the fusions that
# keep the ranking contract; doc/search.md): z-scores, lexical weight 0.2, cosine floor 0.2.
FUSION: tuple[str, float, float] = ("zscore", 0.2, 0.2)      # (method, w, k)
METHODS = ("scaled", "zscore", "confidence", "rrf")
TINY = 1e-9          # a spread below this is none (no ranker's scores are that close)


def fuse(np: Any, lex: Any, sem: Any, alive: Any, fusion: Any = None) -> Any:
    """The fused score of every slot (see the header); `fusion` (method, w, k), FUSION by
    default.  `lex` is not changed."""
    method, w, k = FUSION if fusion is None else fusion
    if method == "scaled":
        out = _scaled(np, lex, sem, alive, w, 1.0 - w)
    elif method == "confidence":
        lz, sz = _unit(np, lex, alive), _unit_floor(np, sem, alive)
        cl, cs = _confidence(np, lz, alive), _confidence(np, sz, alive)
        wl, ws = w * cl, (1.0 - w) * cs
        if wl + ws <= 0:
            wl, ws = w, 1.0 - w
        out = (wl * lz + ws * sz) / (wl + ws)
    elif method == "zscore":
        out = w * _z(np, lex, alive) + (1.0 - w) * _z(np, sem, alive, k)
        vals = out if alive is None else out[alive]
        lo, hi = float(vals.min()), float(vals.max())
        out = (out - lo) / (hi - lo) if hi - lo > TINY else np.zeros_like(out)
        out = np.maximum(out, 1e-6)              # every tool stays a candidate
    elif method == "rrf":
        out = w / (k + _ranks(np, lex, alive)) + (1.0 - w) / (k + _ranks(np, sem, alive))
        out = out / float(out.max())
    else:
        raise ValueError(f"unknown fusion {method!r}")
    if alive is not None:
        out[~alive] = 0.0
    return out


def _scaled(np: Any, lex: Any, sem: Any, alive: Any, wl: float, ws: float) -> Any:
    top = float(lex.max())
    out = lex * (wl / top) if top > TINY else np.zeros_like(lex)
    vals = sem if alive is None else sem[alive]
    floor, peak = float(vals.mean()), float(vals.max())
    if peak - floor > TINY:
        out += np.maximum(sem - floor, 0.0) * (ws / (peak - floor))
    return out


def _unit(np: Any, x: Any, alive: Any) -> Any:
    top = float(x.max())
    return x / top if top > TINY else np.zeros_like(x)


def _unit_floor(np: Any, x: Any, alive: Any) -> Any:
    vals = x if alive is None else x[alive]
    floor, peak = float(vals.mean()), float(vals.max())
    return np.maximum(x - floor, 0.0) / (peak - floor) if peak - floor > TINY else np.zeros_like(x)


def _confidence(np: Any, unit: Any, alive: Any) -> float:
    vals = unit if alive is None else unit[alive]
    if len(vals) < 6:
        return 1.0
    top6 = np.partition(vals, len(vals) - 5)[len(vals) - 5:]
    best, fifth = float(top6.max()), float(top6.min())
    return 1.0 - fifth / best if best > TINY else 0.0


def _z(np: Any, x: Any, alive: Any, floor: float = 0.0) -> Any:
    """x's z-scores over the live slots; the spread is taken as at least `floor`, so a field
    of near-equal scores (cosines of a need no tool is about) stays near 0."""
    vals = x if alive is None else x[alive]
    sd = max(float(vals.std()), floor)
    return (x - float(vals.mean())) / sd if sd > TINY else np.zeros_like(x)


def _ranks(np: Any, x: Any, alive: Any) -> Any:
    """1 for the best slot, 2 for the next, ...; free slots rank last."""
    y = x if alive is None else np.where(alive, x, -np.inf)
    order = np.argsort(-y, kind="stable")
    r = np.empty(len(x), dtype=np.float64)
    r[order] = np.arange(1, len(x) + 1)
    return r
