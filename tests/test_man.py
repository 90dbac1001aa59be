"""The man pages, toolsrv(1) and toolsrv(4) (issue 27, 6): made from doc/toolsrv.[14].md
by doc/mdroff.py (`make man`, run before every install by make), shipped as package data
in toolsrv/man/ and installed to share/man/man[14] (setup.cfg), so `man toolsrv` works
after `pip install`.  The shipped roff is what the converter makes of the Markdown now."""
from __future__ import annotations

import importlib.resources
import importlib.util
import os
import shutil
import subprocess
import sys
import zipfile

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGES = [("toolsrv.1", "doc/toolsrv.1.md"), ("toolsrv.4", "doc/toolsrv.4.md")]


def mdroff():
    spec = importlib.util.spec_from_file_location("mdroff", os.path.join(REPO, "doc",
                                                                          "mdroff.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("page, md", PAGES)
def test_the_shipped_page_is_made_from_its_markdown(page, md):
    with open(os.path.join(REPO, md), encoding="utf-8") as f:
        want = mdroff().convert(f.read())
    with open(os.path.join(REPO, "toolsrv", "man", page), encoding="utf-8") as f:
        assert f.read() == want, f"toolsrv/man/{page} is stale: run `make man`"


@pytest.mark.skipif(shutil.which("man") is None, reason="man(1) is not installed")
@pytest.mark.parametrize("page, md", PAGES)
def test_man_renders_the_page(page, md):
    p = subprocess.run(["man", "--warnings", "-l", os.path.join(REPO, "toolsrv", "man", page)],
                       capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, MANWIDTH="80", LC_ALL="C.UTF-8", MANPAGER="cat",
                                PAGER="cat"))
    assert p.returncode == 0, p.stderr
    assert p.stderr == "", p.stderr
    out = p.stdout
    assert out.startswith(f"TOOLSRV({page[-1]})") and "NAME" in out and "SYNOPSIS" in out
    assert "```" not in out and "##" not in out         # no raw Markdown left


def test_the_pages_are_package_data():
    man = importlib.resources.files("toolsrv").joinpath("man")
    assert man.joinpath("toolsrv.1").is_file() and man.joinpath("toolsrv.4").is_file()


def test_the_wheel_installs_them_where_man_looks(tmp_path):
    """A wheel built from the checkout carries both pages as package data and as
    share/man/man[14] data files (man(1) finds <prefix>/share/man from <prefix>/bin)."""
    p = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w",
                        str(tmp_path), REPO],
                       capture_output=True, text=True, timeout=600, cwd=str(tmp_path))
    assert p.returncode == 0, p.stderr
    wheel = next(tmp_path.glob("toolsrv-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert "toolsrv/man/toolsrv.1" in names and "toolsrv/man/toolsrv.4" in names
    assert any(n.endswith(".data/data/share/man/man1/toolsrv.1") for n in names), names
    assert any(n.endswith(".data/data/share/man/man4/toolsrv.4") for n in names)
