"""registry/search/fusion.py: every method keeps search's contract (free slots 0, the best near
1, nothing negative), and a tool first in both rankers is first fused."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

np = pytest.importorskip("numpy")

from toolsrv.registry.search import fusion  # noqa: E402

CASES = [(m, w, k) for m in fusion.METHODS for w in (0.3, 0.6) for k in (10.0,)]


@pytest.mark.parametrize("how", CASES)
@settings(max_examples=60, deadline=None)
@given(data=st.lists(st.tuples(st.floats(0, 30), st.floats(-1, 1)), min_size=2, max_size=40),
       free=st.integers(0, 3))
def test_contract(how, data, free):
    lex = np.array([d[0] for d in data] + [0.0] * free)
    sem = np.array([d[1] for d in data] + [0.0] * free)
    alive = np.array([True] * len(data) + [False] * free) if free else None
    before = lex.copy()
    out = fusion.fuse(np, lex, sem, alive, how)
    assert (lex == before).all()
    assert (out >= 0).all() and float(out.max()) <= 1.0 + 1e-9
    if free:
        assert (out[len(data):] == 0).all()


@pytest.mark.parametrize("how", CASES)
def test_first_in_both_is_first(how):
    lex = np.array([1.0, 5.0, 2.0, 0.0, 0.5, 0.1, 0.0])
    sem = np.array([0.2, 0.9, 0.5, 0.1, 0.3, 0.0, 0.4])
    out = fusion.fuse(np, lex, sem, None, how)
    assert int(out.argmax()) == 1 and out[1] == pytest.approx(1.0)


def test_the_shipped_fusion_is_a_known_method():
    assert fusion.FUSION[0] in fusion.METHODS and 0 < fusion.FUSION[1] < 1
    with pytest.raises(ValueError):
        fusion.fuse(np, np.ones(3), np.ones(3), None, ("nope", 0.5, 0))
