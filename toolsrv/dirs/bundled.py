"""toolsrv/dirs/bundled.py — where the product finds what it reads at run time.

What it finds.  Everything the server reads at run time and did not get from its user
ships with the package: the bundled tools (`.meta` files and the executables beside
them), the tools' helper commands (`tool`: {BIN} in a profile) and the shipped sandbox
profiles (*.yaml).  Nothing is looked up relative to the working directory, so a server
started from any directory finds them.

Two layouts.  An installed package holds them as package data: toolsrv/data/tools/,
toolsrv/data/bin/ and toolsrv/data/sandbox/ (setup.cfg's package_dir maps the source
tree's directories there; the wheel carries them, modes kept).  A checkout holds them at
its top, beside toolsrv/: data/tools/, data/bin/ and sandbox/.  `layout()` tells the two
apart by the checkout's setup.cfg and data/tools/ beside the package.

Real paths.  The package directory is computed from this module's own path, not asked of
importlib.resources: the server needs real paths (it execs the tools, names them in
Landlock rules and watches them with inotify), importing importlib.resources costs 30 ms
of every launch on a loaded machine, and a zipped install cannot serve tools at all
(tests/test_bundled.py checks the two agree).  `realpath` follows the editable install's
link tree (build/__editable__.*/toolsrv/dirs/bundled.py is a link into the checkout) back
to the checkout, so `make run` serves the checkout's files as they are edited.

The documentation.  README.md, SECURITY.md and doc/*.md are not package data: the server
never reads them.  The wheel installs them where man pages and docs go (data_files:
PREFIX/share/doc/toolsrv/), and `docs()` finds them for `toolsrv --help`: the checkout's
for a checkout, the installed copy otherwise.  `install_hint()` says how to add an extra
to this installation.
"""
import os

PACKAGE = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))     # toolsrv/


def layout(package: str) -> tuple[str, str]:
    """(the data directory, the profiles directory) for the package in `package`: the
    checkout's data/ and sandbox/ beside it, else its own data/ and data/sandbox/."""
    up = os.path.dirname(package)
    if os.path.isfile(os.path.join(up, "setup.cfg")) and \
            os.path.isdir(os.path.join(up, "data", "tools")):
        return os.path.join(up, "data"), os.path.join(up, "sandbox")
    return os.path.join(package, "data"), os.path.join(package, "data", "sandbox")


DATA, PROFILES = layout(PACKAGE)   # PROFILES: the shipped ones, after ~/.config/ollie/sandbox
TOOLS = os.path.join(DATA, "tools")         # the bundled tools: the tools path's last entry
BIN = os.path.join(DATA, "bin")             # the tools' helper commands: {BIN}


def docs() -> str | None:
    """The directory that holds README.md and doc/: the checkout (an editable install's
    package is the checkout's), else PREFIX/share/doc/toolsrv of the installation the
    package is in (a venv, the system, or pip's --user base: the package's parent is
    PREFIX/lib/pythonX.Y/site-packages for each); None when neither is there."""
    up = os.path.dirname(PACKAGE)
    if os.path.isfile(os.path.join(up, "doc", "toolsrv.4.md")):
        return up
    installed = os.path.normpath(os.path.join(up, *[os.pardir] * 3, "share", "doc", "toolsrv"))
    return installed if os.path.isfile(os.path.join(installed, "README.md")) else None


def install_hint(extra: str) -> str:
    """The command that installs `extra` (mcp, search, lsp, fast) for this toolsrv, as it
    was installed: `pip install -e 'CHECKOUT[extra]'` for a checkout (editable, or on
    PYTHONPATH), `pip install 'FILE[extra]'` for a wheel or sdist installed from a file
    (PEP 610's direct_url.json says which; `toolsrv[extra]` names no distribution on the
    index there), `pip install 'toolsrv[extra]'` otherwise; always this interpreter's pip.
    Read from the package's own site directory, without importlib.metadata (0.1 s)."""
    import json
    import shlex
    import sys
    from urllib.parse import unquote, urlparse
    pip = f"{shlex.quote(sys.executable)} -m pip install"
    up = os.path.dirname(PACKAGE)
    if os.path.isfile(os.path.join(up, "setup.cfg")):
        return f"{pip} -e {shlex.quote(f'{up}[{extra}]')}"
    try:
        info = [n for n in os.listdir(up) if n.startswith("toolsrv-") and
                n.endswith(".dist-info")]
        with open(os.path.join(up, info[0], "direct_url.json"), encoding="utf-8") as f:
            url = urlparse(str(json.load(f).get("url", "")))
    except (OSError, IndexError, ValueError, AttributeError):
        url = urlparse("")           # from the index, or unknown: the index's name
    if url.scheme != "file":
        return f"{pip} 'toolsrv[{extra}]'"
    return f"{pip} {shlex.quote(unquote(url.path) + f'[{extra}]')}"
