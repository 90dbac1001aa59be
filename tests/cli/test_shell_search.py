"""Discovery from a shell (issue 18): `toolsrv search WORDS`, the banner, the search files
through a real 9pfuse mount, and search without the semantic extra.

Through 9pfuse, `echo need > F; cat F` opens one fid for the echo and another for the cat,
so the shell's file is the agent's `search` (it keeps that agent's last answer);
`tools/search` answers on the fid that wrote, which a shell reaches with one read-write
descriptor (`exec 3<> tools/search`).  The server is a `toolsrv serve` of its own; tests
through the mount skip, saying why, where 9pfuse or FUSE is missing.
"""
from __future__ import annotations

import importlib.util
import os
import tempfile

import pytest

from toolsrv.dirs.bundled import install_hint
from shellhelpers import TOOLSRV, mounted_or_skip, serving, sh

TOOLS = {"pdf_split": (None, {"cmd": "cat", "description": "Cut a PDF document into parts.",
                              "keywords": ["split pdf pages", "burst"]}),
         "img_scale": (None, {"cmd": "cat", "description": "Resize an image.",
                              "keywords": ["thumbnail", "shrink photo"]})}
HAVE_EXTRA = importlib.util.find_spec("wordllama") is not None
# A Python start-up hook that makes `import wordllama` fail, as if the extra were missing.
NO_EXTRA = """\
import sys
class _NoWordllama:
    def find_spec(self, name, path=None, target=None):
        if name == "wordllama" or name.startswith("wordllama."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, _NoWordllama())
"""


@pytest.fixture(scope="module")
def server():
    with serving(tools=TOOLS) as (env, banner, p):
        yield dict(env, TOOLSRV=" ".join(TOOLSRV)), banner
    assert p.returncode == 0


@pytest.fixture(scope="module")
def mnt(server):
    with mounted_or_skip(server[0]) as m:
        yield m


def first_names(out: str) -> list[str]:
    return [ln.split("\t")[0] for ln in out.splitlines() if ln and not ln.startswith("#")]


def test_the_banner_says_what_search_ranks_with(server):
    _, banner = server
    want = "lexical + semantic" if HAVE_EXTRA else "lexical only"
    assert f"toolsrv: search: {want}" in banner and "search read a file" in banner


def test_toolsrv_search_prints_the_answer(server):
    env, _ = server
    r = sh(f"{env['TOOLSRV']} search burst pdf pages", env, check=True)
    assert first_names(r.stdout)[0] == "pdf_split"
    assert r.stdout.splitlines()[-1].count("\t") == 2
    r = sh(f"{env['TOOLSRV']} search -n 1 shrink a photo", env, check=True)
    assert first_names(r.stdout) == ["img_scale"]
    r = sh(f"{env['TOOLSRV']} search -n 0 photo", env)
    assert r.returncode == 2 and "-n 0: give 1 to 100 tools" in r.stderr   # usage, before
    #                                                                   connecting


def test_echo_then_cat_of_the_agents_search_file(server, mnt):
    env, _ = server
    a = f"{mnt}/session/sh1/agent/me"
    r = sh(f"mkdir {mnt}/session/sh1 {a} && echo 'burst pdf pages' > {a}/search && "
           f"cat {a}/search", env, check=True)
    assert first_names(r.stdout)[0] == "pdf_split"
    r = sh(f"printf 'limit 1\\nthumbnail\\n' > {a}/search && cat {a}/search", env, check=True)
    assert first_names(r.stdout) == ["img_scale"]
    r = sh(f"echo '   ' > {a}/search", env)      # the error reaches the shell as EINVAL
    assert r.returncode != 0 and "Invalid argument" in r.stderr
    assert "search -> error: search: empty need" in sh(f"cat {a}/log", env).stdout
    r = sh(f"cat {a}/search", env, check=True)
    assert first_names(r.stdout) == ["img_scale"]


def test_one_read_write_descriptor_on_the_agents_search_file(server, mnt):
    """Issue 46 item 1: the descriptor reads after its write; the first line is whole."""
    env, _ = server
    a = f"{mnt}/session/sh46/agent/me"
    r = sh(f"mkdir {mnt}/session/sh46 {a} && exec 3<> {a}/search && "
           f"echo 'shrink a photo' >&3 && head -n 1 <&3", env, check=True)
    assert r.stdout.startswith("img_scale\t") and r.stdout.count("\n") == 1, r.stdout


def test_one_read_write_descriptor_on_tools_search(server, mnt):
    env, _ = server
    r = sh(f"exec 3<> {mnt}/tools/search && echo 'shrink a photo' >&3 && cat <&3", env,
           check=True)
    assert first_names(r.stdout)[0] == "img_scale"
    r = sh(f"echo 'shrink a photo' > {mnt}/tools/search && cat {mnt}/tools/search", env,
           check=True)
    assert r.stdout == ""          # two descriptors, two fids: the answer was the echo's
    r = sh(f"head -c 5000 /dev/zero | tr '\\0' x > {mnt}/tools/search", env)
    assert r.returncode != 0 and "Argument list too long" in r.stderr


def test_without_the_extra_search_is_lexical_and_says_so_once():
    hook = tempfile.mkdtemp(prefix="noextra.", dir="/tmp")
    with open(os.path.join(hook, "sitecustomize.py"), "w") as f:
        f.write(NO_EXTRA)
    with serving(tools=TOOLS, PYTHONPATH=hook) as (env, banner, p):
        assert "toolsrv: search: lexical only: the semantic ranker is not installed " \
               f"({install_hint('search')})" in banner
        env = dict(env, TOOLSRV=" ".join(TOOLSRV))
        cmd = f"{env['TOOLSRV']} search burst pdf pages"
        first = sh(cmd, env, check=True).stdout
        assert first.splitlines()[0] == ("# search is lexical only: the semantic ranker is "
                                         f"not installed ({install_hint('search')}): "
                                         "wordllama not installed")
        assert first_names(first)[0] == "pdf_split"
        again = sh(cmd, env, check=True).stdout
        assert not again.startswith("#") and first_names(again)[0] == "pdf_split"
        # a need that shares no word with any tool finds nothing, lexically
        assert sh(f"{env['TOOLSRV']} search reduce a picture", env, check=True).stdout == ""
