"""A ranking regression test on bench/data/search_sample.json (30 tools, 60 needs in a
user's words, written for this project): recall@5 of the index as served, with and without
the semantic ranker, against rank-bm25's BM25Okapi over name + description of the same
tools (the baseline of bench_search).  The floors sit a little under what the tuned
ranking measured when it was committed (hybrid 0.92, lexical 0.72, BM25Okapi 0.35): a
change that loses several known needs fails here."""
from __future__ import annotations

import importlib.util
import json
import os
import re

import pytest

from apphelpers import add_tool, tools_dir
from toolsrv.registry.registry import Registry
from toolsrv.registry.search.index import SearchIndex

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SAMPLE = json.load(open(os.path.join(REPO, "bench", "data", "search_sample.json")))
HAVE_EXTRA = importlib.util.find_spec("wordllama") is not None
# needs whose tool must come first, whichever ranker
KNOWN = {"are there modified files in my checkout": "git_status",
         "how many kilometres is 26.2 miles": "unit_convert",
         "unpack the release tarball": "archive_extract",
         "what meetings do I have on friday": "calendar_events",
         "what is eating all my cpu": "process_list",
         "read the words in this screenshot": "image_ocr"}


@pytest.fixture(scope="module")
def reg():
    d = tools_dir()
    for t in SAMPLE["tools"]:
        add_tool(d, t["name"], None, {"cmd": "cat", "description": t["description"],
                                      "keywords": t["keywords"], "args": t["args"]})
    r = Registry([d])
    r.load()
    assert len(r.tools) == 30
    return r


def recall5(rank) -> float:
    qs = SAMPLE["queries"]
    return sum(q["relevant"][0] in rank(q["query"])[:5] for q in qs) / len(qs)


def ours(reg, semantic):
    idx = SearchIndex(reg, semantic=semantic)
    idx.load_semantic()
    return lambda need: [n for n, _, _ in idx.search(need, 10)]


def bm25okapi():
    from rank_bm25 import BM25Okapi
    tools = SAMPLE["tools"]
    tok = lambda s: re.findall(r"\w+", s.lower())      # noqa: E731
    bm = BM25Okapi([tok(t["name"] + " " + t["description"]) for t in tools])

    def rank(need):
        s = bm.get_scores(tok(need))
        return [tools[i]["name"] for i in sorted(range(len(tools)), key=lambda i: -s[i])]
    return rank


@pytest.mark.skipif(not HAVE_EXTRA, reason="the search extra is not installed "
                    "(pip install '.[search]'; make test installs it)")
def test_hybrid_recall_at_5(reg):
    rank = ours(reg, None)
    got, base = recall5(rank), recall5(bm25okapi())
    assert got >= 0.85 and got >= 1.5 * base, (got, base)
    for need, tool in KNOWN.items():
        assert rank(need)[0] == tool, need


def test_lexical_recall_at_5(reg):
    rank = ours(reg, False)
    assert recall5(rank) >= 0.65
    for need, tool in KNOWN.items():
        assert rank(need)[0] == tool, need
