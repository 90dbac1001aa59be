"""Every error string toolsrv can send carries one of 9pfuse's errno words.

9pfuse turns an Rerror into an errno by looking up the words of its table
(plan9port src/cmd/9pfuse/errstr.c, `errors.errno_for`); a string with none of
them reaches the shell as ERANGE, "Numerical result out of range".  The test
does not list the strings: it reads toolsrv/**/*.py and finds every place an
error string is made for a reply, follows the value back to the literals and
f-strings it is built from, and checks each:

  - with every hole ({…} of an f-string, a value computed at run time) filled
    with "x", the string maps to an errno other than ERANGE: the word is
    toolsrv's own, not something a hole happened to hold;
  - with every hole filled with 200 characters, the string cut as P9Error cuts
    it (ERRMAX) still maps: the word is not lost at the end of a long value.

Where error strings are made (the sinks): the argument of P9Error(...), the
ename of Rerror(...), what is stored in Call.reason, RunResult.error (both
become a call's Rerror) or a connection's `refused` (its first reply), and
what a function typed to return a str whose docstring names an Rerror returns.
A value is followed through local assignments, the parameters of the
function it is in (to the arguments at its call sites), and the functions it
is returned from; the names of errors.py and module constants are read from
the modules.  Anything the scan cannot follow fails the test, so a new way of
making an error is noticed rather than skipped.
"""
from __future__ import annotations

import ast
import errno
import importlib
import os
import sys
from dataclasses import dataclass
from typing import Iterator

import pytest

from toolsrv import errors as E

PKG = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "toolsrv")
# attributes whose text becomes an Rerror, and the class that has them
SINK_ATTRS = {"reason": "Call", "error": "RunResult", "refused": "NinePProtocol"}
PASS_ATTRS = set(SINK_ATTRS) | {"ename", "full"}   # an error made elsewhere, passed on
# Calls that pass their first argument's words on: the secrets' redaction (run/secrets.py)
# puts `[secret NAME]` where a value stood and changes nothing else.
PASS_CALLS = {"redact_text"}
# Holes whose values are short by construction: filled with "x" in the long check too.
BOUNDED = {
    "self.name": "the name of the served file written (cwd, sandbox)",
}


class Hole:
    """A value computed at run time; `short` when it cannot be long (a number formatted
    with a numeric spec such as {n:d}, or one of BOUNDED)."""

    def __init__(self, short: bool = False) -> None:
        self.short = short


HOLE, SHORT = Hole(), Hole(short=True)


class Fit:
    """jsonargs.fit(prefix, detail, suffix): the detail is cut so the whole fits ERRMAX,
    prefix and suffix (labels, short by design: their holes count as short) are kept."""

    def __init__(self, prefix: list, detail: list, suffix: list) -> None:
        self.prefix, self.detail, self.suffix = prefix, detail, suffix


def fill(parts: list | tuple, long: str) -> str:
    from toolsrv.errors import fit
    out = ""
    for p in parts:
        if isinstance(p, Hole):
            out += "x" if p.short else long
        elif isinstance(p, Fit):
            out += fit(fill(p.prefix, "x"), fill(p.detail, long), fill(p.suffix, "x"))
        else:
            out += p
    return out


@dataclass(frozen=True)
class Template:
    parts: tuple            # str, Hole or Fit
    where: str

    def fill(self, hole: str) -> str:
        return fill(self.parts, hole)

    def __str__(self) -> str:
        return f"{self.where}: {self.fill('{…}')!r}"


class Unfollowed(Exception):
    pass


class Module:
    def __init__(self, path: str, package: str) -> None:
        self.name = os.path.splitext(os.path.basename(path))[0]
        self.tree = ast.parse(open(path).read(), path)
        here = os.path.dirname(path)
        script = not os.path.exists(os.path.join(here, "__init__.py"))  # a tools directory
        if script:  # its scripts import their sibling modules from it, as they run
            sys.path.insert(0, here)
        try:
            self.py = importlib.import_module(f"{package}.{self.name}")
        finally:
            if script:
                sys.path.remove(here)
        self.parents: dict[ast.AST, ast.AST] = {}
        for node in ast.walk(self.tree):
            for child in ast.iter_child_nodes(node):
                self.parents[child] = node

    def function_of(self, node: ast.AST) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        while node in self.parents:
            node = self.parents[node]
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                return node
        return None


class Scan:
    """The sinks of every module of the package and the templates that reach them."""

    def __init__(self, directory: str = PKG, package: str = "toolsrv") -> None:
        self.mods = [Module(os.path.join(d, f), _package(directory, package, d))
                     for d, _, files in sorted(os.walk(directory))
                     for f in sorted(files) if f.endswith(".py")]
        self.functions: dict[str, list[tuple[Module, ast.AST]]] = {}
        for m in self.mods:
            for node in ast.walk(m.tree):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    self.functions.setdefault(node.name.lstrip("_"), []).append((m, node))
                elif isinstance(node, ast.ClassDef):     # Class(...) calls its __init__
                    for f in node.body:
                        if isinstance(f, ast.FunctionDef) and f.name == "__init__":
                            self.functions.setdefault(node.name, []).append((m, f))
        self.templates: list[Template] = []
        self.unfollowed: list[str] = []
        self.sinks = 0
        self._seen: set = set()
        self._memo: dict = {}

    # -- where errors are made --
    def run(self) -> "Scan":
        for m in self.mods:
            for node in ast.walk(m.tree):
                for value in self._sink_values(m, node):
                    self.sinks += 1
                    self._add(m, value)
        return self

    def _sink_values(self, m: Module, node: ast.AST) -> Iterator[ast.expr]:
        if isinstance(node, ast.Call):
            name = _callee(node)
            if name == "P9Error" and node.args:
                yield node.args[0]
            elif name == "Rerror" and len(node.args) > 1:
                yield node.args[1]
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                for target, value in _pairs(t, node.value):
                    if isinstance(target, ast.Attribute) and self._carrier(m, target):
                        yield value
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node) or ""
            returns = ast.unparse(node.returns) if node.returns else ""
            if "Rerror" in doc and returns in ("str", "str | None"):
                for r in ast.walk(node):
                    if isinstance(r, ast.Return) and r.value is not None \
                            and m.function_of(r) is node:
                        yield r.value

    def _carrier(self, m: Module, target: ast.Attribute) -> bool:
        """A store into an attribute that carries an Rerror: in its class's own methods
        (self.reason in Call), or in a module that uses the class (call.reason)."""
        cls = SINK_ATTRS.get(target.attr)
        if cls is None:
            return False
        if isinstance(target.value, ast.Name) and target.value.id == "self":
            f = m.function_of(target)
            owner = m.parents.get(f) if f is not None else None
            return isinstance(owner, ast.ClassDef) and owner.name == cls
        return hasattr(m.py, cls)

    def _add(self, m: Module, value: ast.expr) -> None:
        where = f"{m.name}.py:{value.lineno}"
        try:
            for parts in self.evaluate(m, value):
                self.templates.append(Template(tuple(parts), where))
        except Unfollowed as e:
            self.unfollowed.append(f"{where}: {e}")

    # -- from an expression to the strings it can be --
    def part(self, m: Module, e: ast.expr) -> list[list]:
        """e as a piece of a larger string: what cannot be followed is a hole there."""
        try:
            return self.evaluate(m, e) or [[HOLE]]
        except Unfollowed:
            return [[HOLE]]

    def evaluate(self, m: Module, e: ast.expr) -> list[list]:
        """The templates e can be (an error passed on, None or "": none)."""
        key = (m.name, id(e))
        if key in self._memo:
            return self._memo[key]
        if key in self._seen:
            return []                        # a cycle: what it can be is found elsewhere
        self._seen.add(key)
        try:
            got = self._memo[key] = self._evaluate(m, e)
            return got
        finally:
            self._seen.discard(key)

    def _evaluate(self, m: Module, e: ast.expr) -> list[list]:
        if isinstance(e, ast.Constant):
            return [[e.value]] if isinstance(e.value, str) and e.value else []
        if isinstance(e, ast.JoinedStr):
            out: list[list] = [[]]
            for v in e.values:
                alts = [[v.value]] if isinstance(v, ast.Constant) else self._hole(m, v)
                out = [a + b for a in out for b in alts]
            return out
        if isinstance(e, ast.BinOp) and isinstance(e.op, ast.Add):
            left, right = self.part(m, e.left), self.part(m, e.right)
            return [a + b for a in left for b in right]
        if isinstance(e, ast.Subscript) and isinstance(e.slice, ast.Slice) \
                and e.slice.lower is None:
            return self.evaluate(m, e.value)          # "..."[:120]: the start kept
        if isinstance(e, ast.IfExp):
            return self.evaluate(m, e.body) + self.evaluate(m, e.orelse)
        if isinstance(e, ast.BoolOp):
            return [t for v in e.values for t in self.evaluate(m, v)]
        if isinstance(e, ast.Await):
            return self.evaluate(m, e.value)
        if isinstance(e, ast.Attribute):
            if isinstance(e.value, ast.Name) and getattr(m.py, e.value.id, None) is E:
                return [[getattr(E, e.attr)]]
            if e.attr in PASS_ATTRS:
                return []
            raise Unfollowed(f"attribute {ast.unparse(e)}")
        if isinstance(e, ast.Name):
            return self._name(m, e)
        if isinstance(e, ast.Call):
            return self._call(m, e)
        raise Unfollowed(ast.unparse(e))

    def _hole(self, m: Module, v: ast.FormattedValue) -> list[list]:
        """An f-string's {e}: a module constant is its value, anything else a hole."""
        e = v.value
        if isinstance(e, ast.Name) and self._local(m, e) is None:
            c = getattr(m.py, e.id, None)
            if isinstance(c, (int, float, str)) and not isinstance(c, bool):
                return [[str(c)]]
        if isinstance(e, ast.Name) and self._local(m, e) is not None:
            got = self.part(m, e)             # a local string: what it was made of
            if got != [[HOLE]]:
                return got
        spec = v.format_spec.values if isinstance(v.format_spec, ast.JoinedStr) else []
        numeric = len(spec) == 1 and isinstance(spec[0], ast.Constant) \
            and str(spec[0].value)[-1:] in tuple("bdefgnoxX%")
        return [[SHORT if numeric or ast.unparse(e) in BOUNDED else HOLE]]

    def _call(self, m: Module, e: ast.Call) -> list[list]:
        name = _callee(e)
        if name == "fit":                     # jsonargs.fit(prefix, detail, suffix=SUFFIX)
            from toolsrv.errors import SUFFIX
            args = list(e.args) + [kw.value for kw in e.keywords]
            parts = [self.part(m, a) for a in args[:3]]
            if len(args) < 3:
                parts.append([[SUFFIX]])
            return [[Fit(a, b, c)] for a in parts[0] for b in parts[1] for c in parts[2]]
        if name == "P9Error" or name in PASS_CALLS:      # P9Error(x).ename: what x is
            return self.evaluate(m, e.args[0])
        found = self.functions.get((name or "").lstrip("_"), [])
        if not found:
            raise Unfollowed(f"call of {ast.unparse(e.func)}")
        out: list[list] = []
        for fm, f in found:                   # what the function returns
            for r in ast.walk(f):
                if isinstance(r, ast.Return) and r.value is not None \
                        and fm.function_of(r) is f:
                    out += self.evaluate(fm, r.value)
        return out

    def _local(self, m: Module, e: ast.Name) -> ast.AST | None:
        """The function e is a local variable or parameter of, or None."""
        f = m.function_of(e)
        while f is not None:
            params = [a.arg for a in f.args.args + f.args.kwonlyargs]
            if e.id in params or any(
                    isinstance(t, ast.Name) and t.id == e.id
                    for n in ast.walk(f) if isinstance(n, (ast.Assign, ast.AnnAssign))
                    for t in ast.walk(n.targets[0] if isinstance(n, ast.Assign) else n.target)):
                return f
            f = m.function_of(f)
        return None

    def _name(self, m: Module, e: ast.Name) -> list[list]:
        f = self._local(m, e)
        if f is None:
            v = getattr(m.py, e.id, None)
            if isinstance(v, str):
                return [[v]] if v else []
            raise Unfollowed(f"name {e.id}")
        out: list[list] = []
        assigned = False
        for n in ast.walk(f):
            if isinstance(n, (ast.Assign, ast.AnnAssign)) and n.value is not None:
                targets = n.targets if isinstance(n, ast.Assign) else [n.target]
                for t in targets:
                    for target, value in _pairs(t, n.value):
                        if isinstance(target, ast.Name) and target.id == e.id:
                            assigned = True
                            out += self.evaluate(m, value)
        params = f.args.args + f.args.kwonlyargs
        if e.id in [a.arg for a in params]:
            assigned = True
            out += self._arguments(f, e.id)
        if not assigned:
            raise Unfollowed(f"name {e.id}")
        return out

    def _arguments(self, f: ast.AST, param: str) -> list[list]:
        """What the call sites of f pass as param."""
        names = [a.arg for a in f.args.args]                  # type: ignore[attr-defined]
        pos = names.index(param) if param in names else None
        if names and names[0] == "self" and pos is not None:
            pos -= 1
        callee = f.name.lstrip("_")                           # type: ignore[attr-defined]
        if f.name == "__init__":                              # type: ignore[attr-defined]
            callee = next(k for k, v in self.functions.items()    # its class's name
                          if k != "init__" and any(g is f for _, g in v))
        out: list[list] = []
        for m in self.mods:
            for n in ast.walk(m.tree):
                if not (isinstance(n, ast.Call) and (_callee(n) or "").lstrip("_") == callee):
                    continue
                for kw in n.keywords:
                    if kw.arg == param:
                        out += self.evaluate(m, kw.value)
                if pos is not None and pos < len(n.args):
                    out += self.evaluate(m, n.args[pos])
        return out


def _package(top: str, package: str, d: str) -> str:
    """The dotted name of directory d, a folder of the package `package` at `top`."""
    rel = os.path.relpath(d, top)
    return package if rel == "." else ".".join([package, *rel.split(os.sep)])


def _callee(call: ast.Call) -> str | None:
    f = call.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None


def _pairs(target: ast.expr, value: ast.expr) -> Iterator[tuple[ast.expr, ast.expr]]:
    if isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple) \
            and len(target.elts) == len(value.elts):
        for t, v in zip(target.elts, value.elts):
            yield from _pairs(t, v)
    elif not isinstance(target, ast.Tuple):
        yield target, value


SCAN = Scan().run()


def test_the_scan_follows_every_error_it_finds():
    assert SCAN.unfollowed == []
    files = {t.where.split(":")[0] for t in SCAN.templates}
    for f in ("server.py", "agent.py", "apply.py", "scheduler.py", "runner.py", "sessions.py",
              "ctl.py", "transport.py", "root.py", "sessiondirs.py", "scope.py", "node.py",
              "auth.py", "peers.py", "jsonargs.py"):
        assert f in files, f"no error strings found in {f}: the scan lost its way"
    assert SCAN.sinks > 100 and len(SCAN.templates) > 100


def _bad(scan: Scan) -> list[str]:
    return [str(t) for t in scan.templates
            if errno.ERANGE in (E.errno_for(t.fill("x")),
                                E.errno_for(E.P9Error(t.fill("x" * 200)).ename))]


FAKE = '''\
from toolsrv.errors import P9Error
from toolsrv.errors import fit


def refusal(x) -> str:
    """The Rerror string refusing x."""
    return f"elevation refused: {x}"


def a(x):
    why = f"profile {x} (invalid argument)"
    raise P9Error(why)


def b(x):
    raise P9Error(fit("profile: ", x))


def c(x):
    raise P9Error(x.render())


def d(n):
    raise P9Error(f"killed by signal {n:d} (input/output error)")
'''


def test_the_scan_finds_what_it_must(tmp_path, monkeypatch):
    """The scan itself, on a package made for it: a string without a word (returned by a
    function that says it makes an Rerror), one whose word a long value pushes past
    ERRMAX (through a local) are found; fit() keeps its suffix, a number is short; what
    it cannot follow is reported, not skipped."""
    pkg = tmp_path / "fakepkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "mod.py").write_text(FAKE)
    monkeypatch.syspath_prepend(str(tmp_path))
    scan = Scan(str(pkg), "fakepkg").run()
    # "profile {…} (invalid argument)" keeps its word: P9Error shortens a long string in
    # its middle (errors.shorten), so a long value no longer pushes the suffix out
    assert sorted(_bad(scan)) == ["mod.py:7: 'elevation refused: {…}'"]
    assert scan.unfollowed == ["mod.py:20: call of x.render"]
    assert len(scan.templates) == 4


def _ids(ts: list[Template]) -> list[str]:
    return [str(t) for t in ts]


@pytest.mark.parametrize("t", SCAN.templates, ids=_ids(SCAN.templates))
def test_every_error_carries_a_word_of_its_own(t):
    assert E.errno_for(t.fill("x")) != errno.ERANGE


@pytest.mark.parametrize("t", SCAN.templates, ids=_ids(SCAN.templates))
def test_the_word_survives_the_cut_to_errmax(t):
    assert E.errno_for(E.P9Error(t.fill("x" * 200)).ename) != errno.ERANGE


@pytest.mark.parametrize("ename", sorted(E.DECLARED))
def test_every_declared_string_carries_a_word(ename):
    assert E.errno_for(ename) != errno.ERANGE
