"""Plain record classes: what @dataclass gave toolsrv's value types, without its cost.

Theory of operation.  Making a dataclass execs generated code (__init__, __repr__, __eq__,
...) at import time: 1-2 ms a class, 20-50 ms for the 21 the server imported at start-up,
a third of toolsrv's own import time (doc/performance.md, Start-up).  These classes are
written out by hand instead.  Each names its fields, in order, in FIELDS, and writes its
own __init__ taking them in that order, positionally or by keyword, with the defaults the
dataclass had; a field whose dataclass default was a factory (a fresh list, dict, Event,
serial number) defaults to None, which __init__ replaces with a fresh one.  A base from
here gives what the dataclass options gave:

    Plain     repr `Name(field=value, ...)` (recursion shows as ...); == and hash are
              identity (dataclass eq=False)
    Record    the same repr; == when of the same class with equal fields; unhashable,
              as a mutable dataclass with eq is
    Frozen    Record's repr and ==, hashable, and immutable: assigning or deleting an
              attribute raises dataclasses.FrozenInstanceError; __init__ stores through
              object.__setattr__ (`setfield`), as a frozen dataclass's does.  A
              functools.cached_property still works (it writes the instance's __dict__).

A Frozen record also annotates its fields at class level (`kind: str`), as h11's events
do: its __init__ stores them through setfield, which a type checker cannot follow, and an
annotation without a value costs nothing at import (tests/test_record.py checks each).

`replace(obj, **changes)` is dataclasses.replace for these classes.  proto's messages are
the same idea with __slots__ (proto/messages.py); these keep an instance __dict__.
"""
from __future__ import annotations

from reprlib import recursive_repr
from typing import Any, TypeVar

R = TypeVar("R", bound="Plain")
setfield = object.__setattr__   # stores a field of a Frozen record, in its __init__


class Plain:
    """Base of a record class compared by identity; see the module's doc."""
    __slots__ = ()
    FIELDS: tuple[str, ...] = ()

    @recursive_repr()
    def __repr__(self) -> str:
        fields = ", ".join(f"{n}={getattr(self, n)!r}" for n in self.FIELDS)
        return f"{type(self).__qualname__}({fields})"


class Record(Plain):
    """Base of a mutable record class compared by its fields; see the module's doc."""
    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return [getattr(self, n) for n in self.FIELDS] == \
            [getattr(other, n) for n in self.FIELDS]

    __hash__ = None  # type: ignore[assignment]


class Frozen(Record):
    """Base of an immutable record class; see the module's doc."""
    __slots__ = ()

    # hashable again below an unhashable base, as a frozen dataclass is: not an override
    # mypy allows (Record's __hash__ is None)
    def __hash__(self) -> int:  # type: ignore[override]
        return hash(tuple([getattr(self, n) for n in self.FIELDS]))

    def __setattr__(self, name: str, value: Any) -> None:
        raise _frozen(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise _frozen(f"cannot delete field {name!r}")


def _frozen(text: str) -> AttributeError:
    from dataclasses import FrozenInstanceError   # only on a misuse: not at import
    return FrozenInstanceError(text)


def replace(obj: R, **changes: Any) -> R:
    """A copy of `obj` with the named fields changed (dataclasses.replace)."""
    for name in obj.FIELDS:
        if name not in changes:
            changes[name] = getattr(obj, name)
    return type(obj)(**changes)
