"""policy.yaml read and checked: who may load and call which tools, and how often.

The format (doc/sandbox.md, Policy).

    default:                       # every principal not named below, and what they inherit
      tools: ["*"]                 # globs of the tools it may load and call
      deny: ["deploy_*"]           # globs it may not, whatever `tools` says
      confirm: ["file_write"]      # globs whose calls the approval broker must confirm
      limits: {calls_per_minute: 120, runs: 4, sessions: 8}
    principals:
      "uid:1000": {tools: ["file_*", "lsp_*"]}

Rule 1.  Keys given replace the default's, keys not given inherit it: `uid:1000` above may
call file_* and lsp_* (its own `tools`), never deploy_* (the default's `deny`), confirms
file_write and has the default's limits.  `limits` merges one limit at a time: a
principal's `limits: {runs: 1}` keeps the default's calls_per_minute; a limit set to null
is no limit.  Without `default`, the default allows every tool with no limits.

Rule 2.  A principal is named as the audit trail knows it (who.py): `uid:N` (a Unix
socket's peer), `tls:SUBJECT` (a client certificate's subject, `tls:O=fleet,CN=agent1`),
`host:ADDR` (a TCP peer), `token:sha256:HEAD` (the MCP face's static bearer token, by its
hash's first 12 hex digits) and `oauth:SUB` (an OAuth token's subject).

Rule 3.  Everything is checked: an unknown key, a value of the wrong type or a principal
of no known kind is a PolicyError naming the file, the key and its line.  A rule that
refuses names itself (`Rule.where`): `principals."uid:1000".tools`.
"""
from __future__ import annotations

import fnmatch
import os
from typing import Any

KEYS = ("tools", "deny", "confirm", "limits")
LIMITS = ("calls_per_minute", "runs", "sessions")
KINDS = ("uid", "tls", "host", "token", "oauth")
MAX_RATE = 100_000        # calls_per_minute: the window keeps one time per call allowed
TOP = ("default", "principals")


class PolicyError(ValueError):
    """policy.yaml is not a policy: what is wrong, where."""


class Rule:
    """One principal's rule, the default's keys filled in (rule 1): globs, limits, and
    for each key the place in the file it came from (`where`)."""

    def __init__(self, tools: tuple[str, ...] = ("*",), deny: tuple[str, ...] = (),
                 confirm: tuple[str, ...] = (), limits: dict[str, int | None] | None = None,
                 where: dict[str, str] | None = None) -> None:
        self.tools, self.deny, self.confirm = tools, deny, confirm
        self.limits: dict[str, int | None] = dict(limits or {})
        self.where: dict[str, str] = dict(where or {})

    def named(self, key: str) -> str:
        """Where this rule's `key` is written (`default.tools`), or that nothing says it."""
        return self.where.get(key, f"default.{key}, unset")

    def verdict(self, tool: str) -> tuple[str, str] | None:
        """None when `tool` may be called freely; ("deny", glob), ("tools", "") when it is
        refused, ("confirm", glob) when its calls need the broker's yes."""
        for g in self.deny:
            if fnmatch.fnmatchcase(tool, g):
                return "deny", g
        if not any(fnmatch.fnmatchcase(tool, g) for g in self.tools):
            return "tools", ""
        for g in self.confirm:
            if fnmatch.fnmatchcase(tool, g):
                return "confirm", g
        return None


OPEN = Rule()       # no policy file: every tool, no limits


class Rules:
    """A parsed policy file: the default and each named principal's rule."""

    def __init__(self, path: str, default: Rule, principals: dict[str, Rule]) -> None:
        self.path, self.default, self.principals = path, default, principals

    def rule(self, who: str) -> Rule:
        """The rule of principal `who` (its own, else the default)."""
        return self.principals.get(who, self.default)

    def text(self) -> str:
        """The rules in effect, one principal a line (the root's policy file)."""
        lines = []
        for name, r in [("default", self.default), *sorted(self.principals.items())]:
            lim = ", ".join(f"{k} {v}" for k, v in sorted(r.limits.items()) if v is not None)
            lines.append(f"{name}\ttools {','.join(r.tools) or '-'}\tdeny "
                         f"{','.join(r.deny) or '-'}\tconfirm {','.join(r.confirm) or '-'}"
                         f"\tlimits {lim or '-'}\n")
        return "".join(lines)


def parse(text: str, path: str) -> Rules:
    """policy.yaml's text as Rules, or PolicyError naming the key and its line."""
    import yaml     # here: only a policy needs it (profiles import it too)
    name = os.path.basename(path)
    try:
        loader = yaml.SafeLoader(text)
        try:
            node = loader.get_single_node()
            data = loader.construct_document(node) if node is not None else None
        finally:
            loader.dispose()
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" line {mark.line + 1}" if mark is not None else ""
        raise PolicyError(f"{name}:{at}: not YAML: {getattr(e, 'problem', None) or e}") from None
    lines: dict[tuple[str, ...], int] = {}
    if node is not None:
        _lines(node, (), lines)
    return _rules(data, path, name, lines)


def _lines(node: Any, at: tuple[str, ...], out: dict[tuple[str, ...], int]) -> None:
    """Each mapping key's line, by its path from the top (yaml gives it 0-based)."""
    out.setdefault(at, node.start_mark.line + 1)
    if node.id == "mapping":
        for k, v in node.value:
            key = at + (str(k.value),)
            out[key] = k.start_mark.line + 1
            _lines(v, key, out)


def _rules(data: Any, path: str, name: str, lines: dict[tuple[str, ...], int]) -> Rules:
    def bad(at: tuple[str, ...], why: str) -> PolicyError:
        n = lines.get(at)
        return PolicyError(f"{name}:{f' line {n}:' if n else ''} {_dotted(at) or 'the file'}: "
                           f"{why}")
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise bad((), "must be a mapping of default and principals")
    for k in data:
        if k not in TOP:
            raise bad((str(k),), f"unknown key (known: {', '.join(TOP)})")
    default = _rule(data.get("default"), ("default",), OPEN, bad)
    prs = data.get("principals") or {}
    if not isinstance(prs, dict):
        raise bad(("principals",), "must be a mapping of principal to rule")
    principals = {}
    for who, body in prs.items():
        at = ("principals", str(who))
        why = _bad_principal(who)
        if why:
            raise bad(at, why)
        principals[who] = _rule(body, at, default, bad)
    return Rules(path, default, principals)


def _bad_principal(who: Any) -> str:
    if not isinstance(who, str) or ":" not in who:
        return f"not a principal: say KIND:NAME, KIND one of {', '.join(KINDS)}"
    kind, _, rest = who.partition(":")
    if kind not in KINDS:
        return f"unknown kind of principal {kind!r} (known: {', '.join(KINDS)})"
    if not rest:
        return "a principal needs a name after its kind"
    if kind == "uid" and not rest.isdigit():
        return "uid:N takes a number"
    return ""


def _rule(body: Any, at: tuple[str, ...], base: Rule, bad: Any) -> Rule:
    """One rule's keys checked; the keys it lacks taken from `base` (rule 1)."""
    if body is None:
        body = {}
    if not isinstance(body, dict):
        raise bad(at, f"must be a mapping of {', '.join(KEYS)}")
    where = dict(base.where)
    got: dict[str, Any] = {}
    for k, v in body.items():
        if k not in KEYS:
            raise bad(at + (str(k),), f"unknown key (known: {', '.join(KEYS)})")
        where[k] = _dotted(at + (k,))
        if k == "limits":
            got[k] = _limits(v, at + (k,), base.limits, bad)
        else:
            if not isinstance(v, list) or not all(isinstance(g, str) and g for g in v):
                raise bad(at + (k,), "must be a list of tool name globs")
            got[k] = tuple(v)
    lim = got.get("limits", base.limits)
    for k in body.get("limits") or {}:          # each limit named where it is set
        where[f"limits.{k}"] = _dotted(at + ("limits", k))
    return Rule(got.get("tools", base.tools), got.get("deny", base.deny),
                got.get("confirm", base.confirm), lim, where)


def _limits(v: Any, at: tuple[str, ...], base: dict[str, int | None],
            bad: Any) -> dict[str, int | None]:
    if not isinstance(v, dict):
        raise bad(at, f"must be a mapping of {', '.join(LIMITS)}")
    out = dict(base)
    for k, n in v.items():
        if k not in LIMITS:
            raise bad(at + (str(k),), f"unknown limit (known: {', '.join(LIMITS)})")
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 0):
            raise bad(at + (k,), "must be a whole number of 0 or more, or null (no limit)")
        if k == "calls_per_minute" and n is not None and n > MAX_RATE:
            raise bad(at + (k,), f"at most {MAX_RATE}")
        out[k] = n
    return out


def _dotted(at: tuple[str, ...]) -> str:
    """A key's path as the refusals name it: principals."uid:1000".tools."""
    return ".".join(f'"{p}"' if not p.replace("_", "").isalnum() else p for p in at)
