"""Dial strings and the Plan 9 namespace directory, as plan9port spells them.

    unix!/path/to/socket     tcp!host!port     (a bare path means unix!path)
    tls!host!port            9P inside TLS (tls.py), host names verified

The default address is unix!$NAMESPACE/toolsrv, where $NAMESPACE defaults to
/tmp/ns.$USER.$DISPLAY (DISPLAY ":0" when unset), created mode 0700.
"""
from __future__ import annotations

import os

from ..record import Frozen, setfield

SERVICE = "toolsrv"


class Addr(Frozen):
    FIELDS = ("kind", "path", "host", "port")
    kind: str                                   # "unix", "tcp" or "tls" (TCP with TLS)
    path: str
    host: str
    port: int

    def __init__(self, kind: str, path: str = "", host: str = "", port: int = 0) -> None:
        setfield(self, "kind", kind)
        setfield(self, "path", path)
        setfield(self, "host", host)
        setfield(self, "port", port)

    def __str__(self) -> str:
        return f"unix!{self.path}" if self.kind == "unix" else \
            f"{self.kind}!{self.host}!{self.port}"

    @property
    def is_tcp(self) -> bool:
        """True for TCP, plain or inside TLS."""
        return self.kind in ("tcp", "tls")

    def is_loopback(self) -> bool:
        if self.kind == "unix":
            return True
        if self.host == "localhost":
            return True
        import ipaddress     # here: only TCP listeners need it
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False


def parse(s: str) -> Addr:
    """Parse a dial string; raises ValueError naming what is wrong."""
    parts = s.split("!")
    if len(parts) == 1:
        if not s:
            raise ValueError("empty address")
        return Addr("unix", path=s)
    if parts[0] == "unix" and len(parts) == 2 and parts[1]:
        return Addr("unix", path=parts[1])
    if parts[0] in ("tcp", "tls") and len(parts) == 3:
        try:
            port = int(parts[2])
        except ValueError:
            raise ValueError(f"bad port in address {s!r}") from None
        if not 0 <= port <= 65535 or not parts[1]:
            raise ValueError(f"bad host or port in address {s!r}")
        return Addr(parts[0], host=parts[1], port=port)
    raise ValueError(f"bad address {s!r}: want unix!PATH, tcp!HOST!PORT or tls!HOST!PORT")


def namespace(env: dict[str, str] | None = None) -> str:
    """$NAMESPACE, or /tmp/ns.$USER.$DISPLAY as plan9port computes it."""
    env = dict(os.environ) if env is None else env
    if env.get("NAMESPACE"):
        return env["NAMESPACE"]
    user = env.get("USER") or user_name()
    display = env.get("DISPLAY") or ":0"
    if display.endswith(".0"):
        display = display[:-2]
    return f"/tmp/ns.{user}.{display.replace('/', '_')}"


def user_name() -> str:
    """Who we are, as a 9P uname and in the namespace's name: getpass.getuser() ($LOGNAME,
    $USER, ..., then the passwd entry), or "uid:NNNN" for a uid with no passwd entry (a
    container's arbitrary uid), where getuser() raises."""
    import getpass
    try:
        return getpass.getuser()
    except (KeyError, OSError):   # OSError from 3.13 on
        return f"uid:{os.getuid()}"


def default_addr(env: dict[str, str] | None = None) -> Addr:
    return Addr("unix", path=os.path.join(namespace(env), SERVICE))


def plan9port_default() -> Addr:
    """The default address as plan9port computes it with NAMESPACE unset."""
    return default_addr({k: v for k, v in os.environ.items() if k != "NAMESPACE"})


def ensure_private_dir(path: str) -> None:
    """Create the namespace directory 0700, or check an existing one is ours and tighten
    it to 0700 (dirs/trusted.py: ours, not a symlink, nothing above it others can change);
    raises trusted.Untrusted (a ValueError) saying what is wrong."""
    from ..dirs.trusted import open_dir
    open_dir(path, 0o700, "remove it, or set $NAMESPACE to a directory of your own").close()