"""Sandbox profiles: lookup, validation (every error names what is wrong), placeholders."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolsrv.cli.sandbox_check import sandbox_check_main
from toolsrv.run import sandbox
from toolsrv.run.sandbox import (
    LandlockStatus,
    ProfileError,
    load_profile,
    missing_parts,
    parse_profile,
    placeholder_values,
    validate_profile_name,
)

VALUES = {"CWD": "/work/s1", "TMPDIR": "/tmp/run-1", "TOOLS": "/opt/tools", "HOME": "/home/u",
          "XDG_CONFIG_HOME": "/home/u/.config", "XDG_DATA_HOME": "/home/u/.local/share",
          "XDG_STATE_HOME": "/home/u/.local/state", "XDG_CACHE_HOME": "/home/u/.cache",
          "XDG_RUNTIME_DIR": None}


def test_shipped_default_loads_and_says_no_network() -> None:
    p = load_profile("default", user_dir=Path("/nonexistent"))
    assert p.source and p.source.endswith("sandbox/default.yaml")
    assert p.network == "none" and not p.best_effort
    assert "{CWD}" in p.filesystem["rwx"] and "{TMPDIR}" in p.filesystem["rwx"]
    assert "/usr" in p.filesystem["rox"] and "/etc/passwd" in p.filesystem["ro"]
    assert "/etc" not in p.filesystem["ro"] and "/etc/shadow" not in p.filesystem["ro"]
    policy = p.resolve(VALUES, environ={"LANG": "C.UTF-8", "SECRET": "x"})
    assert policy.env["PATH"] == "/usr/local/bin:/usr/bin:/bin"
    assert policy.env["HOME"] == "/tmp/run-1" and policy.env["LANG"] == "C.UTF-8"
    assert "SECRET" not in policy.env
    assert ("/work/s1", "rwx") in policy.paths and ("/opt/tools", "rox") in policy.paths


def test_user_profile_wins_over_shipped(tmp_path: Path) -> None:
    (tmp_path / "default.yaml").write_text("filesystem: {ro: [/usr]}\n")
    p = load_profile("default", user_dir=tmp_path)
    assert p.source == str(tmp_path / "default.yaml")
    assert dict(p.filesystem) == {"ro": ("/usr",)}


def test_profile_not_found_names_it(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match="nosuch"):
        load_profile("nosuch", user_dir=tmp_path, shipped_dir=tmp_path)


@pytest.mark.parametrize("name", ["../x", "a/b", "", "..", ".hidden", "x" * 100, "a b", "/abs"])
def test_bad_profile_names_are_refused(name: str) -> None:
    with pytest.raises(ProfileError, match="profile name"):
        validate_profile_name(name)
    with pytest.raises(ProfileError):
        load_profile(name)


@pytest.mark.parametrize("doc, named", [
    ({"filesystm": {}}, "filesystm"),
    ({"filesystem": {"rox2": []}}, "filesystem.rox2"),
    ({"filesystem": {"ro": "/usr"}}, "filesystem.ro"),
    ({"filesystem": {"ro": [5]}}, "filesystem.ro"),
    ({"filesystem": {"ro": ["usr/lib"]}}, "usr/lib"),
    ({"filesystem": {"rw": ["{PWD}/x"]}}, "{PWD}"),
    ({"filesystem": {"rw": ["{CWD/x"]}}, "brace"),
    ({"env": "PATH"}, "env"),
    ({"env": ["BAD NAME"]}, "BAD NAME"),
    ({"env": ["X={NOPE}"]}, "{NOPE}"),
    ({"network": {"enabled": 1}}, "network.enabled"),
    ({"network": {"enabled": True, "connect_tcp": [70000]}}, "70000"),
    ({"network": {"enabled": True, "bind_tcp": [True]}}, "bind_tcp"),
    ({"network": {"connect_tcp": [443]}}, "network.enabled"),
    ({"network": {"wifi": True}}, "network.wifi"),
    ({"general": {"best_effort": "yes"}}, "general.best_effort"),
    ({"general": {"timeout": -1}}, "general.timeout"),
    ({"general": {"verbose": True}}, "general.verbose"),
    ({"network": []}, "network"),
    ([1, 2], "mapping"),
])
def test_invalid_profiles_name_the_culprit(doc: Any, named: str) -> None:
    with pytest.raises(ProfileError) as info:
        parse_profile(doc, "t")
    assert named in str(info.value)


def test_yaml_errors_and_file_errors_are_profile_errors(tmp_path: Path) -> None:
    (tmp_path / "broken.yaml").write_text("filesystem: [unclosed\n")
    with pytest.raises(ProfileError, match="broken"):
        load_profile("broken", user_dir=tmp_path)
    (tmp_path / "typo.yaml").write_text("netwrok: {}\n")
    with pytest.raises(ProfileError, match="profile typo: netwrok"):
        load_profile("typo", user_dir=tmp_path)


def test_empty_profile_allows_nothing() -> None:
    p = parse_profile(None, "empty")
    policy = p.resolve(VALUES, environ={})
    assert policy.paths == () and policy.env == {} and policy.network == "none"


def test_placeholders_fill_and_unset_ones_skip() -> None:
    p = parse_profile({"filesystem": {"ro": ["{XDG_RUNTIME_DIR}/bus", "{HOME}/.gitconfig"],
                                      "rw": ["{XDG_CACHE_HOME}/pip", "{CWD}/../up"]},
                       "env": ["CACHE={XDG_CACHE_HOME}", "RT={XDG_RUNTIME_DIR}"]}, "t")
    policy = p.resolve(VALUES, environ={})
    assert ("/home/u/.gitconfig", "ro") in policy.paths
    assert ("/home/u/.cache/pip", "rw") in policy.paths
    assert ("/work/up", "rw") in policy.paths  # normalized
    assert policy.skipped == ("{XDG_RUNTIME_DIR}/bus",)
    assert policy.env == {"CACHE": "/home/u/.cache"}


def test_placeholder_values_follow_xdg_defaults() -> None:
    v = placeholder_values("/c", "/t", None, environ={"HOME": "/h", "XDG_DATA_HOME": "rel"})
    assert v["XDG_CONFIG_HOME"] == "/h/.config" and v["XDG_DATA_HOME"] == "/h/.local/share"
    assert v["XDG_STATE_HOME"] == "/h/.local/state" and v["XDG_CACHE_HOME"] == "/h/.cache"
    assert v["XDG_RUNTIME_DIR"] is None and v["TOOLS"] is None
    v = placeholder_values("/c", "/t", "/x", environ={"HOME": "/h", "XDG_RUNTIME_DIR": "/run/u"})
    assert v["XDG_RUNTIME_DIR"] == "/run/u" and v["TOOLS"] == "/x"


def test_network_modes() -> None:
    assert parse_profile({"network": {"unrestricted": True}}, "t").network == "unrestricted"
    p = parse_profile({"network": {"enabled": True, "connect_tcp": [443], "bind_tcp": [8080]}},
                      "t")
    assert p.network == "tcp" and p.connect_tcp == (443,) and p.bind_tcp == (8080,)


def test_missing_parts_per_abi() -> None:
    none = parse_profile({}, "t")
    tcp = parse_profile({"network": {"enabled": True, "connect_tcp": [1]}}, "t")
    free = parse_profile({"network": {"unrestricted": True}}, "t")
    assert missing_parts(none, LandlockStatus(0, "ENOSYS"), netns=True) == ["ENOSYS"]
    assert missing_parts(none, LandlockStatus(3), netns=True) == []
    assert missing_parts(none, LandlockStatus(3), netns=False) != []
    assert missing_parts(tcp, LandlockStatus(3), netns=True) != []
    assert missing_parts(tcp, LandlockStatus(4), netns=False) == []
    assert missing_parts(free, LandlockStatus(1), netns=False) == []


def test_status_line() -> None:
    assert str(LandlockStatus(0, "ENOSYS")) == "landlock unavailable: ENOSYS"
    line = str(LandlockStatus(7))
    assert line.startswith("landlock abi 7:") and "tcp bind/connect" in line
    assert "scopes" in line and "truncate" in line
    assert "no tcp rules" in str(LandlockStatus(3))


def test_sandbox_check_command(capsys: pytest.CaptureFixture[str], monkeypatch: Any,
                               tmp_path: Path) -> None:
    monkeypatch.setattr(sandbox, "default_user_dir", lambda: tmp_path)
    code = sandbox_check_main([])
    out = capsys.readouterr().out
    assert out.splitlines()[0] == str(sandbox.landlock_status())
    assert "profile default:" in out and "rwx" in out and "verdict:" in out
    assert code == (0 if "verdict: enforced" in out or "degraded" in out else 1)
    (tmp_path / "bad.yaml").write_text("nope: 1\n")
    assert sandbox_check_main(["bad"]) == 2
    assert "nope" in capsys.readouterr().err
    assert sandbox_check_main(["../etc"]) == 2


_leaf = st.one_of(st.none(), st.booleans(), st.integers(-5, 70000), st.floats(allow_nan=False),
                  st.text(max_size=12), st.sampled_from(["/usr", "{CWD}", "{NOPE}", "rel", "X=1"]))
_doc = st.recursive(_leaf, lambda inner: st.one_of(
    st.lists(inner, max_size=4),
    st.dictionaries(st.sampled_from(["filesystem", "env", "network", "general", "ro", "rw",
                                     "rox", "rwx", "enabled", "unrestricted", "bind_tcp",
                                     "connect_tcp", "best_effort", "timeout", "junk"]),
                    inner, max_size=4)), max_leaves=12)


@settings(max_examples=300, deadline=None)
@given(_doc)
def test_any_document_parses_or_raises_profile_error(doc: Any) -> None:
    try:
        p = parse_profile(doc, "fuzz")
    except ProfileError:
        return
    p.resolve(VALUES, environ={})
