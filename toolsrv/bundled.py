"""toolsrv/bundled.py — where the installed product finds what it reads at run time.

Everything the server reads at run time and did not get from its user lives inside the
package, as package data: the bundled tools (toolsrv/data/tools/: `.meta` files and the
executables beside them) and the shipped sandbox profiles (toolsrv/data/sandbox/*.yaml).
The wheel carries them (setup.cfg, [options.package_data]); they are found through the
package, so an installed server started from any directory finds them, and nothing is
ever looked up relative to the checkout or the working directory.

The package directory is what `importlib.resources.files("toolsrv")` answers for a package
on the file system (tests/test_deploy.py checks the two agree); it is computed here from
the package's own module path because the server needs real paths (it execs the tools,
names them in Landlock rules and watches them with inotify), because importing
importlib.resources costs 30 ms of every launch on a loaded machine, and because a
zipped install cannot serve tools at all.  `realpath` follows the editable install's link
tree (build/__editable__.*/toolsrv/*.py are links to the checkout) back to the checkout,
so `make run` serves the files as they are edited.

The documentation (README.md, SECURITY.md and doc/*.md) is not package data: the server
never reads it.  The wheel installs it where man pages and docs go (data_files:
PREFIX/share/doc/toolsrv/), and `docs()` finds it for `toolsrv --help`: the checkout's
for a checkout, the installed copy otherwise.
"""
import os

PACKAGE = os.path.dirname(os.path.realpath(__file__))       # toolsrv/
DATA = os.path.join(PACKAGE, "data")
TOOLS = os.path.join(DATA, "tools")         # the bundled tools: the tools path's last entry
PROFILES = os.path.join(DATA, "sandbox")    # the shipped profiles, after ~/.config/ollie/sandbox


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
