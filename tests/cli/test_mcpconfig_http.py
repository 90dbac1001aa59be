"""`toolsrv mcp --http HOST:PORT --config` prints what an HTTP client needs (issue 46, 12):
the url and the bearer header, in each client's form, not the stdio command it dropped
--http from."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile


def config(*argv: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "toolsrv", "mcp", *argv], text=True,
                          capture_output=True, timeout=60, cwd=tempfile.gettempdir(),
                          env=env)


def test_the_http_config_is_the_url_and_the_token_header(tmp_path):
    token = tmp_path / "tok"
    token.write_text("0123456789abcdef0123\n")
    token.chmod(0o600)
    p = config("--http", "127.0.0.1:8765", "--token-file", str(token), "--config")
    assert p.returncode == 0, p.stderr
    want = {"url": "http://127.0.0.1:8765/mcp",
            "headers": {"Authorization": "Bearer 0123456789abcdef0123"}}
    assert json.loads(p.stdout) == {"mcpServers": {"toolsrv": {"type": "http", **want}}}
    p = config("--http", "127.0.0.1:8765", "--token-file", str(token), "--config", "vscode")
    assert json.loads(p.stdout) == {"servers": {"toolsrv": {"type": "http", **want}}}
    p = config("--http", "[::1]:9000", "--no-token", "--config", "cursor")
    assert json.loads(p.stdout) == {"mcpServers": {"toolsrv": {
        "url": "http://[::1]:9000/mcp"}}}


def test_a_token_not_made_yet_is_said_with_what_to_do(tmp_path):
    env = dict(os.environ, XDG_STATE_HOME=str(tmp_path), HOME=str(tmp_path))
    p = config("--http", "127.0.0.1:8765", "--config", env=env)
    assert p.returncode == 0, p.stderr
    entry = json.loads(p.stdout)["mcpServers"]["toolsrv"]
    assert entry["headers"] == {"Authorization": "Bearer TOKEN"}
    assert "mcp-token: No such file or directory: start `toolsrv mcp --http " \
        "127.0.0.1:8765` once (it makes the file)" in p.stderr, p.stderr
