"""Every example of the tool-format documents (tests/fixtures/registry/spec, copied
verbatim) loads and resolves as the documents describe."""

import json
import os
import shutil
from pathlib import Path

import pytest

from toolsrv.registry.registry import Registry

SPEC = Path(__file__).parent.parent / "fixtures" / "registry" / "spec"
SHELL_EXAMPLES = ["json_value", "rg_pattern", "my_cli", "subcommand", "rg_search", "k8s",
                  "github"]


def exe(path):
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(0o755)
    return str(path)


@pytest.fixture
def bin_dir(tmp_path):
    d = tmp_path / "bin"
    d.mkdir()
    return d


def load(bin_dir, tools=SPEC):
    r = Registry([str(tools)], env={"PATH": str(bin_dir), "HOME": str(bin_dir.parent)})
    r.load()
    return r


def spec_meta(name):
    return json.loads((SPEC / f"{name}.meta").read_text())


@pytest.mark.parametrize("name", SHELL_EXAMPLES)
def test_metadata_only_examples_run_their_cmd_through_the_shell(bin_dir, name):
    tool = load(bin_dir).get(name)
    meta = spec_meta(name)
    assert tool.command.rule == "cmd-shell"
    assert tool.command.argv == ("/bin/sh", "-c", meta["cmd"])
    assert tool.schema == meta["args"]
    assert (tool.description, tool.prompt) == (meta.get("description", ""),
                                               meta.get("prompt", ""))
    assert tool.scope == meta.get("scope")


def test_json_value(bin_dir):
    tool = load(bin_dir).get("json_value")
    assert tool.schema["required"] == ["path"]
    assert tool.tier == "hot" and tool.read_only is False and tool.variant is None
    assert tool.prompt_text == "## json_value\n\nRead `.path` from JSON input.\n"


def test_pass_through_arguments_of_k8s_and_the_mcp_bridge(bin_dir):
    r = load(bin_dir)
    for name, extra in (("k8s", {"command": "get", "resource": "pods"}),
                        ("github", {"tool": "search_repositories", "query": "x"})):
        assert r.get(name).validator.is_valid(extra)
        assert r.get(name).scope == "global"
    assert not r.get("github").validator.is_valid({"query": "x"})  # `tool` is required


def test_sidecar_executable_wins_over_its_cmd(bin_dir):
    tool = load(bin_dir).get("my_tool")
    assert tool.command.rule == "beside"
    assert tool.command.argv == (str(SPEC / "my_tool"),)
    assert tool.cmd == "my_tool"  # still shown in meta


def test_wrapping_a_system_binary_finds_it_on_path(bin_dir):
    r = load(bin_dir)
    assert r.get("ripgrep") is None
    assert dict(r.errors)[str(SPEC / "ripgrep.meta")] == 'no command: cmd "rg" not found on $PATH'
    rg = exe(bin_dir / "rg")
    assert r.recheck()
    assert (r.get("ripgrep").command.rule, r.get("ripgrep").command.argv) == ("cmd-path", (rg,))
    assert r.get("ripgrep").read_only is True


def test_no_cmd_falls_back_to_the_name_on_path(bin_dir):
    found = exe(bin_dir / "sidecar")
    tool = load(bin_dir).get("sidecar")
    assert (tool.command.rule, tool.command.argv) == ("path", (found,))


def test_system_logs_variants_with_journald(bin_dir):
    exe(bin_dir / "journalctl")
    journald = exe(bin_dir / "system_logs_journald")
    tool = load(bin_dir).get("system_logs")
    assert (tool.variant, tool.command.rule, tool.command.argv) == (0, "cmd-path", (journald,))
    assert tool.description == "Read system logs."  # inherited


def test_system_logs_variants_as_written_on_this_host(bin_dir):
    exe(bin_dir / "system_logs_syslog")
    r = load(bin_dir)
    if os.path.exists("/var/log/syslog"):
        assert r.get("system_logs").variant == 1
    else:
        assert r.get("system_logs") is None
        assert dict(r.errors)[str(SPEC / "system_logs.meta")] == (
            "hidden: no variant matches (variant 0: binary journalctl not found; "
            "variant 1: file /var/log/syslog does not exist)")


def test_system_logs_variants_fall_to_syslog_then_hide(bin_dir, tmp_path):
    tools = tmp_path / "tools"
    tools.mkdir()
    syslog = tmp_path / "syslog"
    text = (SPEC / "system_logs.meta").read_text().replace("/var/log/syslog", str(syslog))
    (tools / "system_logs.meta").write_text(text)
    exe(bin_dir / "system_logs_journald")
    exe(bin_dir / "system_logs_syslog")
    syslog.write_text("")
    r = load(bin_dir, tools)
    assert r.get("system_logs").variant == 1
    assert r.get("system_logs").command.argv == (str(bin_dir / "system_logs_syslog"),)
    syslog.unlink()
    assert r.recheck() and r.get("system_logs") is None
    exe(bin_dir / "journalctl")
    assert r.recheck() and r.get("system_logs").variant == 0


def test_spec_examples_all_listed(bin_dir):
    r = load(bin_dir)
    assert sorted(r.tools) == sorted(SHELL_EXAMPLES + ["my_tool"])
    assert sorted(os.path.basename(f) for f, _ in r.errors) == \
        ["ripgrep.meta", "sidecar.meta", "system_logs.meta"]


def test_installation_is_copying_the_meta(bin_dir, tmp_path):
    tools = tmp_path / "tools"
    tools.mkdir()
    r = load(bin_dir, tools)
    shutil.copy(SPEC / "json_value.meta", tools)
    assert r.rescan() and r.get("json_value") is not None
