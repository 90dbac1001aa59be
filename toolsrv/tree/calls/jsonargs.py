"""A call's args: JSON accumulated across Twrites, then validated.

`json_state(text)` says whether the bytes so far are one complete JSON value,
a prefix that may still become one (wait for more), or bytes that can no
longer become valid JSON (fail now, naming where).  JSON is taken strictly: NaN,
Infinity and numbers past a float's range (1e999) are not JSON, and a value nested too
deep for the parser is refused by name.  `validate(tool, args)`
checks the object against the tool's schema with jsonschema and words the
first error as `invalid args: <path>: <reason> (invalid argument)`, which
9pfuse maps to EINVAL: the path and reason quote the args and the schema, so any of
9pfuse's words in them that would outrank "argument" is defused (errors.defuse).  A
validation is bounded (schemaref: regexes share a budget, uniqueItems is linear, and it
applies at most STEP_BUDGET keywords); one that still cannot finish (a pattern or the
steps past their budget, recursion without end) is an `invalid args` that says so, never
an internal error.  Compiled validators are cached per schema object; `validator`
is the one way any schema becomes a validator (refs resolve only inside the schema).
"""
from __future__ import annotations

import json
import re
from typing import Any


from ...errors import P9Error, fit, quoting
from ...registry.schemaref import PATTERN_BUDGET, STEP_BUDGET, PatternTooSlow, StepsSpent, \
    bounded, unresolved, validator as schema_validator

_LITERALS = ("true", "false", "null")
_NUMBER_TAIL = re.compile(r"-?[0-9]*\.?[0-9]*(?:[eE][-+]?[0-9]*)?\s*\Z")
_validators: dict[int, tuple[Any, Any]] = {}

class _NotJSON(ValueError):
    """A token Python's json takes and JSON does not (NaN, Infinity, 1e999)."""


def _constant(name: str) -> Any:
    raise _NotJSON(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise _NotJSON(f"{text[:40]} is past the range of a number")
    return value


_DECODER = json.JSONDecoder(parse_constant=_constant, parse_float=_finite)  # made once


def json_state(text: str) -> tuple[str, Any]:
    """("complete", value) | ("incomplete", None) | ("invalid", reason)."""
    if not text.strip():
        return "incomplete", None
    try:
        return "complete", _DECODER.decode(text)
    except json.JSONDecodeError as e:
        if _could_continue(text, e):
            return "incomplete", None
        return "invalid", f"line {e.lineno} column {e.colno}: {e.msg}"
    except RecursionError:
        return "invalid", "nested too deeply to parse"
    except ValueError as e:   # _NotJSON, an integer of more digits than int() takes
        return "invalid", str(e) if isinstance(e, _NotJSON) else f"not usable as JSON: {e}"


def _could_continue(text: str, e: json.JSONDecodeError) -> bool:
    """True when the error is only that the text stops too early."""
    rest = text[e.pos:]
    if e.msg.startswith("Unterminated string"):
        return True
    if e.msg.startswith("Invalid \\uXXXX escape") or e.msg.startswith("Invalid \\escape"):
        return len(text) - e.pos < 6 and "\"" not in text[e.pos:]
    if e.msg == "Extra data":
        return False
    if not rest.strip():
        return True                                  # "Expecting ..." at the end
    word = rest.rstrip()
    if any(lit.startswith(word) for lit in _LITERALS):
        return True                                  # tru, fals, nu
    # a number cut short: "1." "1e" "-" — json stops before the tail
    head = text[:e.pos]
    m = re.search(r"-?[0-9.eE+-]*\Z", head)
    tail = (m.group(0) if m else "") + rest
    return bool(_NUMBER_TAIL.match(tail)) and e.msg.startswith("Expecting")


def validator(schema: dict) -> Any:
    """The validator for any schema (call args, an MCP tool's outputSchema, ...): its own
    draft, and refs resolve only inside the schema; nothing is fetched (registry/
    schemaref.py).  Cached per schema object."""
    hit = _validators.get(id(schema))
    if hit is not None and hit[0] is schema:
        return hit[1]
    v = schema_validator(schema)   # imports jsonschema here, not at start-up
    _validators[id(schema)] = (schema, v)
    if len(_validators) > 4096:
        _validators.clear()
    return v


def error_path(err: Any) -> str:
    out = ""
    for p in err.absolute_path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


def validate(tool: Any, args: dict, steps: int = STEP_BUDGET) -> None:
    """Raise P9Error naming the failing field when args do not fit the tool's schema.

    Uses the tool's own compiled validator (the registry builds it for the
    draft the schema declares), or compiles one for a bare schema.  The check may apply
    `steps` keywords: past STEP_BUDGET the args are refused; given fewer, StepsSpent is
    raised for the caller to check again with the whole budget (off its loop)."""
    v = getattr(tool, "validator", None) or validator(tool.schema)
    try:
        with bounded(steps):
            if v.is_valid(args):
                return
            from jsonschema.exceptions import best_match
            err = best_match(v.iter_errors(args))
    except PatternTooSlow as e:
        raise invalid(f"pattern {e.pattern!r} ran over {PATTERN_BUDGET:g} s on these args; "
                      "nothing was called") from None
    except StepsSpent:
        if steps < STEP_BUDGET:
            raise
        raise P9Error(fit("invalid args: ", f"over {STEP_BUDGET:,} steps to check them "
                          "against the schema (its budget); nothing was called")) from None
    except RecursionError:
        raise P9Error(fit("invalid args: ", "the schema could not be applied: it recurses "
                          "without end on these args (nested too deeply, or a $ref "
                          "loop); nothing was called")) from None
    except Exception as e:          # a $ref outside the schema: refused, never fetched
        why = unresolved(e)
        if why is None:
            raise
        raise P9Error(fit("invalid args: ", f"the tool's schema: {why}")) from None
    if err is not None:
        where = error_path(err)
        message = as_json(err.message, err.instance)
        if err.validator == "pattern" and isinstance(err.validator_value, str):
            # as the schema spells it ('\\S' in jsonschema's repr is the pattern \S)
            message = f"{err.instance!r} does not match the pattern {err.validator_value}"
        raise invalid((f"{where}: " if where else "") + message)


def as_json(message: str, instance: Any) -> str:
    """jsonschema's message with the value it begins with as JSON, when Python writes it
    otherwise (`null is not of type 'string'`, not `None ...`; true, false, objects); a
    string keeps jsonschema's quotes."""
    lead = repr(instance)
    if isinstance(instance, str) or not message.startswith(lead):
        return message
    try:
        return json.dumps(instance, ensure_ascii=False) + message[len(lead):]
    except (TypeError, ValueError):
        return message


def invalid(detail: str) -> P9Error:
    """`invalid args: DETAIL (invalid argument)`, fitted, with DETAIL's words that would
    outrank "argument" for 9pfuse defused in the Rerror (the args and schema it quotes are
    not toolsrv's words); the log has them as written."""
    return quoting("invalid args: ", detail, "argument")


TRACEPARENT = re.compile(r"(?!ff)[0-9a-f]{2}-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}"
                          r"-[0-9a-f]{2}\Z")
META_KEYS = ("traceparent", "principal")


def take_meta(args: dict) -> dict[str, str]:
    """Remove "_meta" from args: the call's context, not its arguments (toolsrv(4)):
    `traceparent`, a W3C trace context's, and `principal`, whom the writer acts for (the
    MCP face's OAuth subject); either may be left out.  P9Error for anything else."""
    if "_meta" not in args:
        return {}
    v = args.pop("_meta")
    if not isinstance(v, dict):
        raise P9Error(fit("invalid args: ", "_meta: must be an object (of traceparent, "
                          "principal)"))
    for k, x in v.items():
        if k not in META_KEYS or not isinstance(x, str):
            raise P9Error(fit("invalid args: ", f"_meta: {k!r} is not a string of "
                              "traceparent or principal"))
    if "traceparent" in v and not TRACEPARENT.match(v["traceparent"]):
        raise P9Error(fit("invalid args: ", "_meta.traceparent: not a W3C traceparent "
                          "(00-<32 hex>-<16 hex>-<2 hex>)"))
    if not 0 < len(v.get("principal", "-")) <= 200 or not v.get("principal", "-").isprintable():
        raise P9Error(fit("invalid args: ", "_meta.principal: 1 to 200 printable "
                          "characters"))
    return dict(v)


def take_elevated(args: dict) -> bool:
    """Remove "elevated" from args; True when it asks to run outside the sandbox."""
    if "elevated" not in args:
        return False
    v = args.pop("elevated")
    if not isinstance(v, bool):
        raise P9Error(fit("invalid args: ", "elevated: must be true or false"))
    return v
