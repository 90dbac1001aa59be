"""toolsrv: a 9P2000 file server that exposes a registry of tools as files.

The package's folders are its parts (doc/architecture.md), and imports run one way, from
the top of this list down, never up (tests/test_layout.py checks it):

    cli/       the `toolsrv` command: its verbs, the 9P client, mount, the banner
               (__main__.py, its thin entry, and client.py, the client's old path)
    mcp/       the MCP face, `toolsrv mcp`: an MCP server that is a client of the tree
    app.py     one server process: its parts made in order, listened on, shut down
               (wiring.py: each part made from the Options and joined to the others)
               (options.py: `serve`'s options, each declared once, and Options)
    hosts/     imports of other hosts' trees, and the asyncio 9P client they share
    serve/     where a 9P request enters: sockets, dial strings, fids, tags, flush, auth,
               the one respond path
    tree/      the synthetic namespace, generated on demand: nodes, the root and sessions'
               files, an agent's files; tree/calls/ a call from its args to its result,
               tree/state/ the session store, tree/resident/ tools that stay running
    registry/  tools on disk: .meta files, variants, command resolution, watching
    run/       one tool call run confined, bounded and killable, by the server (runner,
               launcher, sandbox profiles, elevation), run/init/ by the forked zygote and
               inits, run/kernel/ the kernel bindings (Landlock, seccomp, cgroups, idmaps)
    dirs/      the directories the server keeps things in, proved ours and locked, and
               where the package data is (dirs/bundled.py)
    errors.py, record.py    the error strings, the record base classes: used by all
    proto/     the 9P2000 codec, pure (sans-I/O): toolsrv.proto, its source the
               checkout's proto/

run/ and registry/ stand side by side and import nothing of each other; proto/ (the 9P
codec, installed as toolsrv.proto so no other project's `proto` clashes with it) imports
nothing of the rest of toolsrv.  The package data read at run time, the bundled tools and
the shipped sandbox profiles, is the checkout's data/tools/, data/bin/ and sandbox/, and
toolsrv/data/ once installed (setup.cfg's package_dir maps them and proto/ in).

Every folder's __init__ is a comment and imports nothing (this one, os alone, to find the
codec in a checkout), so importing one module of a part costs that module alone: the
launcher's zygote (run/init/zygote.py) starts from a bare interpreter and must stay small.
"""
import os as _os

__version__ = "0.1.0"

# A checkout on sys.path (`python -m pytest` run in it, PYTHONPATH): the codec's source is
# proto/ beside toolsrv/, mapped to toolsrv/proto/ only in the wheel and the editable
# install's link tree, so the checkout's top joins the package's path to find it there.
# (Run as a plain module, as tests/test_error_words.py imports each file, it has no
# __path__ and nothing to do.)
_path = globals().get("__path__")
# A toolsrv/proto/ left by a pull from before the move (its __pycache__ alone) is no
# package: only its __init__.py says the codec is there.
if _path and not _os.path.isfile(_os.path.join(_path[0], "proto", "__init__.py")) and \
        _os.path.isfile(_os.path.join(_os.path.dirname(_path[0]), "proto", "__init__.py")):
    _path.append(_os.path.dirname(_path[0]))
del _os, _path
