"""Choosing search's fusion on public data (issue 32): each ranker alone, every candidate
fusion, on a development split; the choice, then its held-out figures.

Each public set (searchsets.py: APIBench TorchHub, TensorFlow Hub, HuggingFace; BFCL v4)
is indexed once by toolsrv's SearchIndex, and for every query the two rankers' scores are
kept (`SearchIndex.components`: BM25 and cosine of every tool), so any fusion can be
scored without searching again.  Queries are split by a hash of their text: development
(crc32 even) and held-out (odd).  The project's own sample takes no part in the choice.

The rule: among the candidates (fusion.METHODS, each over a grid of weights; zscore also
over a floor of the cosines' spread) that keep the ranking contract (CONTRACT, the pools of
tests/registry/test_search.py: a need whose words occur in one tool alone finds it first),
keep the one
whose mean margin over the sets, on the development split, of its recall@5 over the better
single ranker's on that set is largest (to 0.001); ties go to the better worst margin,
then to the higher mean MRR.  The
held-out split reports it.  A leave-one-set-out check repeats the choice on three sets
and scores the fourth.  `--ablation` re-indexes each set without one .meta field (in the
lexical ranker, the semantic one, or both) to see what each field is worth.

    python bench/search_fusion.py [--apibench DIR] [--bfcl DIR] [--ablation] [--quick]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import zlib
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    __package__ = "bench"

from toolsrv.registry.search import fusion  # noqa: E402
from toolsrv.registry.registry import Registry  # noqa: E402
from toolsrv.registry.search.index import FIELDS, SEMANTIC_FIELDS, SearchIndex  # noqa: E402

from .searchsets import APIBANK, SHARED, public_sets, write_tools  # noqa: E402

SINGLES = (("bm25", None), ("embedding", None))
GRID = [round(0.1 * i, 1) for i in range(1, 10)]


FLOORS = (0.0, 0.05, 0.1, 0.15, 0.2)   # zscore's k: the cosines' spread is taken as >= k


def candidates() -> list[tuple[str, float, float]]:
    out = [("scaled", w, 0.0) for w in GRID]
    out += [("zscore", w, k) for k in FLOORS for w in GRID]
    out += [("confidence", w, 0.0) for w in GRID]
    out += [("rrf", w, k) for k in (10.0, 60.0) for w in GRID]
    return out


# The ranking contract (tests/registry/test_search.py, test_each_field_is_ranked and
# test_a_need_found_only_in_keywords_finds_its_tool_first): in these pools each need's words
# occur in one tool's fields alone, and that tool must come first, even where no tool is
# about the need in meaning (a flat field of cosines).  A fusion that breaks it is not a
# candidate, however it scores on the public sets.
CONTRACT = [
    ({"zeta_convertor": {"description": "one"},
      "t_desc": {"description": "Compresses photographs losslessly."},
      "t_prompt": {"description": "two", "prompt": "Use it to transliterate Cyrillic."},
      "t_args": {"description": "three", "args": {"type": "object", "properties": {
          "wavelength": {"type": "number", "description": "In nanometres."}}}},
      "t_kw": {"description": "four", "keywords": ["spectrogram"]}},
     [("zeta", "zeta_convertor"), ("convertor", "zeta_convertor"),
      ("compresses photographs", "t_desc"), ("transliterate cyrillic", "t_prompt"),
      ("wavelength nanometres", "t_args"), ("spectrogram", "t_kw")]),
    ({**{f"tool_{i:03d}": {"description": f"Tool {i}: works on records of kind {i}.",
                           "keywords": ["records", f"kind {i}"]} for i in range(100)},
      "pdf_split": {"description": "Cut a document into parts.",
                    "keywords": ["split pdf pages", "extract a page range", "burst"]}},
     [("burst pdf pages", "pdf_split")]),
    ({"kw": {"description": "x", "keywords": ["tarball"]},
      "pr": {"description": "y", "prompt": "tarball " + "filler words " * 5}},
     [("tarball", "kw")]),
]


class Contract:
    """The contract's pools indexed once; `holds(fusion)` says whether it keeps it."""

    def __init__(self, semantic: Any) -> None:
        import numpy as np
        self.np = np
        self.cases = []
        for pool, needs in CONTRACT:
            reg = Registry([write_tools([{"name": n, **m} for n, m in pool.items()])])
            reg.load()
            idx = SearchIndex(reg, semantic=semantic)
            idx.load_semantic()
            idx.sync()
            names = [t.name if t is not None else "" for t in idx._tools]
            for need, want in needs:
                lex, sem, alive = idx.components(need)
                self.cases.append((names, lex.copy(), sem.copy(), alive, want))

    def holds(self, how: Any) -> bool:
        for names, lex, sem, alive, want in self.cases:
            out = fusion.fuse(self.np, lex.copy(), sem, alive, how)
            live = [s for s in range(len(names)) if names[s] and (alive is None or alive[s])]
            if min(live, key=lambda s: (-out[s], names[s])) != names.index(want):
                return False
        return True


class Scored:
    """One set, indexed: per query the BM25 and cosine of every tool, and its relevant
    slots; `split` 0 (development) or 1 (held-out)."""

    def __init__(self, data: dict[str, Any], semantic: Any, fields: Any = FIELDS,
                 semantic_fields: Any = SEMANTIC_FIELDS) -> None:
        import numpy as np
        self.np = np
        reg = Registry([write_tools(data["tools"])])
        reg.load()
        idx = SearchIndex(reg, semantic=semantic, fields=fields,
                          semantic_fields=semantic_fields)
        idx.load_semantic()
        idx.sync()
        self.names = [t.name if t is not None else "" for t in idx._tools]
        order = sorted(range(len(self.names)), key=lambda s: self.names[s])
        self.nrank = np.empty(len(order), dtype=np.int64)
        self.nrank[order] = np.arange(len(order))
        slot = {n: s for s, n in enumerate(self.names)}
        self.lex, self.sem, self.rel, self.split = [], [], [], []
        for q in data["queries"]:
            lex, sem, alive = idx.components(q["query"])
            self.alive = alive
            self.lex.append(lex.copy())
            self.sem.append(None if sem is None else sem.copy())
            self.rel.append([slot[n] for n in q["relevant"] if n in slot])
            self.split.append(zlib.crc32(q["query"].encode()) % 2)

    def rank(self, scores: Any, s: int, cut: bool) -> int:
        """0-based rank of slot s (ties by name, as search breaks them); a large number
        when `cut` and it scores nothing (search would not return it)."""
        v = scores[s]
        if cut and v <= 0:
            return 1 << 30
        np = self.np
        return int(np.count_nonzero(scores > v)
                   + np.count_nonzero((scores == v) & (self.nrank < self.nrank[s])))

    def scores(self, i: int, how: tuple[str, float, float] | tuple[str, None]) -> tuple[Any, bool]:
        if how[0] == "bm25":
            return self.lex[i], True
        if how[0] == "embedding":
            return self.sem[i], False
        return fusion.fuse(self.np, self.lex[i], self.sem[i], None, how), True

    def metrics(self, how: Any, split: int | None = None) -> tuple[float, float, int]:
        """(recall@5, MRR over the first 100, queries) on a split (None: all)."""
        rec, mrr = [], []
        for i, rel in enumerate(self.rel):
            if split is not None and self.split[i] != split:
                continue
            if not rel:
                rec.append(0.0)
                mrr.append(0.0)
                continue
            sc, cut = self.scores(i, how)
            ranks = [self.rank(sc, s, cut) for s in rel]
            rec.append(sum(r < 5 for r in ranks) / len(rel))
            best = min(ranks)
            mrr.append(1.0 / (best + 1) if best < 100 else 0.0)
        return (statistics.mean(rec) if rec else 0.0, statistics.mean(mrr) if mrr else 0.0,
                len(rec))


def choose(sets: dict[str, Scored], split: int | None, among: list[str] | None = None,
           kept: list[Any] | None = None
           ) -> list[tuple[tuple[float, float, float], tuple[str, float, float]]]:
    """Every candidate, best first, on a split of the sets named in `among` (all by
    default), by (mean margin, worst margin, mean MRR): a set's margin is the candidate's
    recall@5 less the better single ranker's on that set, and each set counts once.
    Margins are compared to 0.001 (one query of the smallest development split is 0.013):
    closer than that is a tie, and the next key decides."""
    names = among or list(sets)
    best_single = {n: max(sets[n].metrics(h, split)[0] for h in SINGLES) for n in names}
    ranked = []
    for c in (candidates() if kept is None else kept):
        got = {n: sets[n].metrics(c, split) for n in names}
        margins = [got[n][0] - best_single[n] for n in names]
        key = (round(statistics.mean(margins), 3), round(min(margins), 3),
               round(statistics.mean(g[1] for g in got.values()), 4))
        ranked.append((key, c))
    ranked.sort(key=lambda kc: kc[0], reverse=True)
    return ranked


def table(sets: dict[str, Scored], how_list: list[Any], split: int | None) -> list[str]:
    lines = []
    for n, sc in sets.items():
        cells = []
        for h in how_list:
            r, m, q = sc.metrics(h, split)
            cells.append(f"{r:.3f} / {m:.3f}")
        lines.append(f"| {n} ({q} queries) | " + " | ".join(cells) + " |")
    return lines


def label(h: Any) -> str:
    return h[0] if h[1] is None else f"{h[0]} w={h[1]}" + (f" k={h[2]:g}" if h[2] else "")


def ablation(data_sets: dict[str, dict], semantic: Any) -> list[str]:
    """R@5 / MRR of the chosen fusion with each field left out (lexical, semantic, both)."""
    variants: list[tuple[str, Any, Any]] = [("all (as shipped)", FIELDS, SEMANTIC_FIELDS)]
    for f in ("keywords", "args", "prompt"):
        lexf = tuple(x for x in FIELDS if x[0] != f)
        semf = tuple(x for x in SEMANTIC_FIELDS if x != ("argnames" if f == "args" else f))
        variants.append((f"without {f}, lexical", lexf, SEMANTIC_FIELDS))
        variants.append((f"without {f}, both", lexf, semf))
    variants.append(("semantic + arg descriptions", FIELDS, SEMANTIC_FIELDS[:-1] + ("args",)))
    variants.append(("semantic + prompt", FIELDS, SEMANTIC_FIELDS + ("prompt",)))
    lines = ["| variant | " + " | ".join(data_sets) + " |",
             "|---|" + "--:|" * len(data_sets)]
    for what, lexf, semf in variants:
        cells = []
        for n, data in data_sets.items():
            sc = Scored(data, semantic, lexf, semf)
            r, m, _ = sc.metrics(fusion.FUSION)
            cells.append(f"{r:.3f} / {m:.3f}")
        lines.append(f"| {what} | " + " | ".join(cells) + " |")
    return lines


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    ap.add_argument("--apibench", default=str(SHARED / "apibench"))
    ap.add_argument("--bfcl", default=str(SHARED / "bfcl"))
    ap.add_argument("--apibank", default=str(APIBANK))
    ap.add_argument("--ablation", action="store_true")
    ap.add_argument("--quick", action="store_true", help="200 queries per set")
    opts = ap.parse_args(argv)
    from toolsrv.registry.search.semantic import Semantic
    sem = Semantic()
    if not sem.load():
        sys.exit(f"search_fusion: the semantic model is needed: {sem.error}")
    data_sets = {n: d for n, d in public_sets(Path(opts.apibench), Path(opts.bfcl),
                                                   Path(opts.apibank)) if d}
    if opts.quick:
        for d in data_sets.values():
            d["queries"] = d["queries"][:200]
    if opts.ablation:
        print("\n".join(ablation(data_sets, sem)))
        return
    sets = {n: Scored(d, sem) for n, d in data_sets.items()}
    hows = list(SINGLES)
    print("## development split: R@5 / MRR")
    print("| set | " + " | ".join(label(h) for h in hows + candidates()) + " |")
    print("|---|" + "--:|" * len(hows + candidates()))
    print("\n".join(table(sets, hows + candidates(), 0)))
    contract = Contract(sem)
    kept = [c for c in candidates() if contract.holds(c)]
    print(f"\n{len(candidates()) - len(kept)} of {len(candidates())} candidates break the "
          "ranking contract and are left out: "
          + ", ".join(label(c) for c in candidates() if c not in kept))
    ranked = choose(sets, 0, kept=kept)
    print("\n## the candidates on development, best first: mean margin, worst margin, mean MRR")
    for key, c in ranked[:8]:
        print(f"- {label(c)}: {key[0]:+.3f}, {key[1]:+.3f}, {key[2]:.4f}")
    c = ranked[0][1]
    print(f"\nchosen on development: {label(c)}; shipped: {label(fusion.FUSION)}")
    for n in sets:
        rest = [m for m in sets if m != n]
        c2 = choose(sets, 0, rest, kept)[0][1]
        r, _, _ = sets[n].metrics(c2, 1)
        single = max(sets[n].metrics(h, 1)[0] for h in SINGLES)
        print(f"- leave {n} out: chosen {label(c2)}; on {n}'s held-out split R@5 {r:.3f}, "
              f"better single {single:.3f} ({r - single:+.3f})")
    print("\n## held-out split: R@5 / MRR (the chosen one and the next two on development)")
    shown = hows + [kc[1] for kc in ranked[:3]]
    if fusion.FUSION not in shown:
        shown.append(fusion.FUSION)
    print("| set | " + " | ".join(label(h) for h in shown) + " |")
    print("|---|" + "--:|" * len(shown))
    print("\n".join(table(sets, shown, 1)))

if __name__ == "__main__":
    main()
