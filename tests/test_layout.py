"""The package's folders are its parts, and imports run one way (issue 15).

Every module of toolsrv/ and of proto/ (the codec, toolsrv.proto: setup.cfg's package_dir
maps it in) is parsed (ast) and each of its imports, at the top or inside a function,
absolute or relative, is resolved to the part it reaches.
A part may import only the parts below it:

    cli/  >  mcp/  >  app  >  hosts/  >  serve/  >  tree/  >  run/, registry/ (side by side)
    >  dirs/, errors, record  >  proto

hosts/ (imports of other hosts' trees, and the asyncio 9P client they and the MCP face
share) is a client of other servers that feeds this one's registry and calls, so it sits
above serve/ (dial strings, TLS) and below app, which wires it in.

mcp/ (the MCP face) is a client of the tree that can also start a server in process, so
it sits above app and below cli/, which imports it for the `mcp` verb; it alone imports
the `mcp` SDK (checked below), so `serve` never loads it.

toolsrv/__main__.py (the thin entry) and toolsrv/client.py (the client's old path) count
as cli/.  A module also stays under about 600 lines, a folder holds at most 12 modules,
no import (not even inside a function, or for the type checker) closes a circle, and a
folder's __init__ (but the codec's, which is its public face) imports nothing (the zygote
boots from run/ in a bare interpreter).

Inside run/, run/init/ (the zygote and the inits) and run/kernel/ (the kernel bindings) run
in a bare `python -I -S` after a fork, and a warm init loads them from a memfd into the
tools' interpreter (run/init/warm.py, SOURCES): they import each other and the standard
library only.  Every folder's __init__ names each of its modules and says what they may
import.
"""
from __future__ import annotations

import ast
import configparser
import os
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAX_LINES = 600
MAX_MODULES = 12     # modules in one folder of toolsrv/

# rank of each part: an import may go to a part of lower rank, or within its own part.
RANK = {"proto": 0, "base": 1, "run": 2, "registry": 2, "tree": 3, "serve": 4, "hosts": 5,
        "app": 6, "mcp": 7, "cli": 8}
BASE = {"toolsrv", "toolsrv.errors", "toolsrv.record"}
TOP = {"toolsrv.app": "app", "toolsrv.wiring": "app", "toolsrv.options": "app",
       "toolsrv.__main__": "cli", "toolsrv.client": "cli"}


# the source folders of the package, as setup.cfg's package_dir maps them
SOURCES = {"toolsrv": "toolsrv", "proto": "toolsrv.proto"}


def modules() -> dict[str, str]:
    """Every module's dotted name -> its file."""
    out = {}
    for top, name in SOURCES.items():
        for d, dirs, files in os.walk(os.path.join(REPO, top)):
            dirs[:] = [x for x in dirs if x != "__pycache__"]
            for f in files:
                if f.endswith(".py"):
                    rel = os.path.relpath(os.path.join(d, f), os.path.join(REPO, top))
                    rel = [name] + [x for x in rel[:-3].split(os.sep) if x != "__init__"]
                    out[".".join(rel)] = os.path.join(d, f)
    return out


MODULES = modules()


def part(mod: str) -> str:
    """The part a dotted module name belongs to."""
    if mod == "toolsrv.proto" or mod.startswith("toolsrv.proto."):
        return "proto"
    if mod in TOP:
        return TOP[mod]
    if mod in BASE:
        return "base"
    sub = mod.split(".")[1]
    return "base" if sub == "dirs" else sub


def imports(mod: str, path: str) -> list[tuple[int, str]]:
    """(line, dotted name) of every toolsrv module or package `mod` imports."""
    tree = ast.parse(open(path).read(), path)
    is_pkg = path.endswith("__init__.py")
    package = mod if is_pkg else mod.rpartition(".")[0]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            out.append((node.lineno, target))
            for a in node.names:      # `from toolsrv.run import landlock`: a module
                if f"{target}.{a.name}" in MODULES:
                    out.append((node.lineno, f"{target}.{a.name}"))
    return [(n, t) for n, t in out if t.split(".")[0] == "toolsrv"]


def wrong_arrows() -> list[str]:
    bad = []
    for mod, path in sorted(MODULES.items()):
        here = part(mod)
        for line, target in imports(mod, path):
            there = part(target)
            if there == here or (target == "toolsrv" and here != "proto"):
                continue
            if RANK[there] >= RANK[here]:
                bad.append(f"{os.path.relpath(path, REPO)}:{line}: {here} imports {there} "
                           f"({target})")
    return bad


def test_every_module_has_a_part():
    parts = {part(m) for m in MODULES}
    assert parts <= set(RANK), parts - set(RANK)
    assert {"run", "registry", "tree", "serve", "cli"} <= parts
    loose = [m for m, p in MODULES.items() if m.count(".") == 1 and m.startswith("toolsrv.")
             and not p.endswith("__init__.py") and m not in TOP and m not in BASE]
    assert loose == [], "a module at the top of toolsrv/: put it in the folder of its part"


def test_imports_run_one_way():
    assert wrong_arrows() == []


def test_the_check_sees_a_wrong_arrow(monkeypatch):
    """The check itself: an upward import, relative and inside a function, is caught."""
    src = "def f():\n    from ..serve.server import Conn\n"
    real = ast.parse
    path = MODULES["toolsrv.run.pumps"]
    monkeypatch.setattr(ast, "parse", lambda text, p=None, *a, **k:
                        real(src if p == path else text, p, *a, **k))
    assert wrong_arrows() == [f"{os.path.relpath(path, REPO)}:2: run imports serve "
                              "(toolsrv.serve.server)"]


def sdk_imports(path: str) -> list[int]:
    """Lines of path that import the `mcp` SDK (absolute imports of `mcp` or `mcp_types`)."""
    out = []
    for node in ast.walk(ast.parse(open(path).read(), path)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names = [node.module or ""]
        else:
            continue
        if any(n.split(".")[0] in ("mcp", "mcp_types") for n in names):
            out.append(node.lineno)
    return out


def test_only_the_mcp_face_imports_the_sdk():
    """The SDK is a dependency of `toolsrv mcp` alone: no module outside toolsrv/mcp/
    imports it, so `serve` and the other verbs never need it."""
    bad = [f"{mod}:{n}" for mod, path in sorted(MODULES.items())
           if part(mod) != "mcp" for n in sdk_imports(path)]
    assert bad == []
    assert sdk_imports(MODULES["toolsrv.mcp.server"]), "the check sees the face's imports"


def test_folder_inits_import_nothing():
    for mod, path in MODULES.items():
        if path.endswith("__init__.py") and mod.startswith("toolsrv.") and part(mod) != "proto":
            tree = ast.parse(open(path).read())
            assert not [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))
                        ], f"{mod}: a folder's __init__ imports nothing"


@pytest.mark.parametrize("mod", sorted(MODULES))
def test_modules_stay_small(mod):
    with open(MODULES[mod]) as f:
        n = sum(1 for _ in f)
    assert n <= MAX_LINES, f"{mod}: {n} lines; cut it by concept (STYLE.md, habit 8)"


def folder_sizes() -> dict[str, int]:
    """Each folder of toolsrv/ -> how many modules it holds (its __init__ and sub-folders
    apart)."""
    out: dict[str, int] = {}
    for path in MODULES.values():
        if not path.endswith("__init__.py"):
            d = os.path.relpath(os.path.dirname(path), REPO)
            out[d] = out.get(d, 0) + 1
    return out


def test_no_folder_holds_more_than_twelve_modules():
    """Past MAX_MODULES, a concept in the folder wants a folder of its own (as
    registry/search/ is registry/'s discovery)."""
    sizes = folder_sizes()
    assert sizes[os.path.join("toolsrv", "registry", "search")] >= 3, "the count sees sub-folders"
    assert {d: n for d, n in sizes.items() if n > MAX_MODULES} == {}


def import_graph() -> dict[str, set[str]]:
    """Each module -> the modules of toolsrv it imports, at the top, under TYPE_CHECKING or
    inside a function; its own packages apart (they are imported before it)."""
    return {mod: {t for _, t in imports(mod, path)
                  if t in MODULES and t != mod and not mod.startswith(t + ".")}
            for mod, path in MODULES.items()}


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The graph's strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while not comp or comp[-1] != v:
                comp.append(stack.pop())
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def test_no_import_circle():
    """No two modules import each other, directly or round a longer loop, not even inside
    a function or for the type checker: what both need goes in a module below both, or
    is passed in (tree/sessiondirs.py's SessionsFS, which root.py's ToolsrvFS is)."""
    assert import_circles(import_graph()) == []


def test_the_check_sees_an_import_circle(monkeypatch):
    """The check itself: sessiondirs.py importing root.py back, if only for the type
    checker (as it did), closes a circle."""
    src = "if TYPE_CHECKING:\n    from .root import ToolsrvFS\n"
    real = ast.parse
    path = MODULES["toolsrv.tree.sessiondirs"]
    monkeypatch.setattr(ast, "parse", lambda text, p=None, *a, **k:
                        real(src if p == path else text, p, *a, **k))
    assert import_circles(import_graph()) == [["toolsrv.tree.root", "toolsrv.tree.sessiondirs"]]


BARE = ("toolsrv.run.init", "toolsrv.run.kernel")


def bare_imports(mod: str, path: str) -> list[str]:
    """What a module of run/init or run/kernel imports beyond them and the standard library."""
    bad = []
    for node in ast.walk(ast.parse(open(path).read(), path)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names = [node.module or ""]
        else:
            continue
        for n in names:
            top = n.split(".")[0]
            if top == "toolsrv":
                if not any(n == b or n.startswith(b + ".") for b in BARE):
                    bad.append(f"{mod}:{node.lineno}: {n}")
            elif top not in sys.stdlib_module_names and top != "__future__":
                bad.append(f"{mod}:{node.lineno}: {n}")
    bad += [f"{mod}:{line}: {t}" for line, t in imports(mod, path)
            if not any(t == b or t.startswith(b + ".") for b in BARE)]
    return sorted(set(bad))


def test_inits_and_kernel_import_only_each_other_and_the_stdlib():
    mods = [m for m in MODULES if any(m == b or m.startswith(b + ".") for b in BARE)]
    assert "toolsrv.run.init.warm" in mods and "toolsrv.run.kernel.landlock" in mods
    assert [b for m in sorted(mods) for b in bare_imports(m, MODULES[m])] == []


def test_the_bare_check_sees_a_wrong_import(monkeypatch):
    """The check itself: an init that imports the server's side, or a third-party
    module, is caught."""
    src = "import yaml\nfrom toolsrv.run.runner import Runner\nfrom . import wire\n"
    real = ast.parse
    path = MODULES["toolsrv.run.init.reap"]
    monkeypatch.setattr(ast, "parse", lambda text, p=None, *a, **k:
                        real(src if p == path else text, p, *a, **k))
    assert bare_imports("toolsrv.run.init.reap", path) == [
        "toolsrv.run.init.reap:1: yaml", "toolsrv.run.init.reap:2: toolsrv.run.runner"]


def test_the_warm_bundle_is_the_bare_part():
    """Every module the warm boot loads from its memfd is of run/init or run/kernel, and
    each one it needs is in the bundle (the bundle has no import hook to find another)."""
    from toolsrv.run.init import warm
    assert all(any(n.startswith(b + ".") for b in BARE) for n in warm.SOURCES)
    for name in warm.SOURCES:
        needed = [t for _, t in imports(name, MODULES[name]) if t in MODULES
                  and not MODULES[t].endswith("__init__.py")]
        assert set(needed) <= set(warm.SOURCES), (name, needed)


def folder_inits() -> list[str]:
    return sorted(m for m, p in MODULES.items() if p.endswith("__init__.py"))


@pytest.mark.parametrize("pkg", folder_inits())
def test_every_init_names_its_modules(pkg):
    """A folder's __init__ names each module and subfolder in it, and what they may import."""
    path = MODULES[pkg]
    folder = os.path.dirname(path)
    text = open(path).read()
    inside = [f[:-3] for f in os.listdir(folder) if f.endswith(".py") and f != "__init__.py"]
    inside += [d for d in os.listdir(folder)
               if os.path.isfile(os.path.join(folder, d, "__init__.py"))]
    assert [m for m in sorted(inside) if m not in text] == [], f"{pkg}: name them in {path}"
    assert "may import" in text.lower() or "imports" in text.lower(), \
        f"{pkg}: say what its modules may import"


TREE_PARTS = ("toolsrv.tree.calls", "toolsrv.tree.state", "toolsrv.tree.resident")


def test_calls_state_and_residents_never_import_the_namespace():
    """tree/calls/, tree/state/ and tree/resident/ are what the namespace shows: they import
    each other, never the namespace modules of tree/ (node, root, sessiondirs, agent...)."""
    bad = []
    for mod, path in sorted(MODULES.items()):
        if any(mod == p or mod.startswith(p + ".") for p in TREE_PARTS):
            bad += [f"{mod}:{line}: {t}" for line, t in imports(mod, path)
                    if part(t) == "tree" and t != "toolsrv.tree"
                    and not any(t == p or t.startswith(p + ".") for p in TREE_PARTS)]
    assert bad == []


# The checkout's top: the design card's entries, what serves them, and what tools and
# builds leave there (dotfiles: .git, .venv, .ci, caches; build/, dist/, *.egg-info).
CARD = {"setup.cfg", "toolsrv", "proto", "tests", "data", "sandbox", "doc"}
SERVING = {"examples", "bench", "deploy", "Makefile", "README.md", "SECURITY.md",
           "pyproject.toml"}
ARTEFACTS = {"build", "dist"}


def test_the_top_is_the_design_cards():
    top = {n for n in os.listdir(REPO) if not n.startswith(".") and not n.endswith(".egg-info")}
    assert CARD <= top, CARD - top
    assert sorted(top - CARD - SERVING - ARTEFACTS) == [], "not one of the card's entries"
    assert sorted(os.listdir(os.path.join(REPO, "data"))) == ["bin", "tools"]


def test_setup_cfg_names_every_package():
    """setup.cfg names the wheel's packages one by one (find: would see toolsrv/ alone, not
    proto/): each folder of toolsrv/ and proto/, and the two of package data; package_dir
    maps the card's proto/, data/ and sandbox/ into the one package."""
    cfg = configparser.ConfigParser()
    cfg.read(os.path.join(REPO, "setup.cfg"))
    listed = set(cfg["options"]["packages"].split())
    mapped = dict(tuple(x.strip() for x in line.split("=")) for line in
                  cfg["options"]["package_dir"].strip().splitlines())
    folders = {m for m, p in MODULES.items() if p.endswith("__init__.py")}
    assert sorted(folders - listed) == [], "a folder the wheel leaves out: add it to setup.cfg"
    assert listed - folders == {"toolsrv.data", "toolsrv.data.sandbox"}
    assert mapped == {"toolsrv.proto": "proto", "toolsrv.data": "data",
                      "toolsrv.data.sandbox": "sandbox"}
