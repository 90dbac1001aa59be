"""A schema's `$ref` never makes the server read a file or touch the network (issue 25,
section 2; shared/repro/round3/ref_fileread.sh, ref_hang.sh).

Only refs inside the schema (or to a bundled meta-schema) resolve.  A `.meta` with any
other ref is listed in tools/errors naming it; `import-mcp` writes such a schema and says
so; and a validator built for any schema (jsonargs.validator) refuses the ref without
I/O.  The file is a 0600 secret whose content must appear nowhere; the URL points at a
loopback listener that never accepts, and no connection may ever reach it."""
from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from shellhelpers import REPO, TOOLSRV, serving
from toolsrv.errors import P9Error
from toolsrv.registry.metafile import MetaError, parse_meta
from toolsrv.registry.schemaref import REASON, outside_refs
from toolsrv.tree.calls import jsonargs

HERE = Path(__file__).resolve().parents[1]
HOSTILE = str(HERE / "tools" / "hostile_mcp.py")
ECHO = "#!/bin/sh\ncat\n"


@pytest.fixture(scope="module")
def secret() -> Iterator[tuple[str, str]]:
    """(file:// URL, secret text) of a 0600 JSON schema that names the secret."""
    d = tempfile.mkdtemp(prefix="refsecret.", dir="/tmp")
    text = "ROOT-ONLY-SECRET-" + secrets.token_hex(6)
    path = os.path.join(d, "secret.json")
    with open(path, "w") as f:
        json.dump({"enum": [text]}, f)
    os.chmod(path, 0o600)
    yield "file://" + path, text
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def silent() -> Iterator[tuple[str, socket.socket]]:
    """(http URL, listener) of a loopback listener that never accepts."""
    sk = socket.socket()
    sk.bind(("127.0.0.1", 0))
    sk.listen(16)
    yield f"http://127.0.0.1:{sk.getsockname()[1]}/schema.json", sk
    sk.close()


def never_connected(sk: socket.socket) -> bool:
    """True when no connection ever reached the listener (none is queued to accept)."""
    sk.setblocking(False)
    try:
        conn, _ = sk.accept()
    except BlockingIOError:
        return True
    conn.close()
    return False


def schema_with(ref: str) -> dict:
    return {"type": "object", "properties": {"word": {"$ref": ref}}}


# ------------------------------------------------------------------- the check itself

@pytest.mark.parametrize("schema", [
    {"type": "object", "properties": {"w": {"$ref": "#/$defs/a"}}, "$defs": {"a": {}}},
    {"$id": "https://example.com/s", "type": "object",
     "properties": {"w": {"$ref": "https://example.com/s#/$defs/a"}}, "$defs": {"a": {}}},
    {"type": "object", "$defs": {"b": {"$id": "https://example.com/b"}},
     "properties": {"w": {"$ref": "https://example.com/b"}}},
    {"type": "object", "properties": {"w": {"$ref": "http://json-schema.org/draft-07/schema#"}}},
    {"type": "object", "properties": {"w": {"const": {"$ref": "file:///etc/passwd"}}}},
])
def test_refs_inside_the_schema_are_fine(schema):
    assert outside_refs(schema) == []
    parse_meta(json.dumps({"args": schema}).encode())


@pytest.mark.parametrize("ref", ["file:///root/x.json", "http://127.0.0.1:9/x", "other.json",
                                 "https://example.com/elsewhere#/a"])
def test_any_other_ref_is_a_meta_error_naming_it(ref):
    assert outside_refs(schema_with(ref)) == [ref]
    with pytest.raises(MetaError) as e:
        parse_meta(json.dumps({"args": schema_with(ref)}).encode())
    assert str(e.value) == f"args: $ref to {ref} {REASON}"
    meta = {"variants": [{"match": {"os": ["linux"]}, "args": schema_with(ref)}]}
    with pytest.raises(MetaError, match=r"variants\[0\]\.args: \$ref to "):
        parse_meta(json.dumps(meta).encode())


def test_a_validator_never_reads_a_file_ref(secret):
    url, text = secret
    tool = type("T", (), {"schema": schema_with(url)})()
    with pytest.raises(P9Error) as e:
        jsonargs.validate(tool, {"word": "hello"})
    # the reason may be shortened in its middle to fit a 9P error, the ref's URL never
    assert f"$ref to {url} is not" in str(e.value) and text not in str(e.value)
    assert text not in getattr(str(e.value), "full", "")


def test_a_validator_never_dials_an_http_ref(silent):
    url, sk = silent
    v = jsonargs.validator(schema_with(url))
    out: list[BaseException] = []

    def check() -> None:
        try:
            v.is_valid({"word": "hello"})
        except BaseException as e:  # noqa: BLE001 (kept for the assert)
            out.append(e)
    t = threading.Thread(target=check, daemon=True)
    t.start()
    t.join(60)
    assert not t.is_alive(), "validation waited on the listener"
    assert out and "is not resolved" in str(out[0]) or out and url in str(out[0]), out
    assert never_connected(sk)


# ------------------------------------------------------------------ a real server

@pytest.fixture
def refs_served(secret, silent):
    url, _ = secret
    http, _sk = silent
    tools = {"fileref": (ECHO, {"args": schema_with(url)}),
             "httpref": (ECHO, {"args": schema_with(http)}),
             "localref": (ECHO, {"args": {"type": "object", "$defs": {"w": {"type": "string"}},
                                          "properties": {"word": {"$ref": "#/$defs/w"}}}})}
    with serving("--no-state", tools=tools) as (env, _banner, _p):
        yield env


def ts(env: dict, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(TOOLSRV + list(argv), env=env, cwd=REPO, capture_output=True,
                          text=True, timeout=60)


def test_a_served_meta_with_an_outside_ref_is_in_tools_errors(refs_served, secret, silent):
    env = refs_served
    url, text = secret
    http, sk = silent
    errors = ts(env, "read", "tools/errors").stdout
    assert f"args: $ref to {url} {REASON}" in errors, errors
    assert f"args: $ref to {http} {REASON}" in errors, errors
    assert "localref" not in errors
    for tool in ("fileref", "httpref"):
        r = ts(env, "call", "refs", "a", tool, '{"word": "hello"}')
        assert r.returncode != 0 and text not in r.stdout + r.stderr, r
    r = ts(env, "call", "refs", "a", "localref", '{"word": 3}')
    assert r.returncode != 0 and "word: 3 is not of type 'string'" in r.stderr, r
    r = ts(env, "call", "refs", "a", "localref", '{"word": "hi"}')
    assert r.returncode == 0 and json.loads(r.stdout) == {"word": "hi"}, r
    assert text not in errors and never_connected(sk)


# ------------------------------------------------------------------------ import-mcp

def import_mcp(*argv: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "toolsrv", "import-mcp", "--no-profile", *argv],
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, **env})


def test_import_mcp_writes_an_outside_ref_and_says_so(tmp_path, secret):
    url, text = secret
    p = import_mcp("--dir", str(tmp_path), "--prefix", "hm.", "--", HOSTILE,
                   MODE="ref", REF=url)
    assert p.returncode == 0, p.stderr
    assert (f"note: tool 'lookup': args: $ref to {url!r} {REASON}; toolsrv lists hm.lookup "
            "in tools/errors") in p.stdout, p.stdout
    meta = (tmp_path / "hm.lookup.meta").read_text()
    assert url in meta and text not in meta and text not in p.stdout
    with pytest.raises(MetaError, match="is not resolved"):
        parse_meta(meta.encode())


def test_import_mcp_prints_names_escaped(tmp_path):
    p = import_mcp("--dir", str(tmp_path), "--", HOSTILE, MODE="names")
    assert p.returncode == 0, p.stderr
    assert "\x00" not in p.stdout and "\x1b" not in p.stdout and "\x07" not in p.stdout
    assert "('x\\x00y')" in p.stdout and "('bell\\x07\\x1b[2J')" in p.stdout, p.stdout
    assert "MCP server hostile\\x00\\x1b[31m 1: 4 tools" in p.stdout, p.stdout
    assert sorted(f.name for f in tmp_path.iterdir()) == [
        ".._up.meta", "bell___2J.meta", "fine.meta", "x_y.meta"]
