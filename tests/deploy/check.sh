#!/usr/bin/env bash
# tests/deploy/check.sh — the deployment check (issue 26): the product as users install it.
#
# The suite runs the checkout; this runs the wheel.  It builds the wheel from a copy of the
# working tree (`pip wheel --no-deps .`), installs it, not editable, into a fresh venv
# outside the checkout, and then, from directories that are neither the checkout nor each
# other, with a fresh HOME:
#   - the package data: the bundled tools (with their executable bits), their helper
#     commands and the shipped sandbox profiles, the checkout's data/tools/, data/bin/ and
#     sandbox/, are installed inside the package (toolsrv/data/), where importlib.resources
#     finds them; the codec, the checkout's proto/, is toolsrv.proto, and `import proto`
#     finds no module of ours;
#   - `toolsrv serve` started from / on a private address, serving the tool format's quick
#     start (a Python `my_tool` and a `cmd`-only tool in a 0700 ~/.config/ollie/tools) and
#     the bundled tools: a call of each (and of the bundled client_9p, which loads the
#     installed package's 9P client under its profile), two Python calls, then /status
#     shows a warm interpreter made and no warm start failed;
#   - `toolsrv mcp` from a third directory, standalone (nothing at the usual address),
#     through the official MCP SDK's stdio client: the tool list and one call;
#   - no traceback in the server's log or on the MCP client's stderr.
# Any failure ends it with status 1 and the log that shows why.  It works as root (tools
# run as nobody) and as an ordinary user.  `make test` runs it after the suite (and
# `make deploy-check` alone).
#
# Dependencies come from wherever pip finds them (its cache, a local find-links, PyPI);
# pip itself is borrowed from $PIP_PY (default: the checkout's .venv, else python3), so
# the fresh venv is made without pip (`python3 -m venv --without-pip`, seconds faster).
set -euo pipefail

REPO=$(cd "$(dirname "$0")/../.." && pwd)
PY=${PY:-python3}
PIP_PY=${PIP_PY:-$REPO/.venv/bin/python}
[ -x "$PIP_PY" ] || PIP_PY=$(command -v "$PY")
START=$SECONDS

T=$(mktemp -d "${TMPDIR:-/tmp}/toolsrv-deploy.XXXXXX")
chmod 755 "$T"   # a root server runs tools as nobody: the calls' directories are its too
SERVER_PID=
cleanup() {
    if [ -n "$SERVER_PID" ]; then
        kill "$SERVER_PID" 2>/dev/null || true
        wait "$SERVER_PID" 2>/dev/null || true
    fi
    if [ -z "${KEEP:-}" ]; then rm -rf "$T"; else echo "deploy-check: kept $T"; fi
}
trap cleanup EXIT

step() { echo "deploy-check: $*"; }
fail() {
    echo "deploy-check: FAILED: $*" >&2
    for f in "$T"/*.log; do
        [ -s "$f" ] && { echo "--- $f" >&2; tail -n 40 "$f" >&2; }
    done
    exit 1
}

# --- the wheel, from a copy of the working tree (the checkout is never written) -----------
mkdir -p "$T/src" "$T/dist"
tar -C "$REPO" --exclude=./.venv --exclude=./build --exclude=./dist --exclude=./.git \
    --exclude='*.egg-info' --exclude=__pycache__ --exclude=.pytest_cache \
    --exclude=.hypothesis -cf - . | tar -C "$T/src" -xf -
# pip wheel builds in an isolated environment it fills with setuptools each time (15 s
# here); a pip whose own setuptools builds wheels alone (70.1 on) builds without that.
ISOLATION=
"$PIP_PY" -c 'import setuptools, sys
sys.exit(tuple(map(int, setuptools.__version__.split(".")[:2])) < (70, 1))' 2>/dev/null \
    && ISOLATION=--no-build-isolation
(cd "$T/src" && "$PIP_PY" -m pip wheel -q --no-deps $ISOLATION -w "$T/dist" . \
    >"$T/wheel.log" 2>&1) &
WHEEL_PID=$!
"$PY" -m venv --without-pip "$T/venv" || fail "python3 -m venv"
wait "$WHEEL_PID" || fail "pip wheel --no-deps . (see wheel.log)"
WHL=$(ls "$T"/dist/toolsrv-*.whl)
step "built $(basename "$WHL") ($((SECONDS - START)) s)"

V=$T/venv/bin
# The dependencies: from a wheelhouse kept between runs (offline once it holds them), filled
# through pip (its cache, find-links, PyPI) when it lacks one.  --no-compile: no .pyc for
# 30 packages (10 s here); the server runs the same without them.
WH=${TOOLSRV_WHEELHOUSE:-${XDG_CACHE_HOME:-$HOME/.cache}/toolsrv/deploy-wheels}
install() {
    "$PIP_PY" -m pip --python "$V/python" install -q --no-compile --no-index \
        --find-links "$WH" "$WHL[mcp]" >>"$T/install.log" 2>&1
}
if ! install; then
    step "filling the wheelhouse $WH"
    mkdir -p "$WH"
    "$PIP_PY" -m pip wheel -q -w "$WH" "$WHL[mcp]" >>"$T/install.log" 2>&1 \
        || fail "pip wheel of the dependencies (see install.log)"
    rm -f "$WH"/toolsrv-*.whl
    install || fail "pip install of the wheel into a fresh venv (see install.log)"
fi
step "installed into a fresh venv, not editable ($((SECONDS - START)) s)"

mkdir -m 755 "$T/a" "$T/b" "$T/c" "$T/ns" "$T/ns-empty"
chmod 700 "$T/ns" "$T/ns-empty"

# --- package data ---------------------------------------------------------------------------
(cd "$T/a" && "$V/python" - "$REPO" <<'EOF') >"$T/data.log" 2>&1 \
    || fail "the package data (see data.log)"
import importlib.resources, importlib.util, os, stat, sys
import toolsrv, toolsrv.dirs.bundled as b, toolsrv.proto
pkg = os.path.realpath(str(importlib.resources.files("toolsrv")))
assert "site-packages" in pkg and os.path.realpath(b.PACKAGE) == pkg, (pkg, b.PACKAGE)
assert b.DATA == os.path.join(b.PACKAGE, "data") and b.PROFILES == os.path.join(b.DATA, "sandbox")
assert importlib.util.find_spec("proto") is None, "a top-level proto is installed"
src = sys.argv[1]
assert os.path.dirname(toolsrv.proto.__file__) == os.path.join(pkg, "proto")
py = [sorted(n for n in os.listdir(os.path.join(d, "proto")) if n.endswith(".py"))
      for d in (pkg, src)]
assert py[0] == py[1] and "codec.py" in py[0], py
for sub, there in (("data/tools", b.TOOLS), ("data/bin", b.BIN), ("sandbox", b.PROFILES)):
    for name in sorted(os.listdir(os.path.join(src, sub))):
        if name == "__pycache__":
            continue
        want = os.stat(os.path.join(src, sub, name)).st_mode
        got = os.stat(os.path.join(there, name)).st_mode   # FileNotFoundError: missing
        assert bool(want & stat.S_IXUSR) == bool(got & stat.S_IXUSR), f"{sub}/{name}: mode"
print("package data: ok", b.DATA)
docs = b.docs()            # the documentation, beside the man pages (data_files)
assert docs == os.path.join(sys.prefix, "share", "doc", "toolsrv"), (docs, sys.prefix)
pages = sorted(n for n in os.listdir(os.path.join(src, "doc")) if n.endswith(".md"))
for page in ["README.md", "SECURITY.md"] + ["doc/" + n for n in pages]:
    assert os.path.isfile(os.path.join(docs, page)), f"{page} not installed in {docs}"
print("documentation: ok", docs)
EOF
"$V/toolsrv" --help | grep -qF "documentation: $(dirname "$V")/share/doc/toolsrv/README.md" \
    || fail "toolsrv --help does not say where the installed documentation is"
step "package data and documentation installed, modes kept; no top-level proto"

# --- the quick start, in a fresh HOME ------------------------------------------------------
export HOME=$T/home
mkdir -p "$HOME/.config/ollie"
mkdir -m 700 "$HOME/.config/ollie/tools"
TOOLS=$HOME/.config/ollie/tools
cat >"$TOOLS/my_tool" <<'EOF'
#!/usr/bin/env python3
import json, sys
args = json.load(sys.stdin)
print(f"my_tool saw {args['path']}")
EOF
chmod 755 "$TOOLS/my_tool"
cat >"$TOOLS/my_tool.meta" <<'EOF'
{
  "description": "One-liner shown in tool listings.",
  "prompt": "## my_tool\n\nFull documentation shown when loaded.",
  "args": {"type": "object", "required": ["path"],
           "properties": {"path": {"type": "string", "description": "File path"}}},
  "tier": "hot"
}
EOF
# the quick start's metadata-only tool (its cmd needs jq; without jq, the same by python3)
"$V/python" - "$TOOLS/json_path.meta" "$(command -v jq || true)" <<'EOF'
import json, sys
cmd = ("input=$(cat); echo \"$input\" | jq -r '.path'" if sys.argv[2] else
       "python3 -c 'import json, sys; print(json.load(sys.stdin)[\"path\"])'")
json.dump({"description": "Extract a value from JSON.",
           "prompt": "## json_path\n\nRead `.path` from JSON input.", "cmd": cmd,
           "args": {"type": "object", "required": ["path"],
                    "properties": {"path": {"type": "string"}}}}, open(sys.argv[1], "w"))
EOF
echo "a line of the deployment check" >"$T/b/hello.txt"
chmod 644 "$T/b/hello.txt"
unset OLLIE_TOOLS_PATH TOOLSRV_ADDR PYTHONPATH XDG_STATE_HOME XDG_CONFIG_HOME || true
export NAMESPACE=$T/ns

# --- toolsrv serve, from / -----------------------------------------------------------------
ADDR="unix!$T/ns/deploy"
(cd / && exec "$V/toolsrv" serve -a "$ADDR" >"$T/server.log" 2>&1) &
SERVER_PID=$!
for _ in $(seq 600); do
    [ -S "$T/ns/deploy" ] && break
    kill -0 "$SERVER_PID" 2>/dev/null || fail "toolsrv serve ended at start-up"
    sleep 0.1
done
[ -S "$T/ns/deploy" ] || fail "toolsrv serve did not listen within 60 s"
step "toolsrv serve listening on $ADDR ($((SECONDS - START)) s)"

call() {   # call TOOL JSON EXPECTED: from directory b, the output must contain EXPECTED
    local out
    out=$(cd "$T/b" && "$V/toolsrv" call -a "$ADDR" deploy me "$1" "$2" 2>>"$T/client.log") \
        || fail "toolsrv call $1 $2: status $? (output: $out)"
    case "$out" in *"$3"*) ;; *) fail "toolsrv call $1 $2: got '$out', wanted '$3'" ;; esac
}
call my_tool '{"path": "first"}' "my_tool saw first"
call json_path '{"path": "from the cmd"}' "from the cmd"
call file_read '{"path": "hello.txt"}' "a line of the deployment check"
FR=$(cd "$T/c" && "$V/toolsrv" read -a "$ADDR" session/deploy/agent/me/tools/file_read/status \
     2>>"$T/client.log") || fail "toolsrv read file_read's status"
case "$FR" in *"resident up "*) ;; *) fail "file_read did not run resident (protocol python, from the installed package): $FR" ;; esac
call client_9p '{"op": "read", "path": "tools/index"}' "my_tool"   # the package, read confined
call my_tool '{"path": "second"}' "my_tool saw second"
STATUS=$(cd "$T/c" && "$V/toolsrv" read -a "$ADDR" status 2>>"$T/client.log") \
    || fail "toolsrv read status"
echo "$STATUS" >"$T/status.log"
echo "$STATUS" | grep -Eq '; [1-9][0-9]* made warm' || fail "/status shows no warm interpreter made"
echo "$STATUS" | grep -Eq ', 0 failed' || fail "/status shows a failed warm start"
step "quick-start calls, bundled file_read (resident) and client_9p; /status: warm made, none failed"

# --- toolsrv mcp, standalone, from a third directory ---------------------------------------
(cd "$T/c" && NAMESPACE=$T/ns-empty "$V/python" - "$V/toolsrv" "$T/b" "$T/mcp-stderr.log" \
    <<'EOF') >"$T/mcp.log" 2>&1 || fail "toolsrv mcp through the SDK's stdio client"
import os, sys
import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

toolsrv, work, errlog = sys.argv[1:]
async def main():
    params = StdioServerParameters(command=toolsrv, args=["mcp"], env=dict(os.environ), cwd=work)
    with open(errlog, "w") as err, anyio.fail_after(120):
        async with stdio_client(params, errlog=err) as (r, w):
            async with ClientSession(r, w) as s:
                await s.initialize()
                names = {t.name for t in (await s.list_tools()).tools}
                assert {"my_tool", "json_path", "file_read"} <= names, sorted(names)
                res = await s.call_tool("my_tool", {"path": "through mcp"})
                text = "".join(getattr(c, "text", "") for c in res.content)
                bad = getattr(res, "is_error", getattr(res, "isError", None))
                assert bad is False and "my_tool saw through mcp" in text, res
                print("mcp: ok,", len(names), "tools")
anyio.run(main)
EOF
step "toolsrv mcp standalone: list and a call through the SDK's stdio client"

kill "$SERVER_PID" && wait "$SERVER_PID" || true
SERVER_PID=
for f in server.log client.log mcp-stderr.log mcp.log; do
    if grep -q "Traceback" "$T/$f" 2>/dev/null; then fail "a traceback in $f"; fi
done
step "no traceback in the server's log or the clients' stderr"
step "passed as $(id -un) in $((SECONDS - START)) s"
