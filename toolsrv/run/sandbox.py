# toolsrv/run/sandbox.py — sandbox profiles: YAML → validated Profile → per-call Policy.
#
# Theory of operation.  A profile is looked up by a plain name, first in the user's
# ~/.config/ollie/sandbox/<name>.yaml, then in the shipped sandbox/<name>.yaml (package data,
# found by dirs/bundled.py), parsed with yaml.safe_load and validated whole: an unknown key,
# a wrong type, an unknown {PLACEHOLDER}, a relative path or a bad port is a ProfileError
# naming it, and nothing is
# half-loaded.  A Profile is immutable and still holds placeholders; Profile.resolve() fills
# them for one call ({CWD}, {TMPDIR}, {TOOLS} differ per call) and yields a Policy, which the
# runner turns into a Landlock ruleset.  A path whose placeholder is unset is skipped; a path
# that does not exist is skipped by the launcher when it opens it.
#
# What is needed versus what the kernel has: missing_parts() lists what a profile needs that
# this host cannot enforce; the runner refuses such a run unless general.best_effort is true.
from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from functools import cached_property, lru_cache
from typing import TYPE_CHECKING, Any


from toolsrv.dirs import bundled
from toolsrv.run.kernel import landlock
from toolsrv.record import Frozen, setfield

if TYPE_CHECKING:
    from pathlib import Path

PLACEHOLDERS = ("CWD", "HOME", "TMPDIR", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME",
                "XDG_CACHE_HOME", "XDG_RUNTIME_DIR", "TOOLS", "PREFIX", "BASE_PREFIX", "BIN")
# toolsrv's own commands for a run (data/bin: `tool`), {BIN}
BIN = bundled.BIN
ACCESS_KEYS = ("ro", "rox", "rw", "rwx")
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_ENV_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PLACEHOLDER_RE = re.compile(r"\{([^{}]*)\}")
_SCHEMA: dict[str, dict[str, type]] = {
    "filesystem": {k: list for k in ACCESS_KEYS},
    "network": {"unrestricted": bool, "enabled": bool, "bind_tcp": list, "connect_tcp": list},
    "general": {"best_effort": bool, "timeout": float, "toolsrv": bool},
}


class ProfileError(Exception):
    """A profile cannot be used; the message names the key, placeholder, path or name."""


class Policy(Frozen):
    """A profile resolved for one call: concrete paths, environment, network rules."""
    FIELDS = ("paths", "env", "network", "bind_tcp", "connect_tcp", "best_effort", "skipped",
              "fixed")
    paths: tuple[tuple[str, str], ...]
    env: dict[str, str]
    network: str
    bind_tcp: tuple[int, ...]
    connect_tcp: tuple[int, ...]
    best_effort: bool
    skipped: tuple[str, ...]
    fixed: int

    def __init__(self, paths: tuple[tuple[str, str], ...], env: dict[str, str], network: str,
                 bind_tcp: tuple[int, ...], connect_tcp: tuple[int, ...], best_effort: bool,
                 skipped: tuple[str, ...] = (), fixed: int = 0) -> None:
        setfield(self, "paths", paths)      # (absolute path, access key: ro/rox/rw/rwx)
        setfield(self, "env", env)
        setfield(self, "network", network)  # "none", "tcp" (listed ports only), "unrestricted"
        setfield(self, "bind_tcp", bind_tcp)
        setfield(self, "connect_tcp", connect_tcp)
        setfield(self, "best_effort", best_effort)
        setfield(self, "skipped", skipped)  # paths dropped because a placeholder was unset
        setfield(self, "fixed", fixed)      # the first `fixed` paths have no placeholder:
                                            # the same in every call


class Profile(Frozen):
    """A validated sandbox profile; paths and env values may still hold placeholders."""
    FIELDS = ("name", "source", "filesystem", "env", "unrestricted_network", "network_enabled",
              "bind_tcp", "connect_tcp", "best_effort", "timeout", "toolsrv")
    name: str
    source: str | None
    filesystem: Mapping[str, tuple[str, ...]]
    env: tuple[str, ...]
    unrestricted_network: bool
    network_enabled: bool
    bind_tcp: tuple[int, ...]
    connect_tcp: tuple[int, ...]
    best_effort: bool
    timeout: float | None
    toolsrv: bool

    def __init__(self, name: str, source: str | None = None,
                 filesystem: Mapping[str, tuple[str, ...]] | None = None,
                 env: tuple[str, ...] = (), unrestricted_network: bool = False,
                 network_enabled: bool = False, bind_tcp: tuple[int, ...] = (),
                 connect_tcp: tuple[int, ...] = (), best_effort: bool = False,
                 timeout: float | None = None, toolsrv: bool = False) -> None:
        setfield(self, "name", name)
        setfield(self, "source", source)
        setfield(self, "filesystem", {} if filesystem is None else filesystem)
        setfield(self, "env", env)          # "NAME" (passed through) or "NAME=value" (set)
        setfield(self, "unrestricted_network", unrestricted_network)
        setfield(self, "network_enabled", network_enabled)
        setfield(self, "bind_tcp", bind_tcp)
        setfield(self, "connect_tcp", connect_tcp)
        setfield(self, "best_effort", best_effort)
        setfield(self, "timeout", timeout)
        setfield(self, "toolsrv", toolsrv)  # the tool gets a 9P connection to this server
                                            # on fd 3

    @cached_property
    def _split_paths(self) -> tuple[tuple[tuple[str, str], ...], tuple[tuple[str, str], ...]]:
        """(paths without placeholders, normalized once; paths to fill per call)."""
        static, dynamic = [], []
        for access in ACCESS_KEYS:
            for raw in self.filesystem.get(access, ()):
                if "{" in raw:
                    dynamic.append((raw, access))
                else:
                    static.append((os.path.normpath(raw), access))
        return tuple(static), tuple(dynamic)

    @property
    def network(self) -> str:
        if self.unrestricted_network:
            return "unrestricted"
        return "tcp" if self.network_enabled else "none"

    def resolve(self, values: Mapping[str, str | None],
                environ: Mapping[str, str] | None = None) -> Policy:
        """Fill placeholders from values (see placeholder_values) for one call."""
        environ = os.environ if environ is None else environ
        static, dynamic = self._split_paths
        paths, skipped = list(static), []
        for raw, access in dynamic:
            path = _substitute(raw, values)
            if path is None:
                skipped.append(raw)
            else:
                paths.append((os.path.normpath(path), access))
        env: dict[str, str] = {}
        for entry in self.env:
            name, eq, value = entry.partition("=")
            if eq:
                filled = _substitute(value, values)
                if filled is not None:
                    env[name] = filled
            elif name in environ:
                env[name] = environ[name]
        return Policy(tuple(paths), env, self.network, self.bind_tcp, self.connect_tcp,
                      self.best_effort, tuple(skipped), len(static))


def _home() -> str:
    from pathlib import Path      # here: pathlib is not needed at start-up
    return str(Path.home())


def _substitute(text: str, values: Mapping[str, str | None]) -> str | None:
    """text with each {NAME} filled from values; None when one of them is unset."""
    out = []
    for literal, name in _template(text):
        out.append(literal)
        if name is not None:
            value = values.get(name)
            if value is None:
                return None
            out.append(value)
    return "".join(out)


@lru_cache(maxsize=4096)
def _template(text: str) -> tuple[tuple[str, str | None], ...]:
    """text split into (literal, placeholder name or None) once: this runs for every call."""
    parts, pos = [], 0
    for m in _PLACEHOLDER_RE.finditer(text):
        parts.append((text[pos:m.start()], m.group(1)))
        pos = m.end()
    parts.append((text[pos:], None))
    return tuple(parts)


def placeholder_values(cwd: str, tmpdir: str | None, tools: str | None,
                       environ: Mapping[str, str] | None = None) -> dict[str, str | None]:
    """The placeholder table for one call; XDG variables get their spec defaults."""
    environ = os.environ if environ is None else environ
    home = environ.get("HOME") or _home()

    def xdg(name: str, default: str | None) -> str | None:
        value = environ.get(name, "")
        return value if value.startswith("/") else default

    return {"CWD": cwd, "HOME": home, "TMPDIR": tmpdir, "TOOLS": tools,
            "PREFIX": sys.prefix,    # toolsrv's own installation (the lsp extra's servers)
            "BASE_PREFIX": sys.base_prefix,      # and its interpreter's
            "BIN": BIN,
            "XDG_CONFIG_HOME": xdg("XDG_CONFIG_HOME", home + "/.config"),
            "XDG_DATA_HOME": xdg("XDG_DATA_HOME", home + "/.local/share"),
            "XDG_STATE_HOME": xdg("XDG_STATE_HOME", home + "/.local/state"),
            "XDG_CACHE_HOME": xdg("XDG_CACHE_HOME", home + "/.cache"),
            "XDG_RUNTIME_DIR": xdg("XDG_RUNTIME_DIR", None)}


def validate_profile_name(name: str) -> None:
    """Raise ProfileError unless name is a plain file name stem (no '/', no '..', not empty)."""
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name) or ".." in name:
        raise ProfileError(f"bad profile name {name!r}: use letters, digits, '_', '-', '.'")


def _check_placeholders(text: str, where: str) -> None:
    for m in _PLACEHOLDER_RE.finditer(text):
        if m.group(1) not in PLACEHOLDERS:
            raise ProfileError(f"{where}: unknown placeholder {{{m.group(1)}}} in {text!r}")
    if "{" in _PLACEHOLDER_RE.sub("", text) or "}" in _PLACEHOLDER_RE.sub("", text):
        raise ProfileError(f"{where}: unbalanced brace in {text!r}")


def _section(data: Mapping[str, Any], key: str) -> dict[str, Any]:
    section = data.get(key)
    if section is None:
        return {}
    if not isinstance(section, dict):
        raise ProfileError(f"{key}: must be a mapping, not {type(section).__name__}")
    for sub, value in section.items():
        want = _SCHEMA[key].get(sub)
        if want is None:
            raise ProfileError(f"{key}.{sub}: unknown key (known: {', '.join(_SCHEMA[key])})")
        ok = (isinstance(value, (int, float)) and not isinstance(value, bool)
              if want is float else isinstance(value, want))
        if value is not None and not ok:
            raise ProfileError(f"{key}.{sub}: must be {want.__name__}, "
                               f"not {type(value).__name__}")
    return section


def _paths(key: str, values: list[Any]) -> tuple[str, ...]:
    for p in values:
        if not isinstance(p, str) or not p:
            raise ProfileError(f"filesystem.{key}: paths must be non-empty strings, got {p!r}")
        _check_placeholders(p, f"filesystem.{key}")
        if not (p.startswith("/") or p.startswith("{")):
            raise ProfileError(f"filesystem.{key}: path {p!r} is not absolute")
    return tuple(values)


def _ports(key: str, values: list[Any]) -> tuple[int, ...]:
    for p in values:
        if isinstance(p, bool) or not isinstance(p, int) or not 0 <= p <= 65535:
            raise ProfileError(f"network.{key}: {p!r} is not a port number")
    return tuple(values)


def _env(values: Any) -> tuple[str, ...]:
    if not isinstance(values, list):
        raise ProfileError(f"env: must be a list, not {type(values).__name__}")
    for entry in values:
        if not isinstance(entry, str) or not _ENV_RE.fullmatch(entry.partition("=")[0]):
            raise ProfileError(f"env: {entry!r} is not NAME or NAME=value")
        _check_placeholders(entry.partition("=")[2], "env")
    return tuple(values)


def parse_profile(data: Any, name: str, source: str | None = None) -> Profile:
    """Validate the YAML document of a profile (already loaded) and build a Profile."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ProfileError(f"profile {name}: top level must be a mapping")
    for key in data:
        if key not in (*_SCHEMA, "env"):
            raise ProfileError(f"{key}: unknown key (known: filesystem, env, network, general)")
    fs, net, gen = (_section(data, k) for k in ("filesystem", "network", "general"))
    filesystem = {k: _paths(k, fs[k] or []) for k in ACCESS_KEYS if k in fs}
    bind, connect = _ports("bind_tcp", net.get("bind_tcp") or []), \
        _ports("connect_tcp", net.get("connect_tcp") or [])
    enabled = bool(net.get("enabled"))
    if (bind or connect) and not enabled and not net.get("unrestricted"):
        raise ProfileError("network.bind_tcp/connect_tcp: need network.enabled: true")
    timeout = gen.get("timeout")
    if timeout is not None and timeout <= 0:
        raise ProfileError(f"general.timeout: must be positive, got {timeout!r}")
    env = data.get("env")
    return Profile(name, source, filesystem, _env([] if env is None else env),
                   bool(net.get("unrestricted")), enabled, bind, connect,
                   bool(gen.get("best_effort")), float(timeout) if timeout else None,
                   bool(gen.get("toolsrv")))


def default_user_dir() -> str:
    return _user_dir_for(os.environ.get("HOME", ""))   # on every call: a cache lookup


@lru_cache(maxsize=4)
def _user_dir_for(home: str) -> str:
    return os.path.join(os.path.expanduser("~"), ".config", "ollie", "sandbox")


def default_shipped_dir() -> Path:
    from pathlib import Path
    return Path(_SHIPPED)


_SHIPPED = bundled.PROFILES    # the shipped profiles (dirs/bundled.py)


def load_profile(name: str, *, user_dir: Path | None = None,
                 shipped_dir: Path | None = None) -> Profile:
    """Load <user_dir>/<name>.yaml, else <shipped_dir>/<name>.yaml; ProfileError otherwise.

    Called for every tool call: a profile edited on disk applies to the next call, at the
    cost of a stat of each candidate file (the file itself is parsed once per version)."""
    for path in _candidates(name, str(user_dir or default_user_dir()),
                            str(shipped_dir or _SHIPPED)):
        try:
            st = os.stat(path)
        except OSError:
            continue
        return _load_file(path, name, st.st_mtime_ns, st.st_size)
    raise ProfileError(f"profile {name}: not found")


@lru_cache(maxsize=64)
def _candidates(name: str, user_dir: str, shipped_dir: str) -> tuple[str, str]:
    validate_profile_name(name)        # raises before any path is made of a bad name
    return (os.path.join(user_dir, f"{name}.yaml"), os.path.join(shipped_dir, f"{name}.yaml"))


@lru_cache(maxsize=64)
def _load_file(path: str, name: str, _mtime: int, _size: int) -> Profile:
    import yaml   # here: only reading a profile needs it, and it costs start-up time
    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f)
    except (OSError, yaml.YAMLError) as e:
        raise ProfileError(f"profile {name}: {path}: {e}") from None
    try:
        return parse_profile(data, name, path)
    except ProfileError as e:
        raise ProfileError(f"profile {name}: {e}") from None


class LandlockStatus(Frozen):
    """What this kernel's Landlock can enforce; str() is a one-line log summary."""
    FIELDS = ("abi", "reason")
    abi: int
    reason: str | None

    def __init__(self, abi: int, reason: str | None = None) -> None:
        setfield(self, "abi", abi)
        setfield(self, "reason", reason)    # why Landlock is unavailable

    @property
    def filesystem(self) -> bool:
        return self.abi >= 1

    @property
    def tcp(self) -> bool:
        return self.abi >= 4

    @property
    def scopes(self) -> bool:
        return self.abi >= 6

    def __str__(self) -> str:
        if self.abi <= 0:
            return f"landlock unavailable: {self.reason}"
        fs = ["filesystem"] + [n for n, v in (("refer", 2), ("truncate", 3), ("ioctl_dev", 5))
                               if self.abi >= v]
        parts = [" ".join(fs) if len(fs) == 1 else f"{fs[0]} (+{', '.join(fs[1:])})"]
        parts.append("tcp bind/connect" if self.tcp else "no tcp rules (abi < 4)")
        parts.append("scopes (abstract unix, signal)" if self.scopes else "no scopes (abi < 6)")
        return f"landlock abi {self.abi}: " + ", ".join(parts)


@lru_cache(maxsize=1)
def landlock_status() -> LandlockStatus:
    """Probe the kernel once: the Landlock ABI and which parts are enforceable."""
    abi, reason = landlock.abi_version()
    return LandlockStatus(abi, reason)


def missing_parts(policy: Policy | Profile, status: LandlockStatus, netns: bool) -> list[str]:
    """What the policy needs that this host cannot enforce (empty: fully enforceable)."""
    if status.abi <= 0:
        return [status.reason or "no landlock"]
    if policy.network == "tcp" and not status.tcp:
        return [f"tcp port rules need landlock abi 4, kernel has {status.abi}"]
    if policy.network == "none" and not (status.tcp or netns):
        return [f"no-network needs landlock abi 4 or a network namespace (abi {status.abi})"]
    return []
