"""Variant selection: each condition key, AND across keys, OR within an array, the first
holding variant deciding, override/inherit, and no match hiding the tool."""

import json
import os

import pytest

from toolsrv.registry.metafile import GOARCH, GOOS, parse_meta
from toolsrv.registry.variants import Host, choose, failed_conditions, go_arch, go_os


@pytest.fixture
def host(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, mode in (("journalctl", 0o755), ("notexec", 0o644)):
        (bin_dir / name).write_text("#!/bin/sh\n")
        (bin_dir / name).chmod(mode)
    (tmp_path / "syslog").write_text("")
    env = {"PATH": f"relative/bin:{bin_dir}", "DISPLAY": ":0", "EMPTY": "", "HOME": "/h"}
    return Host(env, goos="linux", goarch="amd64")


# (match, failed conditions; [] means the variant holds).  {T} is the test's tmp_path.
CASES = [
    ({}, []),
    ({"binary": ["journalctl"]}, []),
    ({"binary": ["systemctl"]}, ["binary systemctl not found"]),
    ({"binary": ["notexec"]}, ["binary notexec not found"]),
    ({"binary": ["{T}/bin/journalctl"]}, []),
    ({"binary": ["{T}/bin/notexec"]}, ["binary {T}/bin/notexec not found"]),
    ({"binary": ["{T}/bin"]}, ["binary {T}/bin not found"]),
    ({"file": ["{T}/syslog"]}, []),
    ({"file": ["{T}/bin"]}, []),
    ({"file": ["{T}/messages"]}, ["file {T}/messages does not exist"]),
    ({"os": ["linux"]}, []),
    ({"os": ["darwin"]}, ["os is linux, not darwin"]),
    ({"os": ["darwin", "freebsd"]}, ["os is linux, not darwin|freebsd"]),
    ({"arch": ["amd64"]}, []),
    ({"arch": ["arm64"]}, ["arch is amd64, not arm64"]),
    ({"env": ["DISPLAY"]}, []),
    ({"env": ["EMPTY"]}, ["env EMPTY unset or empty"]),
    ({"env": ["WAYLAND_DISPLAY"]}, ["env WAYLAND_DISPLAY unset or empty"]),
    ({"nenv": ["SSH_CONNECTION"]}, []),
    ({"nenv": ["EMPTY"]}, []),
    ({"nenv": ["DISPLAY"]}, ["nenv DISPLAY set"]),
    # an array ORs
    ({"binary": ["systemctl", "journalctl"]}, []),
    ({"env": ["WAYLAND_DISPLAY", "DISPLAY"]}, []),
    ({"nenv": ["DISPLAY", "SSH_CONNECTION"]}, []),
    ({"nenv": ["DISPLAY", "HOME"]}, ["nenv DISPLAY|HOME set"]),
    # keys AND: every failing key is reported, the holding ones are not
    ({"os": ["linux"], "arch": ["amd64"], "binary": ["journalctl"]}, []),
    ({"os": ["linux"], "binary": ["systemctl"]}, ["binary systemctl not found"]),
    ({"os": ["darwin"], "env": ["EMPTY"], "file": ["{T}/syslog"]},
     ["os is linux, not darwin", "env EMPTY unset or empty"]),
]


def _fill(v, t):
    return [s.replace("{T}", str(t)) for s in v]


@pytest.mark.parametrize("match,failed", CASES, ids=[json.dumps(m) for m, _ in CASES])
def test_condition(host, tmp_path, match, failed):
    match = {k: tuple(_fill(v, tmp_path)) for k, v in match.items()}
    assert failed_conditions(match, host) == _fill(failed, tmp_path)


def _variants(*vs):
    return parse_meta(json.dumps({"description": "top", "cmd": "top", "variants": list(vs)})
                      .encode())


def test_first_holding_variant_decides(host):
    m = _variants({"match": {"binary": "nope"}, "cmd": "a"},
                  {"match": {"env": "DISPLAY"}, "cmd": "b", "description": "gui"},
                  {"match": {}, "cmd": "c"})
    assert choose(m.variants, host) == (1, "")
    fields, _ = m.effective(1)
    assert fields == {"description": "gui", "cmd": "b"}  # override
    m = _variants({"match": {"os": "linux"}, "tier": "cold"})
    fields, _ = m.effective(choose(m.variants, host)[0])
    assert fields == {"description": "top", "cmd": "top", "tier": "cold"}  # inherit


def test_variant_without_match_always_holds(host):
    m = _variants({"match": {"binary": "nope"}}, {"cmd": "fallback"})
    assert choose(m.variants, host) == (1, "")


def test_no_match_hides_with_every_failed_condition(host):
    m = _variants({"match": {"binary": "nope"}, "cmd": "a"},
                  {"match": {"file": "/nonexistent/syslog", "os": ["darwin"]}, "cmd": "b"})
    assert choose(m.variants, host) == (None, (
        "hidden: no variant matches (variant 0: binary nope not found; "
        "variant 1: file /nonexistent/syslog does not exist, os is linux, not darwin)"))


def test_relative_path_entries_are_ignored(tmp_path, monkeypatch):
    (tmp_path / "rel").mkdir()
    (tmp_path / "rel" / "tool").write_text("")
    (tmp_path / "rel" / "tool").chmod(0o755)
    monkeypatch.chdir(tmp_path)
    assert Host({"PATH": "rel"}).which("tool") is None
    assert Host({"PATH": str(tmp_path / "rel")}).which("tool") == str(tmp_path / "rel/tool")


def test_probes_are_memoised_and_recorded(host):
    host.asked = []
    assert host.has_binary("journalctl") and host.has_binary("journalctl")
    assert host.asked == [("which", "journalctl")] * 2
    assert host.is_exec("/nonexistent", record=False) is False
    assert len(host.asked) == 2


def test_this_host_uses_go_names():
    assert go_os() in GOOS
    assert go_arch() in GOARCH
    if os.uname().sysname == "Linux" and os.uname().machine == "x86_64":
        assert (go_os(), go_arch()) == ("linux", "amd64")
