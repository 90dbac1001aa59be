"""toolsrv.record: the hand-written record classes keep what their dataclasses gave."""
from __future__ import annotations

import copy
import importlib
import inspect
from dataclasses import FrozenInstanceError

import pytest

from toolsrv.record import Frozen, Plain, Record, replace

MODULES = ["app", "options", "tree.calls.scheduler", "serve.dial", "serve.fid", "registry.metafile",
           "registry.registry", "registry.resolve", "run.runner", "run.sandbox", "serve.server",
           "tree.state.sessions", "serve.transport"]


def record_classes() -> list[type]:
    out = []
    for m in MODULES:
        mod = importlib.import_module(f"toolsrv.{m}")
        out += [c for c in vars(mod).values()
                if isinstance(c, type) and issubclass(c, Plain) and c.__module__ == mod.__name__]
    return out


@pytest.mark.parametrize("cls", record_classes(), ids=lambda c: c.__name__)
def test_fields_are_the_constructor_parameters(cls) -> None:
    """FIELDS (repr, ==, hash, replace) and __init__ must not drift apart."""
    assert list(inspect.signature(cls).parameters) == list(cls.FIELDS)


def test_every_former_dataclass_is_a_record() -> None:
    assert len(record_classes()) == 21


class P(Plain):
    FIELDS = ("a", "b")

    def __init__(self, a: int, b: list | None = None) -> None:
        self.a = a
        self.b = [] if b is None else b


class R(Record):
    FIELDS = ("a", "b")

    def __init__(self, a: int, b: int = 0) -> None:
        self.a = a
        self.b = b


class F(Frozen):
    FIELDS = ("a", "b")

    def __init__(self, a: int, b: int = 0) -> None:
        object.__setattr__(self, "a", a)
        object.__setattr__(self, "b", b)


def test_plain_is_compared_by_identity() -> None:
    p = P(1)
    assert p != P(1) and p == p and hash(p) == hash(p)
    assert repr(p) == "P(a=1, b=[])"
    p.b.append(p)                                   # a cycle shows as ...
    assert repr(p) == "P(a=1, b=[...])"
    assert P(1).b is not P(1).b                     # a fresh default each time


def test_record_is_compared_by_fields_and_unhashable() -> None:
    assert R(1, 2) == R(1, 2) != R(1, 3)
    assert R(1) != F(1) and R(1) != (1, 0)
    with pytest.raises(TypeError):
        hash(R(1))
    r = R(1)
    r.b = 5
    assert r == R(1, 5) and repr(r) == "R(a=1, b=5)"
    assert replace(r, a=2) == R(2, 5) and r == R(1, 5)
    with pytest.raises(TypeError):
        replace(r, c=1)


def test_frozen_is_immutable_and_hashable() -> None:
    f = F(1, 2)
    assert f == F(1, 2) and hash(f) == hash(F(1, 2)) and len({f, F(1, 2), F(1)}) == 2
    for name in ("a", "other"):
        with pytest.raises(FrozenInstanceError):
            setattr(f, name, 3)
        with pytest.raises(FrozenInstanceError):
            delattr(f, name)
    assert f == F(1, 2) and copy.copy(f) == f and copy.deepcopy(f) == f
    assert replace(f, b=3) == F(1, 3)
