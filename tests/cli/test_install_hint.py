"""The hint for a missing extra works for how this toolsrv was installed (issue 46, 10):
`pip install 'toolsrv[mcp]'` names no distribution on the index for anyone who installed
the wheel from a file, nor does it reach an editable checkout; each form is built from
the installation's own record (PEP 610 direct_url.json), with this interpreter's pip."""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys

from toolsrv.dirs import bundled

PIP = f"{shlex.quote(sys.executable)} -m pip install"


def site(tmp_path, direct: dict | None):
    """A site-packages holding toolsrv/ and its dist-info, as pip leaves them."""
    pkg = tmp_path / "site-packages" / "toolsrv"
    pkg.mkdir(parents=True)
    info = tmp_path / "site-packages" / "toolsrv-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Name: toolsrv\n")
    if direct is not None:
        (info / "direct_url.json").write_text(json.dumps(direct))
    return str(pkg)


def test_a_wheel_installed_from_a_file_is_named_by_its_path(tmp_path, monkeypatch):
    whl = "/home/me/dl/toolsrv-0.1.0-py3-none-any.whl"
    monkeypatch.setattr(bundled, "PACKAGE", site(tmp_path, {
        "url": "file://" + whl, "archive_info": {"hash": "sha256=00"}}))
    assert bundled.install_hint("mcp") == f"{PIP} '{whl}[mcp]'"


def test_an_index_install_is_named_by_the_distribution(tmp_path, monkeypatch):
    monkeypatch.setattr(bundled, "PACKAGE", site(tmp_path, None))
    assert bundled.install_hint("search") == f"{PIP} 'toolsrv[search]'"


def test_a_checkout_is_installed_editable(tmp_path, monkeypatch):
    top = tmp_path / "src tree"
    (top / "toolsrv").mkdir(parents=True)
    (top / "setup.cfg").write_text("[metadata]\nname = toolsrv\n")
    monkeypatch.setattr(bundled, "PACKAGE", str(top / "toolsrv"))
    assert bundled.install_hint("lsp") == f"{PIP} -e '{top}[lsp]'"


def test_the_mcp_verb_without_the_sdk_prints_the_hint_for_this_install():
    p = subprocess.run([sys.executable, "-c", "import sys\n"
                        "sys.modules['mcp'] = sys.modules['mcp_types'] = None\n"
                        "from toolsrv.cli.command import main\n"
                        "sys.exit(main(['mcp']))\n"], capture_output=True, text=True,
                       timeout=60, stdin=subprocess.DEVNULL, cwd="/")
    assert p.returncode == 1
    up = os.path.dirname(bundled.PACKAGE)         # this checkout: an editable install
    assert p.stderr.startswith("toolsrv mcp: the MCP SDK is not installed (it is needed by "
                               f"this command only): {PIP} -e '{up}[mcp]' ("), p.stderr
