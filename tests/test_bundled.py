"""The package data (issue 26): what the server reads at run time is inside the package,
found through it, and every file of it is one the wheel carries (setup.cfg's
package_data; tests/deploy/check.sh installs the wheel and checks the installed files)."""
from __future__ import annotations

import configparser
import fnmatch
import importlib.resources
import os

from toolsrv import bundled
from toolsrv.app import default_tools_path
from toolsrv.run.sandbox import default_shipped_dir

from outside import CHECKOUT


def test_the_data_is_found_through_the_package() -> None:
    pkg = os.path.realpath(str(importlib.resources.files("toolsrv").joinpath("__init__.py")))
    assert bundled.PACKAGE == os.path.dirname(pkg)
    assert bundled.TOOLS == os.path.join(bundled.PACKAGE, "data", "tools")
    assert str(default_shipped_dir()) == bundled.PROFILES
    assert os.path.isfile(os.path.join(bundled.PROFILES, "default.yaml"))
    assert os.path.isfile(os.path.join(bundled.TOOLS, "file_read.meta"))
    assert os.access(os.path.join(bundled.TOOLS, "file_read"), os.X_OK)


def test_the_default_tools_path_ends_with_the_bundled_tools(monkeypatch) -> None:
    monkeypatch.delenv("OLLIE_TOOLS_PATH", raising=False)
    assert default_tools_path()[-1] == bundled.TOOLS


def test_every_data_file_is_package_data() -> None:
    cfg = configparser.ConfigParser()
    cfg.read(os.path.join(CHECKOUT, "setup.cfg"))
    globs = [g.strip() for g in cfg["options.package_data"]["toolsrv"].split("\n") if g.strip()]
    left_out = []
    for d, dirs, files in os.walk(bundled.DATA):
        dirs[:] = [x for x in dirs if x != "__pycache__"]
        for f in files:
            rel = os.path.relpath(os.path.join(d, f), bundled.PACKAGE)
            if not any(fnmatch.fnmatch(rel, g) and rel.count("/") == g.count("/")
                       for g in globs):
                left_out.append(rel)
    assert left_out == [], f"not in the wheel (setup.cfg [options.package_data]): {left_out}"
