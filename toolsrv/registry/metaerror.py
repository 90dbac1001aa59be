# toolsrv/registry/metaerror.py — the error of an unusable .meta, and how its messages name a
# value's JSON type.
#
# Theory of operation.  Every check of a .meta (metafile.py, residentmeta.py) raises MetaError
# with the reason tools/errors shows: the field's path, what it must be and what it was
# (json_kind: "an array", "null", ...).
from __future__ import annotations


class MetaError(ValueError):
    """A `.meta` file is unusable; str(err) is the reason shown in tools/errors."""


def json_kind(v: object) -> str:
    """The JSON name of a parsed value's type, for messages."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, (int, float)):
        return "a number"
    if isinstance(v, str):
        return "a string"
    return "an array" if isinstance(v, list) else "an object"
