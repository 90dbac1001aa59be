"""The output cap is an option, as the time limit is, and its error says what it is
(issue 46, 14): `serve --max-output SIZE` (default 10M); a run past it is killed with
`output too long: stdout cut at N, the cap (toolsrv serve --max-output); out holds its
first N`, and out holds exactly those N bytes."""
from __future__ import annotations

import shutil

import pytest

from apphelpers import AppThread, add_tool, tools_dir
from toolsrv.app import Options
from toolsrv.cli.client import Client, ClientError
from toolsrv.cli.command import parse_serve
from toolsrv.cli.serveargs import serve_options


def test_the_option_reaches_the_runner_config():
    assert serve_options(parse_serve([])).max_output == Options().max_output == 10 << 20
    assert serve_options(parse_serve(["--max-output", "2K"])).max_output == 2048


def test_a_run_past_the_cap_says_it_is_fixed_and_out_holds_the_first_n():
    d = tools_dir()
    add_tool(d, "loud", "#!/bin/sh\nhead -c 5000 /dev/zero | tr '\\0' y\nsleep 30\n")
    add_tool(d, "noisy", "#!/bin/sh\nhead -c 5000 /dev/zero | tr '\\0' e >&2\nsleep 30\n")
    app = AppThread([d], max_output=1000).start()
    try:
        with Client.connect(app.addr) as c:
            c.mkdir("session/cap")
            c.mkdir("session/cap/agent/a")
            c.rdwr("session/cap/agent/a/ctl", b"tool_load loud noisy")
            for tool, stream, f in (("loud", "stdout", "out"), ("noisy", "stderr", "err")):
                with pytest.raises(ClientError) as e:
                    c.rdwr(f"session/cap/agent/a/tools/{tool}/call", b"{}")
                assert str(e.value) == (
                    f"output too long: {stream} cut at 1000 bytes, the cap (toolsrv serve "
                    f"--max-output); {f} holds its first 1000 bytes")
                kept = c.read(f"session/cap/agent/a/tools/{tool}/{f}")
                assert kept == (b"y" if f == "out" else b"e") * 1000
    finally:
        app.cleanup()
        shutil.rmtree(d, ignore_errors=True)
