"""What the search index holds (issue 51.2): the model as stored, and nothing twice.

The semantic ranker reads wordllama's files itself (registry/search/semantic.py): its
token table float16 and mapped from the wheel, not a float32 copy, and its own `embed`,
which must give wordllama's embeddings bit for bit, or the rankings would move.  The
lexical index keeps one string per term, shared by the postings and every tool that
holds it."""
from __future__ import annotations

import importlib.util
import os

import pytest

from apphelpers import add_tool, tools_dir
from toolsrv.registry.registry import Registry
from toolsrv.registry.search.index import SearchIndex
from toolsrv.registry.search.semantic import Semantic

HAVE_EXTRA = importlib.util.find_spec("wordllama") is not None
needs_extra = pytest.mark.skipif(not HAVE_EXTRA, reason="the search extra is not installed")

TEXTS = ["read the lines of a file", "file read. Read a text file with line numbers; page "
         "through big files with offset/limit. path offset limit", "x", "",
         "é ü 日本語 🙂 — tabs\tand\nnewlines", "word " * 400,    # past MAX_TOKENS
         "kubernetes pod logs tail; follow a container's output", "12345 67890"]


@pytest.fixture(scope="module")
def sem() -> Semantic:
    s = Semantic()
    assert s.load(), s.error
    return s


@needs_extra
def test_the_table_is_the_wheels_float16_mapped_not_copied(sem):
    np = sem.np
    assert isinstance(sem.table, np.memmap) and sem.table.dtype == np.float16
    assert sem.table.shape == (32000, 256) and sem.dim == 256
    import wordllama
    assert os.path.samefile(sem.table.filename, os.path.join(
        os.path.dirname(wordllama.__file__), "weights", "l2_supercat_256.safetensors"))


@needs_extra
@pytest.mark.filterwarnings("ignore::RuntimeWarning")    # "" has no tokens: 0/0, as wordllama
def test_embed_is_wordllamas_bit_for_bit(sem):
    import wordllama
    from wordllama import WordLlama
    ref = WordLlama.load(cache_dir=os.path.dirname(wordllama.__file__), disable_download=True)
    ref.tokenizer.enable_truncation(max_length=256)
    np = sem.np
    for batch in (TEXTS, TEXTS[:1], TEXTS[2:3], TEXTS[::-1]):
        got = sem.embed(batch)
        want = np.asarray(ref.embed(batch, norm=True), dtype=np.float32)
        assert got.dtype == np.float32 and got.shape == (len(batch), 256)
        assert np.array_equal(got, want, equal_nan=True)


def test_each_term_is_one_string_shared_by_postings_and_tools():
    d = tools_dir()
    for i in range(6):
        add_tool(d, f"tool_{i}", None, {"cmd": "cat", "description": "read files and lines",
                                        "keywords": [f"kind {i % 2}"]})
    reg = Registry([d])
    reg.load()
    idx = SearchIndex(reg, semantic=False)
    idx.sync()
    keys = {id(k) for k in idx._post}
    held = [w for terms in idx._terms for w in terms]
    assert len(held) > len(idx._post) > 0
    assert all(id(w) in keys for w in held)
    add_tool(d, "tool_0", None, {"cmd": "cat", "description": "write files"})   # a change
    reg.rescan([os.path.join(d, "tool_0.meta")])
    idx.sync()
    keys = {id(k) for k in idx._post}
    assert all(id(w) in keys for terms in idx._terms for w in terms)
