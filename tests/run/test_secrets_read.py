"""A tool's secrets as the server reads and redacts them (issue 50; run/secrets.py): the
places looked in, in order; every refusal named, with the chmod to run and the errno word
9pfuse maps; no link followed; the bounds; and the redaction of a run's output."""
from __future__ import annotations

import errno
import os

import pytest

from toolsrv.errors import errno_for
from toolsrv.run import secrets
from toolsrv.run.secrets import SecretError, Values, read, read_one


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A HOME with a private secrets directory, and no systemd credentials."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("CREDENTIALS_DIRECTORY", raising=False)
    d = tmp_path / ".config" / "ollie" / "secrets"
    d.mkdir(parents=True)
    d.chmod(0o700)
    return d


def put(d, name: str, value: bytes, mode: int = 0o600) -> str:
    p = d / name
    p.write_bytes(value)
    p.chmod(mode)
    return str(p)


def refusal(name: str) -> SecretError:
    with pytest.raises(SecretError) as e:
        read_one(name)
    return e.value


def test_a_value_is_read_with_one_trailing_newline_stripped(home):
    put(home, "TOKEN", b"ghp_abc123\n\n")
    put(home, "OTHER", b"s3cr3t")
    v = read(("TOKEN", "OTHER"))
    assert v.env == {"TOKEN": "ghp_abc123\n", "OTHER": "s3cr3t"}
    assert "ghp" not in repr(v) and repr(v) == "<secrets TOKEN OTHER>"


def test_the_credentials_directory_comes_first_then_home(home, tmp_path, monkeypatch):
    cred = tmp_path / "creds"
    cred.mkdir(mode=0o500)
    put(home, "TOKEN", b"from-home")
    put(home, "ONLY_HOME", b"home-only")
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", str(cred))
    cred.chmod(0o700)
    put(cred, "TOKEN", b"from-systemd", 0o440)    # an ACL's mask shows in the group bits
    cred.chmod(0o550)
    assert read_one("TOKEN") == "from-systemd" and read_one("ONLY_HOME") == "home-only"


def test_a_missing_secret_names_both_places_and_maps_to_enoent(home, tmp_path, monkeypatch):
    cred = tmp_path / "creds"
    cred.mkdir(mode=0o700)
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", str(cred))
    e = refusal("ACCESS_KEY")         # a name holding a word 9pfuse ranks before "no such"
    assert e.full.endswith("(no such file or directory)")
    assert f"$CREDENTIALS_DIRECTORY/ACCESS_KEY ({cred}/ACCESS_KEY)" in e.full
    assert f"{home}/ACCESS_KEY" in e.full and e.full.startswith("secret ACCESS_KEY: ")
    assert errno_for(str(e)) == errno.ENOENT and len(str(e).encode()) < 128


@pytest.mark.parametrize("mode, fix", [(0o644, "chmod 600"), (0o640, "chmod 600"),
                                       (0o606, "chmod 600"), (0o620, "chmod 600")])
def test_a_file_others_may_read_or_write_is_refused_with_the_chmod(home, mode, fix):
    p = put(home, "TOKEN", b"abcdef", mode)
    e = refusal("TOKEN")
    assert f"{p} may be read, written or searched by" in e.full and f"run {fix} {p}" in e.full
    assert f"(mode {mode:04o})" in e.full and errno_for(str(e)) == errno.EACCES


def test_a_directory_others_may_search_is_refused_with_the_chmod(home):
    put(home, "TOKEN", b"abcdef")
    home.chmod(0o711)
    e = refusal("TOKEN")
    assert f"run chmod 700 {home}" in e.full and "by group and others" in e.full


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give the file away")
def test_a_file_of_another_uid_is_refused(home):
    p = put(home, "TOKEN", b"abcdef")
    os.chown(p, 65534, 65534)
    e = refusal("TOKEN")
    assert "is owned by uid 65534" in e.full and f"chown 0 {p}" in e.full


def test_no_link_is_followed_out_of_the_directory(home, tmp_path):
    outside = tmp_path / "elsewhere"
    outside.write_bytes(b"abcdef")
    outside.chmod(0o600)
    (home / "TOKEN").symlink_to(outside)
    e = refusal("TOKEN")
    assert "is a symbolic link, not followed" in e.full and errno_for(str(e)) == errno.EACCES
    real = tmp_path / "realdir"
    real.mkdir(mode=0o700)
    put(real, "TOKEN", b"abcdef")
    home.rename(tmp_path / "gone")
    os.symlink(real, home)             # the directory itself a link
    assert "is a symbolic link" in refusal("TOKEN").full


def test_a_fifo_is_refused_without_blocking(home):
    os.mkfifo(home / "TOKEN", 0o600)
    assert "is not a regular file" in refusal("TOKEN").full


def test_the_bounds(home):
    put(home, "BIG", b"x" * (secrets.MAX_BYTES + 1))
    e = refusal("BIG")
    assert "too long" in e.full and errno_for(str(e)) == errno.E2BIG
    put(home, "EDGE", b"x" * secrets.MAX_BYTES + b"\n")    # the newline is not counted
    with pytest.raises(SecretError):     # ...but read past the bound it is
        read_one("EDGE")
    put(home, "FULL", b"y" * secrets.MAX_BYTES)
    assert len(read_one("FULL")) == secrets.MAX_BYTES
    for name, data, words in (("SHORT", b"abc\n", "too short"), ("NUL", b"ab\0cdef", "NUL"),
                              ("LATIN", b"caf\xe9-value", "not UTF-8")):
        put(home, name, data)
        e = refusal(name)
        assert words in e.full and errno_for(str(e)) == errno.EINVAL, e.full


def test_redaction_longest_first_in_bytes_and_text():
    v = Values({"A": "tok-123", "B": "tok-123-long"})
    out = v.redact_bytes(b"x tok-123-long y tok-123 z")
    assert out == b"x [secret B] y [secret A] z"
    assert v.redact_text("why: tok-123") == "why: [secret A]"
    assert v.redact_text(None) is None and v.redact_bytes(b"") == b""
    assert v.stamp() != Values({"A": "tok-124", "B": "tok-123-long"}).stamp()
    assert "tok" not in v.stamp()


def test_a_value_cut_by_the_output_cap_is_redacted_at_the_end():
    v = Values({"TOKEN": "ghp_0123456789"})
    assert v.redact_bytes(b"head ghp_01234", cut=True) == b"head [secret TOKEN]"
    assert v.redact_bytes(b"head ghp_01234", cut=False) == b"head ghp_01234"
    assert v.redact_bytes(b"ends with g", cut=True) == b"ends with [secret TOKEN]"
    assert v.redact_bytes(b"nothing of it", cut=True) == b"nothing of it"
    assert v.redact_bytes(b"ghp_0123456789 and gh", cut=True) == \
        b"[secret TOKEN] and [secret TOKEN]"
