"""The face's search mode: what tools/list lists when `toolsrv mcp --search` is given.

Theory of operation.  `always` (`--search`, as before) lists search_tools and call_tool
instead of the registry.  `auto` (`--search auto`) lists every tool while their
definitions fit the budget, and the two past it: the budget is in bytes of the
definitions tools/list would carry (each tool's MCP definition as compact UTF-8 JSON,
summed over the tools the client may call), BUDGET by default (doc/mcp.md says why).
Each tools/list decides again on the registry as it is then, so a registry that grows
past the budget (a revision moves; the face's watcher has already sent list_changed)
is listed the other way at the client's next tools/list.  In both modes the tools of
`--pin` are listed beside the two (a pin no tool has is said on stderr, and listed once
one appears), and search_tools' description ends with what the catalog holds
(catalog.py).  Whatever is listed, search_tools and call_tool can be called (a client
that listed before a switch keeps working) and every tool served can be called by its
name (face.py); over 9P nothing changes (`tools/search` is the server's).

Definitions are measured once per reading of the registry (face.py keeps one dict per
revision), and only until their sum passes the budget; the search tool is made once per
catalog.  So a tools/list of 10,000 tools encodes a hundred or so, not 10,000.  The
catalog's summary still reads every tool (0.2 s at 10,000, once per registry read), and
the registry's size is not the client's to set but may be another host's (an imported
one): the face calls `listing` through `listed`, in a worker thread of the mode's own,
one listing at a time, never on its event loop.
"""
from __future__ import annotations

import asyncio
import json
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

from .catalog import summary
from ..tools import CALL_TOOL, SEARCH_TOOL, SEARCH_TOOLS, Tool, closest

ALWAYS, AUTO = "always", "auto"
KINDS = (ALWAYS, AUTO)
BUDGET = 70_000     # bytes: 20,000 tokens at 3.5 bytes a token, 10% of a 200k window


def size(tool: Tool) -> int:
    """The bytes of a tool's definition in tools/list: its MCP JSON, compact, UTF-8."""
    return len(json.dumps(tool.wire(), ensure_ascii=False, separators=(",", ":")).encode())


class Mode:
    """What tools/list lists in search mode `kind` (ALWAYS or AUTO)."""

    def __init__(self, kind: str = ALWAYS, budget: int = BUDGET,
                 pins: list[str] | None = None) -> None:
        if kind not in KINDS:
            raise ValueError(f"search mode {kind!r}: give one of {', '.join(KINDS)}")
        self.kind, self.budget = kind, budget
        self.pins = list(dict.fromkeys(pins or []))
        self._sized: tuple[dict[str, Tool], dict[str, int]] | None = None
        self._described: dict[tuple[str, ...], Tool] = {}    # a catalog -> search_tools
        self._searching: bool | None = None     # the last decision, said when it changes
        self._said: set[str] = set()            # pins said to name no tool
        self._worker: ThreadPoolExecutor | None = None

    async def listed(self, tools: dict[str, Tool],
                     may: Callable[[str], bool] | None = None) -> list[Tool]:
        """`listing`, in the mode's worker thread (module comment)."""
        if self._worker is None:
            self._worker = ThreadPoolExecutor(1, thread_name_prefix="toolsrv-mcp-search")
        return await asyncio.get_running_loop().run_in_executor(
            self._worker, self.listing, tools, may)

    def instructions(self) -> str:
        """What the server's instructions add."""
        pinned = f" The tools {', '.join(self.pins)} are listed beside them." \
            if self.pins else ""
        if self.kind == ALWAYS:
            return (" This server lists two tools instead of its whole registry: "
                    "search_tools finds the tools for a need described in words, and "
                    "call_tool calls one by name with its arguments." + pinned)
        return (f" This server lists all its tools while their definitions fit "
                f"{self.budget:,} bytes; past that it lists two tools instead: search_tools "
                "finds the tools for a need described in words, and call_tool calls one by "
                "name with its arguments (notifications/tools/list_changed says when the "
                "list changes; both can be called either way)." + pinned)

    def listing(self, tools: dict[str, Tool],
                may: Callable[[str], bool] | None = None) -> list[Tool]:
        """What tools/list lists, of the registry `tools` (face.py's, narrowed by --tools),
        for a client that may call what `may` allows (all without it): the search tools
        first, then the pinned ones; or, in auto mode under the budget, every tool."""
        visible = [t for t in tools.values() if may is None or may(t.name)]
        self._unknown_pins(tools)
        if self.kind == AUTO:
            total = self._measure(tools, visible)
            searching = total > self.budget
            if may is None:
                self._say(searching, len(visible), total)
            if not searching:
                return visible
        pinned = [tools[n] for n in self.pins if n in tools and (may is None or may(n))
                  and n not in (SEARCH_TOOL, CALL_TOOL)]
        return [self._search_tool(visible), SEARCH_TOOLS[1], *pinned]

    def _measure(self, tools: dict[str, Tool], visible: list[Tool]) -> int:
        """The bytes of the visible tools' definitions, summed until past the budget
        (no more is needed to decide): each tool encoded once per registry read."""
        if self._sized is None or self._sized[0] is not tools:
            self._sized = (tools, {})
        sizes, total = self._sized[1], 0
        for t in visible:
            n = sizes.get(t.name)
            if n is None:
                n = sizes[t.name] = size(t)
            total += n
            if total > self.budget:
                break
        return total

    def _search_tool(self, visible: list[Tool]) -> Tool:
        """search_tools, its description ending with what the catalog holds."""
        names = tuple(t.name for t in visible)
        if names not in self._described:
            if len(self._described) >= 16:     # a registry read again, or many principals
                self._described.clear()
            base = SEARCH_TOOLS[0]
            said = summary(visible)
            desc = base.description + (f" {said} Search them whenever no listed tool fits "
                                       "the task." if said else "")
            self._described[names] = Tool(
                base.name, desc, base.schema, base.read_only, base.tier, title=base.title,
                output_schema=base.output_schema)
        return self._described[names]

    def _say(self, searching: bool, n: int, total: int) -> None:
        """Say on stderr when auto mode switches (and how it starts)."""
        if searching == self._searching:
            return
        self._searching = searching
        what = ("search_tools and call_tool" + (f" and {len(self.pins)} pinned"
                                                 if self.pins else "") + " instead") \
            if searching else "every tool"
        print(f"toolsrv mcp: --search auto: {n:,} tools, "
              f"{'past' if searching else 'within'} the budget of {self.budget:,} bytes of "
              f"definitions{' (' + format(total, ',') + ')' if not searching else ''}: "
              f"listing {what}", file=sys.stderr, flush=True)

    def _unknown_pins(self, tools: dict[str, Tool]) -> None:
        for name in self.pins:
            if name not in tools and name not in self._said:
                self._said.add(name)
                print(f"toolsrv mcp: --pin {name}: no such tool in the registry (listed "
                      f"once one appears); {closest(name, list(tools)).split(' (search_')[0]}",
                      file=sys.stderr, flush=True)


def mode_of(args: Any) -> Mode | None:
    """The mode `toolsrv mcp`'s options ask for: --search [always|auto], --search-budget,
    --pin (each a name or a comma-separated list, repeatable); None without --search
    (every tool is listed, pinned or not)."""
    if not getattr(args, "search", None):
        return None
    pins = [n.strip() for p in getattr(args, "pin", None) or [] for n in p.split(",")]
    budget = getattr(args, "search_budget", None)
    return Mode(args.search, BUDGET if budget is None else budget, [n for n in pins if n])
