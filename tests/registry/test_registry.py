"""The registry without watching: command resolution and its precedence, the search path,
broken files in tools/errors, the served texts, and how `revision` moves."""

import json
import os
from pathlib import Path

import pytest

from toolsrv.registry import metafile
from toolsrv.registry.registry import Registry, default_paths


def write(path, content):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return path


def exe(path, mode=0o755):
    write(path, "#!/bin/sh\nexit 0\n").chmod(mode)
    return str(path)


@pytest.fixture
def t(tmp_path):
    """tools dir `t`, a $PATH dir `t/../bin`, and an env naming that $PATH."""
    (tmp_path / "tools").mkdir()
    (tmp_path / "bin").mkdir()
    return tmp_path / "tools"


def env_for(t, **extra):
    return {"PATH": str(t.parent / "bin"), "HOME": str(t.parent), **extra}


def load(t, *more, **env):
    r = Registry([str(t), *map(str, more)], env=env_for(t, **env))
    r.load()
    return r


def rule(r, name):
    tool = r.get(name)
    return None if tool is None else (tool.command.rule, tool.command.argv)


def reason(r, file):
    return dict(r.errors).get(str(file))


# --- command resolution -----------------------------------------------------------------

def test_beside_executable(t):
    write(t / "a.meta", {})
    exe(t / "a")
    assert rule(load(t), "a") == ("beside", (str(t / "a"),))


def test_beside_wins_over_cmd_and_path(t):
    write(t / "a.meta", {"cmd": "echo hi"})
    exe(t / "a")
    exe(t.parent / "bin" / "a")
    assert rule(load(t), "a")[0] == "beside"


def test_beside_must_be_an_executable_file(t):
    write(t / "a.meta", {"cmd": "echo hi"})
    write(t / "a", "not executable")
    write(t / "b.meta", {"cmd": "echo hi"})
    (t / "b").mkdir()
    r = load(t)
    assert rule(r, "a")[0] == rule(r, "b")[0] == "cmd-shell"


def test_cmd_absolute_runs_directly(t):
    path = exe(t.parent / "opt" / "rg")
    write(t / "a.meta", {"cmd": path})
    assert rule(load(t), "a") == ("cmd-absolute", (path,))


def test_cmd_absolute_not_executable_is_no_command(t):
    write(t / "a.meta", {"cmd": "/nonexistent/rg"})
    exe(t.parent / "bin" / "a")  # a set cmd decides: no fall-through to the name on $PATH
    r = load(t)
    assert r.get("a") is None
    assert reason(r, t / "a.meta") == "no command: cmd /nonexistent/rg is not an executable file"


def test_cmd_bare_name_found_on_path(t):
    rg = exe(t.parent / "bin" / "rg")
    write(t / "a.meta", {"cmd": "rg"})
    assert rule(load(t), "a") == ("cmd-path", (rg,))


def test_cmd_bare_name_missing_is_no_command(t):
    write(t / "a.meta", {"cmd": "rg"})
    exe(t.parent / "bin" / "a")
    r = load(t)
    assert r.get("a") is None
    assert reason(r, t / "a.meta") == 'no command: cmd "rg" not found on $PATH'


@pytest.mark.parametrize("cmd", ["rg --json", "./bin/tool", "bin/tool", "~/bin/tool", "a=b",
                                 "jq -r '.arg' | xargs my-cli", "/opt/my tool", "echo $HOME"])
def test_cmd_anything_else_is_a_shell_command(t, cmd):
    write(t / "a.meta", {"cmd": cmd})
    tool = load(t).get("a")
    assert (tool.command.kind, tool.command.rule, tool.command.argv) == \
        ("shell", "cmd-shell", ("/bin/sh", "-c", cmd))


def test_name_on_path_is_the_last_resort(t):
    found = exe(t.parent / "bin" / "a")
    write(t / "a.meta", {})
    assert rule(load(t), "a") == ("path", (found,))


def test_nothing_found_is_no_command(t):
    write(t / "a.meta", {})
    r = load(t)
    assert r.get("a") is None and r.tools == {}
    assert reason(r, t / "a.meta") == \
        "no command: no executable a beside the .meta, no cmd, and no a on $PATH"


def test_variant_cmd_is_resolved_and_beside_still_wins(t):
    rg = exe(t.parent / "bin" / "rg")
    write(t / "a.meta", {"cmd": "echo top", "variants": [{"match": {"binary": "rg"},
                                                          "cmd": "rg"}]})
    write(t / "b.meta", {"variants": [{"match": {"binary": "rg"}, "cmd": "rg"}]})
    exe(t / "b")
    r = load(t)
    assert rule(r, "a") == ("cmd-path", (rg,)) and r.get("a").variant == 0
    assert rule(r, "b")[0] == "beside" and r.get("b").variant == 0


def test_hidden_tool_is_listed_with_failed_conditions(t):
    write(t / "a.meta", {"cmd": "x", "variants": [{"match": {"binary": "nope", "env": "NOPE"}}]})
    r = load(t)
    assert r.get("a") is None
    assert reason(r, t / "a.meta") == \
        "hidden: no variant matches (variant 0: binary nope not found, env NOPE unset or empty)"


# --- search path ------------------------------------------------------------------------

def test_earlier_directory_wins_and_the_loser_is_shadowed(t):
    second = t.parent / "second"
    write(t / "a.meta", {"description": "first", "cmd": "exit 0"})
    write(second / "a.meta", {"description": "second", "cmd": "exit 0"})
    write(second / "b.meta", {"description": "only", "cmd": "exit 0"})
    r = load(t, second)
    assert r.get("a").description == "first" and r.get("a").dir == str(t)
    assert r.get("b").file == str(second / "b.meta")
    assert r.errors == [(str(second / "a.meta"), f"shadowed by {t / 'a.meta'}")]


def test_a_broken_file_still_owns_its_name(t):
    second = t.parent / "second"
    write(t / "a.meta", "{")
    write(second / "a.meta", {"cmd": "exit 0"})
    r = load(t, second)
    assert r.get("a") is None
    assert r.errors == sorted([
        (str(t / "a.meta"), "line 1 column 2: Expecting property name enclosed in double quotes"),
        (str(second / "a.meta"), f"shadowed by {t / 'a.meta'}")])


def test_default_paths():
    assert default_paths({"OLLIE_TOOLS_PATH": "/a::/b", "HOME": "/h"}) == ["/a", "/b"]
    assert default_paths({"OLLIE_TOOLS_PATH": "", "HOME": "/h"}) == ["/h/.config/ollie/tools"]
    assert default_paths({"HOME": "/h"}) == ["/h/.config/ollie/tools"]


def test_paths_from_env_are_normalised_and_deduplicated(t):
    env = env_for(t, OLLIE_TOOLS_PATH=f"{t}:{t}/:~/tools/../tools")
    assert Registry(env=env).dirs == [str(t)]


def test_missing_directory_is_not_an_error_a_file_is(t):
    write(t.parent / "plain", "")
    r = load(t, t.parent / "missing", t.parent / "plain")
    assert r.errors == [(str(t.parent / "plain"), "not a directory")]


# --- broken and odd files ---------------------------------------------------------------

def test_broken_metas_are_listed_and_the_rest_load(t):
    write(t / "ok.meta", {"cmd": "exit 0"})
    write(t / "json.meta", '{\n  "description": "x"\n  "cmd": "exit 0"\n}')
    write(t / "type.meta", {"cmd": "exit 0", "readOnly": "yes"})
    write(t / "schema.meta", {"cmd": "exit 0", "args": {"properties": {"path": {"type": "strin"}}}})
    write(t / "bad name.meta", {"cmd": "exit 0"})
    write(t / ".meta", {"cmd": "exit 0"})
    (t / "dir.meta").mkdir()
    os.symlink(t / "nowhere", t / "dangling.meta")  # absent, like an editor's lock link
    r = load(t)
    assert list(r.tools) == ["ok"]
    assert r.errors == sorted([
        (str(t / ".meta"), "bad tool name: empty"),
        (str(t / "bad name.meta"), "bad tool name 'bad name': ' ' not allowed "
                                   "(use letters, digits, '.', '_' and '-')"),
        (str(t / "dir.meta"), "not a regular file"),
        (str(t / "json.meta"), "line 3 column 3: Expecting ',' delimiter"),
        (str(t / "schema.meta"),
         "args.properties.path.type: 'strin' is not valid under any of the given schemas"),
        (str(t / "type.meta"), "readOnly: must be a boolean, not a string"),
    ])


def test_unreadable_meta(t):
    if os.geteuid() != 0:
        write(t / "a.meta", "{}").chmod(0)
        assert reason(load(t), t / "a.meta") == "cannot read: Permission denied"
        return
    # root reads any file: load the registry as nobody, in a process of its own
    import subprocess
    import sys
    import tempfile
    d = tempfile.mkdtemp(prefix="unreadable.", dir="/tmp")
    try:
        os.chmod(d, 0o755)
        write(Path(d) / "a.meta", "{}").chmod(0)
        write(Path(d) / "b.meta", {"cmd": "exit 0"}).chmod(0o644)
        repo = Path(__file__).resolve().parents[2]
        site = [p for p in sys.path if p.endswith("site-packages")]
        code = ("from toolsrv.registry.registry import Registry; r = Registry([%r], watch='poll'); "
                "r.load(); print(sorted(r.tools)); print(r.errors_text(), end='')" % d)
        out = subprocess.run(["/usr/bin/python3", "-c", code], user=65534, group=65534,
                             capture_output=True, text=True, timeout=60, cwd="/",
                             env={"PYTHONPATH": ":".join([str(repo), *site]),
                                  "PATH": "/usr/bin:/bin", "HOME": "/"})
        assert out.returncode == 0, out.stderr
        assert out.stdout.splitlines() == [
            "['b']", f"{d}/a.meta\tcannot read: Permission denied"]
    finally:
        import shutil
        shutil.rmtree(d, ignore_errors=True)


# --- served texts -----------------------------------------------------------------------

def test_index_and_errors_text(t):
    write(t / "zz.meta", {"cmd": "exit 0", "description": "last\none", "tier": "cold"})
    write(t / "aa.meta", {"cmd": "exit 0", "description": "first"})
    write(t / "mm.meta", {"cmd": "exit 0", "tier": "warm"})
    write(t / "bad.meta", {"tier": "tepid"})
    r = load(t)
    assert r.index_text() == "aa\thot\tfirst\nmm\twarm\t\nzz\tcold\tlast one\n"
    assert r.errors_text() == \
        f'{t / "bad.meta"}\ttier: must be one of hot, warm, cold, not "tepid"\n'
    write(t / "mm.meta", {"cmd": "exit 0", "description": "middle"})
    write(t / "bb.meta", {"cmd": "exit 0"})
    (t / "aa.meta").unlink()
    for path in ("mm.meta", "bb.meta", "aa.meta"):  # one at a time, as events come
        r.rescan([str(t / path)])
        assert r.index_text() == "".join(r.get(n).index_line for n in sorted(r.tools))
    assert r.index_text() == "bb\thot\t\nmm\thot\tmiddle\nzz\tcold\tlast one\n"
    assert r.names() == ["bb", "mm", "zz"]


def test_meta_json_is_the_resolved_definition(t):
    write(t / "a.meta", {"description": "d", "prompt": "p", "keywords": ["k"], "scope": "read",
                         "outputFormat": "text", "owner": "me", "cmd": "echo top",
                         "variants": [{"match": {"os": "plan9"}, "cmd": "no"},
                                      {"cmd": "echo v1", "x-note": 1}]})
    tool = load(t).get("a")
    assert tool.meta_json() == {
        "name": "a", "file": str(t / "a.meta"), "dir": str(t), "description": "d",
        "prompt": "p", "keywords": ["k"], "args": {"type": "object", "properties": {}},
        "tier": "hot", "readOnly": False, "resetsCounter": False, "scope": "read",
        "outputFormat": "text", "cmd": "echo v1", "variant": 1,
        "command": {"rule": "cmd-shell", "kind": "shell", "argv": ["/bin/sh", "-c", "echo v1"],
                    "shell": "echo v1"},
        "start": {"warm": False, "why": "not a Python script"},
        "extra": {"owner": "me", "x-note": 1}}
    assert json.loads(tool.meta_text) == tool.meta_json()
    assert set(tool.__dict__) >= set(tool.FIELDS)  # make_tool
    assert json.loads(tool.schema_text) == tool.schema
    assert tool.prompt_text == "p\n"


def test_validator_for_call_arguments(t):
    write(t / "a.meta", {"cmd": "exit 0", "args": {"type": "object", "required": ["n"],
                                                 "properties": {"n": {"type": "integer"}}}})
    v = load(t).get("a").validator
    assert v.is_valid({"n": 1}) and not v.is_valid({"n": "1"}) and not v.is_valid({})


# --- revision ---------------------------------------------------------------------------

def test_first_load_is_revision_one_even_when_empty(t):
    r = Registry([str(t)], env=env_for(t))
    assert r.revision == 0 and r.index_text() == ""
    r.load()
    assert r.revision == 1
    r.load()
    assert r.revision == 1


def test_revision_moves_only_when_served_output_changes(t):
    a = write(t / "a.meta", {"cmd": "exit 0", "description": "one"})
    r = load(t)
    assert (r.rescan(), r.recheck(), r.revision) == (False, False, 1)
    os.utime(a, ns=(1, 1))  # a touch: re-read, same definition
    assert (r.rescan(), r.revision) == (False, 1)
    write(a, '{"description": "one",   "cmd": "exit 0"}')  # reformatted, same definition
    assert (r.rescan(), r.revision) == (False, 1)
    write(a, {"cmd": "exit 0", "description": "two"})
    assert (r.rescan(), r.revision, r.get("a").description) == (True, 2, "two")
    write(t / "b.meta", "{")  # only tools/errors changes: still a change
    assert (r.rescan(), r.revision) == (True, 3)
    (t / "b.meta").unlink()
    a.unlink()
    assert (r.rescan(), r.revision, r.index_text(), r.errors) == (True, 4, "", [])


def test_rescan_rereads_only_changed_files(t, monkeypatch):
    for i in range(20):
        write(t / f"t{i}.meta", {"cmd": "exit 0"})
    r = load(t)
    seen = []
    real = metafile.parse_meta
    monkeypatch.setattr(metafile, "parse_meta", lambda data: seen.append(data) or real(data))
    write(t / "t3.meta", {"cmd": "exit 0", "description": "new"})
    assert r.rescan() and len(seen) == 1
    write(t / "t4.meta", {"cmd": "exit 0", "description": "new"})
    assert r.rescan([str(t / "t4.meta"), str(t / "unrelated")]) and len(seen) == 2
    assert r.rescan([str(t / "t5.meta")]) is False and len(seen) == 2


def test_hinted_executable_changes_resolution(t):
    write(t / "a.meta", {"cmd": "echo shell"})
    r = load(t)
    assert rule(r, "a")[0] == "cmd-shell"
    exe(t / "a")
    assert r.rescan([str(t / "a")]) and rule(r, "a")[0] == "beside"
    (t / "a").chmod(0o644)
    assert r.rescan() and rule(r, "a")[0] == "cmd-shell"


def test_recheck_follows_path_binaries_and_env(t):
    env = env_for(t)
    write(t / "a.meta", {"variants": [{"match": {"binary": "rg"}, "cmd": "rg"}]})
    write(t / "b.meta", {"cmd": "exit 0", "variants": [{"match": {"nenv": "SSH_CONNECTION"}}]})
    r = Registry([str(t)], env=env)
    r.load()
    assert r.get("a") is None and r.get("b") is not None
    rg = exe(t.parent / "bin" / "rg")
    assert r.rescan() is False  # nothing in the tools directory moved
    assert r.recheck() and rule(r, "a") == ("cmd-path", (rg,))
    assert r.recheck() is False
    env["SSH_CONNECTION"] = "10.0.0.1 22"
    assert r.recheck() and r.get("b") is None
    os.unlink(rg)
    assert r.recheck() and r.get("a") is None and r.revision == 4


def test_subscribers_see_each_bump(t):
    r = load(t)
    got = []
    unsubscribe = r.subscribe(got.append)
    write(t / "a.meta", {"cmd": "exit 0"})
    r.rescan()
    unsubscribe()
    (t / "a.meta").unlink()
    r.rescan()
    assert got == [2] and r.revision == 3


def test_symlinked_meta_targets_are_rechecked(t):
    target = write(t.parent / "dotfiles" / "a.meta", {"cmd": "exit 0", "description": "one"})
    os.symlink(target, t / "a.meta")
    r = load(t)
    assert r.get("a").description == "one"
    write(target, {"cmd": "exit 0", "description": "two, longer"})  # no event in t/
    assert r.recheck() and r.get("a").description == "two, longer"


def test_meta_says_how_a_python_tool_starts(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """tools/<tool>/meta's "start": warm with its interpreter, or cold and why (issue 16)."""
    from toolsrv.registry import warmstart
    warm = tmp_path / "w"
    warm.write_text("#!/usr/bin/env python3\nprint(1)\n")
    flagged = tmp_path / "f"
    flagged.write_text("#!/usr/bin/python3 -u\nprint(1)\n")
    p = warmstart.describe([str(warm)], None)
    assert p["warm"] is True and p["python"].endswith("/python3")
    assert warmstart.describe([str(warm)], False) == {
        "warm": False, "why": '"warm": false in the .meta'}
    assert warmstart.describe([str(flagged)], None) == {
        "warm": False, "why": "interpreter flag -u is not warmed"}
    assert warmstart.describe(["/bin/sh", "-c", "echo hi"], None)["why"] == \
        "not a Python script"


def test_meta_says_a_resident_tools_calls_go_to_its_process() -> None:
    """A bundled file tool runs resident (protocol python): its meta's "start" says so, and
    how a call it cannot take (an elevated one) starts instead."""
    from toolsrv.dirs.bundled import TOOLS
    r = Registry([TOOLS], env={"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/"})
    r.load()
    start = r.get("file_read").meta_json()["start"]
    assert start["resident"] == "python", start
    assert set(start) == {"resident", "otherwise"} and "warm" in start["otherwise"], start


def test_a_shebang_reads_as_the_kernel_and_env_run_it() -> None:
    """One #! rule for warm planning and import-mcp's grants: env's program in env's
    place unless a flag follows env; no more of the line than the kernel reads."""
    from toolsrv.registry.warmstart import SHEBANG_MAX, shebang
    assert shebang(b"#!/usr/bin/env python3 -u\nprint(1)\n") == ["python3", "-u"]
    assert shebang(b"#!/usr/bin/env -S python3 -u\n") == ["/usr/bin/env", "-S", "python3", "-u"]
    assert shebang(b"#! /usr/bin/python3\n") == ["/usr/bin/python3"]
    assert shebang(b"print(1)\n") == [] and shebang(b"") == []
    long = b"#!/bin/" + b"x" * SHEBANG_MAX + b" -u\n"
    assert shebang(long) == ["/bin/" + "x" * (SHEBANG_MAX - len(b"#!/bin/"))]


def test_the_warm_plan_looks_on_the_runs_default_path() -> None:
    """registry/ may not import run/: its copy of a run's default PATH is the runner's."""
    from toolsrv.registry import warmstart
    from toolsrv.run.init import wire
    assert warmstart.DEFAULT_PATH == wire.DEFAULT_PATH
