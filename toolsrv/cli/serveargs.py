"""`serve`'s command line: argparse's parser (_serve_parser, built only for -h or an
unusual spelling) and the fast path (parse_serve, plain words without argparse), both
read from the one table of `serve`'s options (toolsrv/options.py, SERVE_OPTIONS here in
argparse's terms), and the App's Options made from what they parse (serve_options).
"""
from __future__ import annotations

from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from ..options import _LIMITS, OPTIONS, Options, flag_defaults, from_args, size  # noqa: F401
from ..serve import dial

if TYPE_CHECKING:
    import argparse


def parse_serve(words: list[str]) -> SimpleNamespace | None:
    """`serve`'s words parsed from OPTIONS without argparse, or None for argparse to
    parse: building this parser and parsing took 6 M instructions (2 ms) of the server's
    launch, and importing argparse 9.5 M more where nothing else imports it before the
    listener does (elevation.py does now).  Only the plain forms are taken here: an option
    spelled in full, its value as the next word or after `=`, a value not starting with `-`
    and of the option's type.  Anything else (an abbreviation, -h, a bad value, a stray
    word) goes to argparse, so its results, messages and help are the ones it always gave."""
    opts = {f: o for o in OPTIONS for f in o.flags}
    values = vars(flag_defaults())
    i = 0
    while i < len(words):
        flag, eq, value = words[i], "", ""
        if flag.startswith("--"):
            flag, eq, value = flag.partition("=")
        if flag not in opts:
            return None
        o = opts[flag]
        i += 1
        if o.type is bool:                  # a switch (store_true)
            if eq:
                return None
            values[o.dest] = True
            continue
        if not eq:
            if i == len(words) or words[i].startswith("-"):
                return None
            value, i = words[i], i + 1
        try:
            v = o.type(value)
        except ValueError:
            return None
        if isinstance(o.default, list):     # given again (append)
            values[o.dest].append(v)
        else:
            values[o.dest] = v
    return SimpleNamespace(verb="serve", **values)


# `serve`'s options in argparse's own terms: (flags, add_argument's keywords), in their
# order in the usage line, made from the one table (toolsrv/options.py); "group": _LIMITS
# puts one in that group of the help.  parse_serve reads the table itself.
SERVE_OPTIONS: list[tuple[tuple[str, ...], dict[str, Any]]] = [
    (o.flags, o.argparse()) for o in OPTIONS]


def _serve_help() -> dict[str, str]:
    """The help of the options whose defaults depend on the environment, filled in here (only
    -h needs them: parse_serve never builds this parser)."""
    from ..dirs.statedir import default_state_dir, state_home
    addr, home = str(dial.default_addr()), state_home()
    state = default_state_dir(addr, str(dial.plan9port_default()))
    where = (f"default {home}; with another first -a, a subdirectory of it named for that "
             "address" if state == home else
             f"default here {state}, named for {addr}; {home} for plan9port's default address")
    return {"--addr": f"; default unix!$NAMESPACE/toolsrv, here {addr}",
            "--state": f" ({where}; kept across restarts, locked while serving)"}


def _serve_parser(s: argparse.ArgumentParser) -> None:
    lim = s.add_argument_group(_LIMITS)
    extra = _serve_help()
    for flags, kw in SERVE_OPTIONS:
        kw = dict(kw)
        more = next((extra[f] for f in flags if f in extra), "")
        if more:
            kw["help"] = (kw["help"] + more).replace("%", "%%")
        (lim if kw.pop("group", None) else s).add_argument(*flags, **kw)


def serve_options(args: Any) -> Options:
    """The App's Options from parsed `serve` arguments (options.from_args)."""
    return from_args(args)
