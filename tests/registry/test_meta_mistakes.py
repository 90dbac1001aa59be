"""A newcomer's commonest .meta mistakes are said in tools/errors at load, with the fix
(issue 46, 8 and 9): a script beside its .meta without the run bit, and a `sandbox`
profile that does not exist (where it was looked for); the tool is served once fixed."""

import json
import os

from toolsrv.dirs import bundled
from toolsrv.registry.registry import Registry


def load(tmp_path):
    r = Registry([str(tmp_path / "tools")], env={"PATH": str(tmp_path / "bin"),
                                                  "HOME": str(tmp_path)})
    r.load()
    return r


def meta(tmp_path, name, m):
    (tmp_path / "tools").mkdir(exist_ok=True)
    (tmp_path / "bin").mkdir(exist_ok=True)
    (tmp_path / "tools" / f"{name}.meta").write_text(json.dumps(m))


def test_a_script_beside_the_meta_without_the_run_bit_says_chmod(tmp_path):
    meta(tmp_path, "noexec", {"description": "d"})
    script = tmp_path / "tools" / "noexec"
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(0o644)
    r = load(tmp_path)
    assert r.get("noexec") is None
    assert dict(r.errors)[str(tmp_path / "tools" / "noexec.meta")] == (
        f"no command: noexec is beside the .meta but not executable: chmod +x {script}")
    script.chmod(0o755)
    r.rescan()
    assert r.get("noexec") is not None and not r.errors


def test_a_missing_sandbox_profile_is_listed_at_load_with_where_it_was_looked_for(tmp_path):
    meta(tmp_path, "boxed", {"description": "d", "cmd": "/bin/true",
                             "sandbox": "nosuchprofile"})
    meta(tmp_path, "shipped", {"description": "d", "cmd": "/bin/true", "sandbox": "client9p"})
    r = load(tmp_path)
    user = tmp_path / ".config" / "ollie" / "sandbox"
    assert r.get("boxed") is None and r.get("shipped") is not None
    assert dict(r.errors)[str(tmp_path / "tools" / "boxed.meta")] == (
        f"sandbox: profile nosuchprofile: not found (looked for nosuchprofile.yaml in {user} "
        f"and {bundled.PROFILES}; write it there, or name another)")
    assert "boxed" not in r.index_text()
    os.makedirs(user)
    (user / "nosuchprofile.yaml").write_text("filesystem: {}\n")
    r.recheck()
    assert r.get("boxed") is not None and not r.errors
