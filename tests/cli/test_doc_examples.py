"""The docs, run as written (issue 21).

- Every shell example of doc/scripting.md runs, in order, as a reader would type it: a
  server on the default address, a home of its own (`~/mnt/toolsrv`), `toolsrv` on PATH,
  a directory to work in.  A script block must exit 0 under `set -e`; a transcript block
  (`$ command` lines, each followed by what it prints) must print that, time stamps and
  durations aside (`…` in the doc stands for anything).  Blocks that go through the mount
  run where plan9port's 9pfuse is installed and skip, saying why, elsewhere.
- Every YAML block in the docs is a sandbox profile that validates, or a policy.yaml (its
  keys default and principals) that does; every JSON block is a `.meta` that parses (or
  args: a JSON object).
"""
from __future__ import annotations

import glob
import importlib.util
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
from typing import NamedTuple

import pytest
import yaml

from shellhelpers import REPO, fuse_missing, serving, sh, toolsrv_on_path, unmount

HAVE_SEARCH_EXTRA = importlib.util.find_spec("wordllama") is not None
DOCS = sorted([os.path.join(REPO, "README.md"), os.path.join(REPO, "SECURITY.md"),
               *glob.glob(os.path.join(REPO, "doc", "*.md"))])


class Block(NamedTuple):
    doc: str
    line: int
    lang: str
    text: str

    def __str__(self) -> str:
        return f"{os.path.relpath(self.doc, REPO)}:{self.line}"


def blocks(path: str, lang: str | None = None) -> list[Block]:
    """The fenced code blocks of a Markdown file (of one language)."""
    out, cur, start, kind = [], None, 0, ""
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if cur is None and line.startswith("```"):
                cur, start, kind = [], n, line[3:].strip()
            elif cur is not None and line.rstrip() == "```":
                out.append(Block(path, start, kind, "".join(cur)))
                cur = None
            elif cur is not None:
                cur.append(line)
    return [b for b in out if lang is None or b.lang == lang]


# ------------------------------------------------------------------ YAML and JSON

def test_yaml_blocks_are_valid_profiles():
    from toolsrv.run.sandbox import parse_profile
    from toolsrv.tree.policy.rules import TOP, parse
    found = [b for d in DOCS for b in blocks(d, "yaml")]
    assert found
    policies = 0
    for b in found:
        doc = yaml.safe_load(b.text)
        if isinstance(doc, dict) and doc and set(doc) <= set(TOP):
            parse(b.text, str(b))        # a policy.yaml (doc/sandbox.md): raises naming it
            policies += 1
        else:
            parse_profile(doc, "doc", str(b))   # raises with the culprit
    assert policies >= 2


def test_json_blocks_are_valid_meta_files_or_args():
    from toolsrv.registry.metafile import FIELDS, parse_meta
    found = [b for d in DOCS for b in blocks(d, "json")]
    assert found
    for b in found:
        doc = json.loads(b.text)
        assert isinstance(doc, dict), b
        if set(doc) & {*FIELDS, "variants"}:
            parse_meta(b.text.encode())
        # else: args, which a JSON object is


# ------------------------------------------------------------------ doc/scripting.md

SCRIPTING = os.path.join(REPO, "doc", "scripting.md")
SH_BLOCKS = blocks(SCRIPTING, "sh")
MOUNT = "mnt/toolsrv"


def _mount_block(b: Block) -> bool:
    return MOUNT in b.text or "toolsrv mount" in b.text


def _transcript(b: Block) -> bool:
    return b.text.startswith("$ ")


def _wait_loop(b: Block) -> bool:
    return b.text.lstrip().startswith("seen=") and "while" in b.text and "revwait" in b.text


@pytest.fixture(scope="module")
def reader():
    """The doc's reader: a server on the default address, a home (~/mnt/toolsrv), toolsrv
    on PATH, and the directory they work in (where `toolsrv call` sessions work)."""
    with serving("--revwait-timeout", "3") as (env, _, p):
        home = env["HOME"]
        env = toolsrv_on_path(env, os.path.join(home, "bin"))
        work = tempfile.mkdtemp(prefix="work.", dir="/tmp")
        os.chmod(work, 0o755)
        try:
            yield env, work
        finally:
            unmount(os.path.join(home, MOUNT))
            shutil.rmtree(work, ignore_errors=True)
    assert p.returncode == 0


def test_every_shell_example_is_run():
    kinds = [(_transcript(b), _wait_loop(b), _mount_block(b)) for b in SH_BLOCKS]
    assert len(SH_BLOCKS) >= 8 and sum(k[1] for k in kinds) == 1
    assert any(k[0] for k in kinds) and any(k[2] for k in kinds)


@pytest.mark.parametrize("block", SH_BLOCKS, ids=str)
def test_scripting_example(reader, block):
    env, work = reader
    if _mount_block(block):
        why = fuse_missing()
        if why:
            pytest.skip(why)
    cwd = REPO if "examples/" in block.text else work
    if _wait_loop(block):
        run_wait_loop(block, env, cwd)
    elif _transcript(block):
        run_transcript(block, env, cwd)
    else:
        r = sh("set -e\n" + block.text, env, cwd, timeout=120)
        assert r.returncode == 0, f"{block}: exit {r.returncode}\n{r.stdout}\n{r.stderr}"


def _normal(line: str) -> str:
    line = re.sub(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d", "<time>", line)
    line = re.sub(r"\b\d+\.\d+s\b", "<n>s", line)
    return re.sub(r"^bash: line \d+: ", "bash: ", line.rstrip())


def _matches(want: str, got: str) -> bool:
    pattern = ".*".join(re.escape(part) for part in _normal(want).split("…"))
    return re.fullmatch(pattern, _normal(got)) is not None


def run_transcript(b: Block, env: dict, cwd: str) -> None:
    """Each `$ command` run in one shell, in order; what it prints (stdout and stderr)
    compared with the lines under it."""
    steps: list[tuple[str, list[str]]] = []
    for line in b.text.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        else:
            steps[-1][1].append(line)
    script = "exec 2>&1\n" + "".join(f"echo '@@{i}'\n{cmd}\n" for i, (cmd, _) in
                                      enumerate(steps))
    r = sh(script, env, cwd, timeout=120)
    got = re.split(r"^@@\d+\n", r.stdout, flags=re.M)[1:]
    assert len(got) == len(steps), (b, r.stdout)
    for (cmd, want), out in zip(steps, got):
        # without the search extra, a search's answer starts with one line saying so
        # (doc/search.md, Without the extra): the docs show it as served by `make run`
        lines = [x for x in out.splitlines() if HAVE_SEARCH_EXTRA
                 or not x.startswith("# search is lexical only:")]
        assert len(lines) == len(want) and all(map(_matches, want, lines)), \
            f"{b}: $ {cmd}\nwant: {want}\ngot:  {lines}"


def _waiters(sid: int, word: str) -> set[int]:
    """The processes of session sid with `word` in their command line."""
    found = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.getsid(int(pid)) != sid:
                continue
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if word.encode() in f.read().split(b"\0"):
                    found.add(int(pid))
        except OSError:
            continue
    return found


def _waiting_in(sid: int, word: str, limit: float = 60.0) -> bool:
    """True once a process of session sid has `word` in its command line."""
    end = time.monotonic() + limit
    while time.monotonic() < end:
        if _waiters(sid, word):
            return True
        time.sleep(0.05)
    return False


def run_wait_loop(b: Block, env: dict, cwd: str) -> None:
    """The loop that waits for the registry: one change, then more than a revwait timeout
    (3 s here) of nothing: it must say "revision now" exactly once.  Each step waits on
    its event: the loop waiting in revwait; the change's line on its output; then three
    more revwaits started after it (so two ended by their timeout with nothing to say)."""
    tools = os.path.join(env["HOME"], ".config", "ollie", "tools")
    os.makedirs(tools, exist_ok=True)
    p = subprocess.Popen(["bash", "-c", b.text], env=env, cwd=cwd, text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         start_new_session=True)
    lines: list[str] = []
    said = threading.Event()

    def read_out() -> None:
        assert p.stdout is not None
        for line in p.stdout:
            lines.append(line)
            if line.startswith("revision now"):
                said.set()
    reader = threading.Thread(target=read_out, daemon=True)
    reader.start()
    try:
        assert _waiting_in(p.pid, "revwait"), "the loop never came to wait"
        with open(os.path.join(tools, "doc_loop.tmp"), "w") as f:
            f.write('{"description": "appears once", "cmd": "cat"}')
        os.rename(os.path.join(tools, "doc_loop.tmp"), os.path.join(tools, "doc_loop.meta"))
        assert said.wait(120), f"{b}: the change was never said\n{''.join(lines)}"
        after: set[int] = set()
        end = time.monotonic() + 120
        while len(after) < 3 and time.monotonic() < end and p.poll() is None:
            after |= _waiters(p.pid, "revwait")
            time.sleep(0.05)
        assert len(after) >= 3, f"{b}: the loop stopped waiting\n{''.join(lines)}"
    finally:
        os.killpg(p.pid, 9)
        reader.join(30)
        err = p.stderr.read() if p.stderr else ""
        p.wait()
        os.unlink(os.path.join(tools, "doc_loop.meta"))
    out = "".join(lines)
    said = [ln for ln in out.splitlines() if ln.startswith("revision now")]
    assert len(said) == 1, f"{b}: {said}\n{err}"
    assert "doc_loop\thot\tappears once" in out
