"""A tool's timeout argument, bounded by the call's own time limit (issue 29, item 12).

Theory of operation.  A `.meta` may name one of its args as the run's timeout
(`"timeoutArg": "timeout"`, a number of seconds): the tool stops its own work then.  The
call's time limit ends the whole run regardless: the sandbox profile's `general.timeout`,
else `serve --timeout`, exactly as the runner picks it.  A value at or above that limit
can never be honoured (the run is killed first, and a resident tool loses its state), so
the schema served states the limit: `exclusiveMaximum` is the limit (a `maximum` at or
above it is dropped, one below it kept) and the description says so; a call with such a
value is refused on its write, naming the limit, where it comes from, and what to do.

The limit is looked up where the schema is served or checked, so a profile edited on disk
applies at once: tools/<tool>/{meta,schema} under the tool's declared `sandbox` profile,
else `default`; an agent's `schemas` and its calls under its session's profile (a tool's
declared one first, as the scheduler runs it).  The bounded schema is made once per tool
object and limit (a small cache), never by reading anything the schema names.  Another
host's tool (toolsrv/hosts) is left alone: it runs under that host's limit, and the schema
that host serves is bounded there.
"""
from __future__ import annotations

import copy
import json
from typing import Any

from ...errors import P9Error
from ...run.sandbox import load_profile
from .scheduler import limit_source
from ...errors import fit

FIELD = "timeoutArg"
_cache: dict[tuple[int, float], tuple[Any, dict]] = {}
_CACHE_MAX = 256


def arg_of(tool: Any) -> str | None:
    """The name of the tool's timeout argument, when its .meta names one it has."""
    if getattr(tool, "remote", None) is not None:
        return None             # another host's tool: its schema comes bounded by its server
    name = (getattr(tool, "extra", None) or {}).get(FIELD)
    schema = getattr(tool, "schema", None)
    props = schema.get("properties") if isinstance(schema, dict) else None
    if isinstance(name, str) and isinstance(props, dict) and isinstance(props.get(name), dict):
        return name
    return None


def limit(tool: Any, profile_name: str | None, server_timeout: float | None
          ) -> tuple[float, str] | None:
    """(seconds, where they come from) of a call of `tool` under that profile; None when
    the tool has no timeout argument or the server has no time limit to state."""
    if arg_of(tool) is None or not server_timeout:
        return None
    declared = (getattr(tool, "extra", None) or {}).get("sandbox")
    name = declared if isinstance(declared, str) else (profile_name or "default")
    try:
        profile = load_profile(name)
    except Exception:           # a bad profile fails the call itself, saying so
        profile = None
    seconds = getattr(profile, "timeout", None) or server_timeout
    return float(seconds), limit_source(profile) if profile is not None else \
        limit_source(None)


def schema(tool: Any, lim: tuple[float, str] | None) -> Any:
    """The tool's args schema with its timeout argument bounded by `lim`."""
    arg = arg_of(tool)
    if lim is None or arg is None:
        return tool.schema
    key = (id(tool), lim[0])
    got = _cache.get(key)
    if got is not None and got[0] is tool:
        return got[1]
    out = copy.deepcopy(tool.schema)
    prop = out["properties"][arg]
    seconds = lim[0]
    top = prop.get("maximum")
    if isinstance(top, (int, float)) and not isinstance(top, bool) and top >= seconds:
        del prop["maximum"]
    ex = prop.get("exclusiveMaximum")
    if not (isinstance(ex, (int, float)) and not isinstance(ex, bool) and ex <= seconds):
        prop["exclusiveMaximum"] = seconds
    said = f"Less than {seconds:g}: the call's time limit in seconds."
    prop["description"] = f"{prop['description']} {said}" if isinstance(
        prop.get("description"), str) and prop["description"] else said
    if len(_cache) >= _CACHE_MAX:
        _cache.clear()
    _cache[key] = (tool, out)
    return out


def meta_text(tool: Any, lim: tuple[float, str] | None) -> bytes | None:
    """tools/<tool>/meta with the bound, or None when there is none to state."""
    if lim is None:
        return None
    return _pretty({**tool.meta_json(), "args": schema(tool, lim)})


def schema_text(tool: Any, lim: tuple[float, str] | None) -> bytes | None:
    """tools/<tool>/schema with the bound, or None when there is none to state."""
    if lim is None:
        return None
    return _pretty(schema(tool, lim))


def check(tool: Any, args: dict, lim: tuple[float, str] | None) -> None:
    """Refuse a timeout argument the call's time limit would cut (a P9Error for the write)."""
    arg = arg_of(tool)
    if lim is None or arg is None:
        return
    v = args.get(arg)
    if isinstance(v, (int, float)) and not isinstance(v, bool) and v >= lim[0]:
        short = (f"{arg}: {v:g} is not below {lim[0]:g}, the call's time limit in seconds: "
                 f"give a smaller {arg}")
        raise P9Error(fit("invalid args: ", short),          # the log has where it comes from
                      f"invalid args: {short} (the limit: {lim[1]}) (invalid argument)")


def _pretty(obj: Any) -> bytes:
    return (json.dumps(obj, indent=2, ensure_ascii=False) + "\n").encode()
