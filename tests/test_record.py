"""toolsrv.record: the hand-written record classes keep what their dataclasses gave."""
from __future__ import annotations

import copy
import importlib
import inspect
from dataclasses import FrozenInstanceError
from pathlib import Path

import pytest

import toolsrv
from toolsrv.record import Frozen, Plain, Record, replace


def _modules() -> list[str]:
    """Every module of the package, but its entry point (__main__ runs the command) and
    its data (the bundled tools' own scripts); __init__s import nothing."""
    top = Path(toolsrv.__file__).parent
    out = []
    for path in sorted(top.rglob("*.py")):
        rel = path.relative_to(top).with_suffix("")
        if rel.parts[0] != "data" and rel.name not in ("__main__", "__init__"):
            out.append("toolsrv." + ".".join(rel.parts))
    return out


def record_classes() -> list[type]:
    """Every class of the package built on the record helper, found by importing every
    module: a record class added anywhere is checked without a list to update."""
    for name in _modules():
        importlib.import_module(name)
    out, todo = set(), [Plain]
    while todo:
        for c in todo.pop().__subclasses__():
            todo.append(c)
            if c.__module__.startswith("toolsrv.") and c.__module__ != "toolsrv.record":
                out.add(c)
    return sorted(out, key=lambda c: (c.__module__, c.__qualname__))


RECORDS = record_classes()


@pytest.mark.parametrize("cls", RECORDS, ids=lambda c: f"{c.__module__}.{c.__qualname__}")
def test_fields_are_the_constructor_parameters(cls) -> None:
    """FIELDS (repr, ==, hash, replace) and __init__ must not drift apart."""
    assert list(inspect.signature(cls).parameters) == list(cls.FIELDS)


@pytest.mark.parametrize("cls", [c for c in RECORDS if issubclass(c, Frozen)],
                         ids=lambda c: f"{c.__module__}.{c.__qualname__}")
def test_frozen_fields_are_annotated(cls) -> None:
    """A Frozen record stores its fields through setfield, which the type checker cannot
    follow: each field is annotated at class level (as h11's events are) instead."""
    annotated = {n for k in cls.__mro__ for n in vars(k).get("__annotations__", {})}
    assert [n for n in cls.FIELDS if n not in annotated] == []


def test_the_walk_finds_every_record() -> None:
    names = {c.__qualname__ for c in RECORDS}
    # at least the 21 former dataclasses, and classes no list named (two had drifted)
    assert len(RECORDS) >= 21 and {"Addr", "Call", "Entry", "RemoteResult", "Tool"} <= names


def test_drifted_records_are_whole_again() -> None:
    from toolsrv.hosts.imports import RemoteResult
    r = replace(RemoteResult(b"out"), exit_code=1)      # raised TypeError
    assert r == RemoteResult(b"out", exit_code=1) and r.timed_out is False


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
