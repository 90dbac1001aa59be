"""The package data (issue 26): what the server reads at run time ships with the package,
found through it (toolsrv/dirs/bundled.py), and every file of it is one the wheel carries
(setup.cfg's package_dir and package_data; tests/deploy/check.sh installs the wheel and
checks the installed files).  The suite runs a checkout, whose data is at its top (issue
47.1: data/tools/, data/bin/, sandbox/); an installed package holds it in toolsrv/data/."""
from __future__ import annotations

import configparser
import fnmatch
import importlib.resources
import os

from toolsrv.dirs import bundled
from toolsrv.wiring import default_tools_path
from toolsrv.run.sandbox import default_shipped_dir

from outside import CHECKOUT


def test_the_data_is_found_through_the_package() -> None:
    pkg = os.path.realpath(str(importlib.resources.files("toolsrv").joinpath("__init__.py")))
    assert bundled.PACKAGE == os.path.dirname(pkg)
    assert os.path.dirname(bundled.PACKAGE) == os.path.realpath(CHECKOUT)   # a checkout's
    assert bundled.TOOLS == os.path.join(os.path.dirname(bundled.PACKAGE), "data", "tools")
    assert bundled.PROFILES == os.path.join(os.path.dirname(bundled.PACKAGE), "sandbox")
    assert str(default_shipped_dir()) == bundled.PROFILES
    assert os.path.isfile(os.path.join(bundled.PROFILES, "default.yaml"))
    assert os.path.isfile(os.path.join(bundled.TOOLS, "file_read.meta"))
    assert os.access(os.path.join(bundled.TOOLS, "file_read"), os.X_OK)


def test_a_checkout_and_an_installed_package_each_find_their_own(tmp_path) -> None:
    """The checkout's data/ and sandbox/ beside toolsrv/; else the package's own data/."""
    top = tmp_path / "checkout"
    for d in ("toolsrv", "data/tools", "data/bin", "sandbox"):
        (top / d).mkdir(parents=True)
    (top / "setup.cfg").write_text("[metadata]\nname = toolsrv\n")
    assert bundled.layout(str(top / "toolsrv")) == (str(top / "data"), str(top / "sandbox"))
    site = tmp_path / "site-packages" / "toolsrv"
    (site / "data" / "tools").mkdir(parents=True)
    (tmp_path / "site-packages" / "data" / "tools").mkdir(parents=True)   # not a checkout
    assert bundled.layout(str(site)) == (str(site / "data"), str(site / "data" / "sandbox"))


def test_the_default_tools_path_ends_with_the_bundled_tools(monkeypatch) -> None:
    monkeypatch.delenv("OLLIE_TOOLS_PATH", raising=False)
    assert default_tools_path()[-1] == bundled.TOOLS


def test_every_data_file_is_package_data() -> None:
    """Each file of data/ and sandbox/ matches a package_data glob of the package that
    package_dir maps its directory to (toolsrv.data: data/, toolsrv.data.sandbox: sandbox/)."""
    cfg = configparser.ConfigParser()
    cfg.read(os.path.join(CHECKOUT, "setup.cfg"))
    src = dict(tuple(x.strip() for x in line.split("=")) for line in
               cfg["options"]["package_dir"].strip().splitlines())
    globs = [os.path.join(src.get(pkg, pkg.replace(".", "/")), g.strip())
             for pkg, text in cfg["options.package_data"].items()
             for g in text.split("\n") if g.strip()]
    assert os.path.join("data", "tools", "*") in globs, globs
    left_out = []
    for d, dirs, files in (w for top in (bundled.DATA, bundled.PROFILES) for w in os.walk(top)):
        dirs[:] = [x for x in dirs if x != "__pycache__"]
        for f in files:
            rel = os.path.relpath(os.path.join(d, f), os.path.dirname(bundled.PACKAGE))
            if not any(fnmatch.fnmatch(rel, g) and rel.count("/") == g.count("/")
                       for g in globs):
                left_out.append(rel)
    assert left_out == [], f"not in the wheel (setup.cfg [options.package_data]): {left_out}"


def test_a_checkout_finds_its_proto_past_a_stale_toolsrv_proto(tmp_path) -> None:
    """A checkout on sys.path finds the codec in proto/ beside toolsrv/; a toolsrv/proto/
    that a pull from before the move left behind (its __pycache__ alone) is not taken for
    it (a user's `make test` after `git pull` failed: cannot import name 'DMDIR')."""
    import shutil
    import subprocess
    import sys
    top = tmp_path / "checkout"
    (top / "toolsrv" / "proto" / "__pycache__").mkdir(parents=True)
    shutil.copy(os.path.join(CHECKOUT, "toolsrv", "__init__.py"), top / "toolsrv")
    (top / "proto").mkdir()
    (top / "proto" / "__init__.py").write_text("DMDIR = 1 << 31\n")
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import toolsrv.proto as p; "
            "print(p.__file__, p.DMDIR)")
    got = subprocess.run([sys.executable, "-I", "-c", code, str(top)],
                         capture_output=True, text=True, timeout=60)
    assert got.stdout.split() == [str(top / "proto" / "__init__.py"), str(1 << 31)], got
