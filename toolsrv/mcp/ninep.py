"""The MCP face's 9P client is toolsrv/hosts/ninep.py, which imports of other hosts'
trees (toolsrv/hosts/) use too: it sits below app so that both can."""
from __future__ import annotations

from ..hosts.ninep import MSIZE, NineP, NinePError, nothing_answers

__all__ = ["MSIZE", "NineP", "NinePError", "nothing_answers"]
