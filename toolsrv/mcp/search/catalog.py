"""What the catalog holds, in a sentence: the largest groups of its tools, with counts,
said in search_tools' description (mode.py) so a model that sees only the two search
tools knows what there is to find, and when to search.

Theory of operation.  A group is a name prefix, the name up to its first `_`, `-` or `.`
(`file_read` and `file_write` are `file_*`), of two tools or more: the largest GROUPS,
largest first (ties by name).  The tools in none of those are named when they are NAMED
or fewer, else summed up by the words of their descriptions (the first paragraph,
lowercased, STOP words and words shorter than 4 letters left out), each counted once per
tool: the KEYWORDS most frequent of two tools or more (and not of all of them).  Both
follow the tools given (the face's registry, narrowed by --tools and an OAuth
principal's scopes), so the sentence never names a group a client cannot call.
"""
from __future__ import annotations

import re
from collections import Counter
from itertools import chain
from typing import Iterable

from ..tools import Tool

GROUPS = 8          # name-prefix groups said at most
KEYWORDS = 6        # keywords said at most, for the tools in no group said
NAMED = 8           # that many tools in no group, or fewer, are named instead
_PREFIX = re.compile(r"([A-Za-z0-9]+)([_.-])[A-Za-z0-9]")
_PUNCT = ".,;:!?()[]{}'\"`*"
STOP = frozenset("""
about after also and any are args argument arguments back been before being both but
call calls can does each either every file's from full given gives have into its just
like list lists more most much must name names none only other over path paths read
returns same some such than that the their them then there these they this those tool
tools under until used uses using value values what when where which while will with
without your""".split())


def groups(names: Iterable[str]) -> list[tuple[str, int]]:
    """The largest name-prefix groups of two tools or more: [("file_*", 5), ...]."""
    count: Counter[str] = Counter()
    for n in names:
        m = _PREFIX.match(n)
        if m:
            count[f"{m.group(1)}{m.group(2)}*"] += 1
    big = sorted(((g, k) for g, k in count.items() if k >= 2), key=lambda x: (-x[1], x[0]))
    return big[:GROUPS]


def keywords(tools: list[Tool]) -> list[tuple[str, int]]:
    """The most frequent words of the tools' descriptions, each counted once per tool (a
    word of every one of three or more says nothing, and is left out)."""
    count = Counter(chain.from_iterable(
        {w for w in (x.strip(_PUNCT) for x in t.description.split("\n\n", 1)[0].lower()
                                                     .split())
         if len(w) >= 4 and w.isalnum() and w.isascii() and w[0].isalpha()} - STOP
        for t in tools))
    every = len(tools) if len(tools) > 2 else 0
    big = sorted(((w, k) for w, k in count.items() if k >= 2 and k != every),
                 key=lambda x: (-x[1], x[0]))
    return big[:KEYWORDS]


def summary(tools: list[Tool]) -> str:
    """The catalog in a sentence: "The catalog holds 1,204 tools: file_* (40), lsp_* (25),
    ...; and 300 others, about: http (12), image (8)." (or "; and 2 others: shell,
    script."; "" for an empty catalog)."""
    if not tools:
        return ""
    said = groups(t.name for t in tools)
    parts = [f"{g} ({k:,})" for g, k in said]
    prefixes = tuple(g[:-1] for g, _ in said)
    rest = [t for t in tools if not t.name.startswith(prefixes)] if prefixes else tools
    text = f"The catalog holds {len(tools):,} tool{'s' if len(tools) != 1 else ''}"
    if parts:
        text += ": " + ", ".join(parts)
    if rest and parts:
        text += f"; and {len(rest):,} other{'s' if len(rest) != 1 else ''}"
    if rest and len(rest) <= NAMED:
        return text + ": " + ", ".join(sorted(
            t.name for t in rest)) + "."
    words = keywords(rest)
    if words:
        text += ", about: " + ", ".join(
            f"{w} ({k:,})" for w, k in words)
    return text + "."
