"""registry/search/index.py: what a need may be, what is ranked, and the index following a live
registry (issue 18).  The registries are real (.meta files in a temporary directory); the
semantic ranker is the real model when the search extra is installed (`make test` installs
it), and the lexical-only index is tested as well."""
from __future__ import annotations

import importlib.util
import errno
import json
import os

import pytest

from apphelpers import add_tool, tools_dir
from toolsrv.errors import P9Error, errno_for
from toolsrv.registry.registry import Registry
from toolsrv.dirs.bundled import install_hint
from toolsrv.registry.search.index import (LEXICAL_NOTICE, SearchIndex, answer_text,
                                           parse_need, stem, words)
from toolsrv.registry.search.semantic import Semantic

HAVE_EXTRA = importlib.util.find_spec("wordllama") is not None
MODES = ["lexical"] + (["hybrid"] if HAVE_EXTRA else [])


def index(reg: Registry, mode: str, **kw) -> SearchIndex:
    idx = SearchIndex(reg, semantic=False if mode == "lexical" else None, **kw)
    idx.load_semantic()
    assert idx.mode() == mode
    return idx


def registry(tools: dict[str, dict]) -> tuple[str, Registry]:
    d = tools_dir()
    for name, meta in tools.items():
        add_tool(d, name, None, {"cmd": "cat", **meta})
    r = Registry([d])
    r.load()
    return d, r


def names(idx: SearchIndex, need: str, limit: int = 10) -> list[str]:
    return [n for n, _, _ in idx.search(need, limit)]


# ------------------------------------------------------------------ the need

def test_a_need_and_its_limit():
    assert parse_need(b"find a file\n") == ("find a file", 10)
    assert parse_need(b"limit 3\nfind\n  a file\n") == ("find a file", 3)
    assert parse_need(b"\nlimit 100\nx") == ("x", 100)
    assert parse_need(b"limited offer") == ("limited offer", 10)   # not the limit line
    assert parse_need(b"limit 5\n") == ("", 5)    # alone: for the next write (searchfile)
    assert parse_need(b"more words", 5) == ("more words", 5)


@pytest.mark.parametrize("data, word, num", [
    (b"", "empty need", errno.EINVAL),
    (b"  \n\t\n", "empty need", errno.EINVAL),
    (b"x" * 4097, "too long", errno.E2BIG),
    (b"limit 0\nx", "limit must be", errno.EINVAL),
    (b"limit 101\nx", "limit must be", errno.EINVAL),
    (b"limit five\nx", "limit must be", errno.EINVAL),
    (b"limit 5 6\nx", "limit must be", errno.EINVAL),
    (b"limit -1\nx", "limit must be", errno.EINVAL),
    (b"limit \xd9\xa3\nx", "limit must be", errno.EINVAL),     # an Arabic-Indic digit
    (b"\xff\xfe", "not UTF-8", errno.EINVAL),
])
def test_a_need_that_cannot_be_searched_is_an_error_9pfuse_maps(data, word, num):
    with pytest.raises(P9Error) as e:
        parse_need(data)
    assert word in e.value.ename and errno_for(e.value.ename) == num


def test_exactly_4_kib_is_searched():
    assert parse_need(b"y" * 4096)[0] == "y" * 4096


def test_words_split_identifiers_and_stem():
    assert words("fileRead_v2-JSON.parse") == ["file", "read", "v", "2", "json", "parse"]
    assert words("reading files") == words("read file")
    assert stem("running") == "run" and stem("queries") == "query" and stem("class") == "class"
    assert words("the need of a tool") == ["need", "tool"]


def test_the_answer_format():
    assert answer_text([("a", 1.0, "first\tline\nsecond"), ("b", 0.25, "")]) == \
        b"a\t1.000\tfirst line second\nb\t0.250\t\n"
    assert answer_text([], "# note") == b"# note\n"


# ------------------------------------------------------------------ what is ranked

@pytest.mark.parametrize("mode", MODES)
def test_each_field_is_ranked(mode):
    _, r = registry({
        "zeta_convertor": {"description": "one"},
        "t_desc": {"description": "Compresses photographs losslessly."},
        "t_prompt": {"description": "two", "prompt": "Use it to transliterate Cyrillic."},
        "t_args": {"description": "three", "args": {"type": "object", "properties": {
            "wavelength": {"type": "number", "description": "In nanometres."}}}},
        "t_kw": {"description": "four", "keywords": ["spectrogram"]},
    })
    idx = index(r, mode)
    assert names(idx, "zeta")[0] == "zeta_convertor"          # the name, split at _
    assert names(idx, "convertor")[0] == "zeta_convertor"
    assert names(idx, "compresses photographs")[0] == "t_desc"
    assert names(idx, "transliterate cyrillic")[0] == "t_prompt"
    assert names(idx, "wavelength nanometres")[0] == "t_args"
    assert names(idx, "spectrogram")[0] == "t_kw"


@pytest.mark.parametrize("mode", MODES)
def test_a_need_found_only_in_keywords_finds_its_tool_first(mode):
    tools = {f"tool_{i:03d}": {"description": f"Tool {i}: works on records of kind {i}.",
                               "keywords": ["records", f"kind {i}"]} for i in range(100)}
    tools["pdf_split"] = {"description": "Cut a document into parts.",
                          "keywords": ["split pdf pages", "extract a page range", "burst"]}
    _, r = registry(tools)
    idx = index(r, mode)
    assert names(idx, "burst pdf pages")[0] == "pdf_split"
    # and the keywords outweigh the same word in a long prompt
    tools2 = {"kw": {"description": "x", "keywords": ["tarball"]},
              "pr": {"description": "y", "prompt": "tarball " + "filler words " * 5}}
    _, r2 = registry(tools2)
    assert names(index(r2, mode), "tarball")[0] == "kw"


@pytest.mark.parametrize("mode", MODES)
def test_only_visible_tools_are_ranked(mode):
    _, r = registry({
        "gone_elsewhere": {"description": "Decode barcodes.", "variants": [
            {"match": {"os": "plan9"}, "cmd": "cat"}], "cmd": "cat"},
        "no_binary": {"description": "Decode barcodes quickly.", "cmd": "no-such-binary-xyz"},
        "shown": {"description": "Read QR codes.", "variants": [
            {"match": {"os": "plan9"}, "description": "Decode barcodes on Plan 9."},
            {"match": {"os": "linux"}, "description": "Read QR codes here."}]},
    })
    assert "no_binary" not in r.tools and "gone_elsewhere" not in r.tools
    idx = index(r, mode)
    got = names(idx, "decode barcodes", 100)
    assert set(got) <= {"shown"}           # never a hidden tool
    assert "shown" in r.tools and r.get("shown").description == "Read QR codes here."
    # the variant applied is what is ranked: Plan 9's words are not the linux tool's
    lex = index(r, "lexical")
    assert names(lex, "plan9") == []


@pytest.mark.parametrize("mode", MODES)
def test_no_tools_no_answer(mode):
    _, r = registry({})
    assert index(r, mode).search("anything at all") == []


def test_lexical_scores_are_the_same_with_and_without_numpy():
    d, r = registry({f"t{i}": {"description": f"reads {'file ' * (i % 4)}number {i}",
                               "keywords": ["lines"] if i % 3 else []} for i in range(40)})
    a = index(r, "lexical")
    b = index(r, "lexical", use_numpy=False)
    for need in ("read a file", "lines number 7", "file file"):
        ra, rb = a.search(need, 40), b.search(need, 40)
        assert ra == rb and ra


# ------------------------------------------------------------------ live

def _rewrite(d: str, name: str, meta: dict) -> str:
    path = os.path.join(d, name + ".meta")
    st = os.stat(path) if os.path.exists(path) else None
    with open(path, "w") as f:
        json.dump({"cmd": "cat", **meta}, f)
    if st is not None:      # a new mtime even on a coarse clock
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    return path


@pytest.mark.parametrize("mode", MODES)
def test_the_index_follows_the_registry_one_change_at_a_time(mode):
    d, r = registry({f"t{i:02d}": {"description": f"generic helper {i}"} for i in range(30)})
    idx = index(r, mode)
    assert idx.sync() == 30 and len(idx) == 30           # the first sync builds it all
    assert idx.sync() == 0
    assert "quaternion" not in " ".join(names(idx, "quaternion"))
    rev = r.revision
    r.rescan([_rewrite(d, "t07", {"description": "Multiply quaternions."})])
    assert r.revision == rev + 1
    assert names(idx, "multiply quaternions")[0] == "t07"  # the next query sees it
    assert idx.sync() == 0                                # ... re-indexing that one alone
    r.rescan([_rewrite(d, "fresh", {"description": "Render isosurfaces."})])
    r.rescan([_rewrite(d, "t08", {"description": "Render isosurfaces too."})])
    assert idx._dirty == {"fresh", "t08"} and idx.sync() == 2
    assert set(names(idx, "render isosurfaces")[:2]) == {"fresh", "t08"}
    os.unlink(os.path.join(d, "fresh.meta"))
    r.rescan([os.path.join(d, "fresh.meta")])
    assert "fresh" not in names(idx, "render isosurfaces", 100) and len(idx) == 30
    # a tool hidden by a change leaves the results; shown again, it returns
    r.rescan([_rewrite(d, "t07", {"description": "Multiply quaternions.",
                                  "variants": [{"match": {"os": "plan9"}}]})])
    assert "t07" not in r.tools and "t07" not in names(idx, "multiply quaternions", 100)
    r.rescan([_rewrite(d, "t07", {"description": "Multiply quaternions."})])
    assert names(idx, "multiply quaternions")[0] == "t07"


def test_slots_are_reused_and_the_postings_stay_exact():
    d, r = registry({"a": {"description": "alpha words"}, "b": {"description": "beta words"}})
    idx = index(r, "lexical", use_numpy=False)
    idx.search("x")
    for i in range(20):
        r.rescan([_rewrite(d, "a", {"description": f"alpha version {i}"})])
        idx.sync()
    assert len(idx._tools) == 2
    assert set(idx._post) == set(words("a alpha version 19 b beta words"))
    assert names(idx, "19") == ["a"] and names(idx, "18") == []


# ------------------------------------------------------------------ the lexical notice

def test_a_lexical_index_says_so_once():
    _, r = registry({"a": {"description": "alpha"}})
    idx = index(r, "lexical")
    assert idx.notice() == f"{LEXICAL_NOTICE} ({install_hint('search')})"
    assert idx.notice() is None


def test_a_model_that_fails_to_load_leaves_search_lexical(monkeypatch):
    _, r = registry({"a": {"description": "alpha"}})
    sem = Semantic()
    monkeypatch.setattr("builtins.__import__", _refusing(__import__, "wordllama"))
    idx = SearchIndex(r, semantic=sem)
    idx.load_semantic()
    monkeypatch.undo()
    assert idx.mode() == "lexical" and "wordllama not installed" in sem.error
    assert names(idx, "alpha") == ["a"]
    assert idx.notice() == f"{LEXICAL_NOTICE} ({install_hint('search')}): wordllama not " \
        "installed"


def _refusing(real, name):
    def imp(n, *a, **kw):
        if n == name or n.startswith(name + "."):
            raise ImportError(f"No module named {n!r}", name=n)
        return real(n, *a, **kw)
    return imp
