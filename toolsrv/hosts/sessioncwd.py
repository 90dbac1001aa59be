"""session/<id>/hosts/NAME: a local session's working directory on the imported host NAME.

Theory of operation.  A call of NAME.TOOL runs on NAME's host in the remote session the
import made for this local session (imports.remote_session: FRONT-SESSION), so its cwd
is that remote session's `cwd`, a path on that host: by default the remote's private
directory for it, removed with it.  The local `session/<id>/cwd` is a path on this host
and is never sent (the hosts share no file system as far as toolsrv knows).  This file
is the remote one seen through the local tree: a read asks the remote (making its
session if there is none yet) and answers its `session/FRONT-SESSION/cwd`; a write sends
the path there, where the remote checks it as a cwd write of its own (a directory on its
host; its error comes back, prefixed with NAME), and the remote keeps it in its state as
it keeps its sessions.  Nothing here opens or checks the path: it is the remote's.

The directory shows one file per import, and `session/<id>/hosts` is there only while
the server has imports (sessiondirs.SessionDir asks `active`).  Every remote wait is bounded
(imports.LOAD_TIMEOUT); an import that is down answers `input/output error: NAME:
unreachable at ADDR: why` at once.  A tool's scoped connection may not write it
(scope.AgentScope refuses every write in a session but its agent's ctl and calls).
"""
from __future__ import annotations

from typing import Any

from ..errors import P9Error
from ..errors import fit
from ..tree.node import Dir_, Node
from ..tree.sessiondirs import written_value



class SessionHosts:
    """fs.session_hosts: builds session/<id>/hosts for the server's imports."""

    def __init__(self, fs: Any, hosts: Any) -> None:
        self.fs, self.hosts = fs, hosts

    def _imports(self) -> dict[str, Any]:
        real = getattr(self.hosts, "real", self.hosts)      # ctlfile.Lazy or hosts.Hosts
        return (getattr(real, "imports", None) or {}) if real is not None else {}

    def active(self) -> bool:
        return bool(self._imports())

    def node(self, sd: Any, qpath: int) -> Node:
        s, fs = sd.s, self.fs

        def entries(d: Dir_) -> list[Node]:
            return [RemoteCwd(n, fs.q("session", s.name, s.serial, "hosts", n), d, self, s)
                    for n in sorted(self._imports())]
        return Dir_("hosts", qpath, sd, entries)


class RemoteCwd(Node):
    """One import's cwd for one local session: read it, write a path to set it there."""

    perm = 0o666

    def __init__(self, name: str, qpath: int, parent: Node, sh: SessionHosts, s: Any) -> None:
        super().__init__(name, qpath, parent)
        self.sh, self.s = sh, s

    def alive(self) -> bool:
        return self.s.alive and self.name in self.sh._imports()

    def _import(self) -> Any:
        imp = self.sh._imports().get(self.name)
        if imp is None:
            raise P9Error(f"file not found: {self.name} is not imported")
        return imp

    def read(self, fid: Any, offset: int, count: int) -> Any:
        if offset and "snapshot" in fid.aux:
            return fid.aux["snapshot"][offset:offset + count]
        imp = self._import()

        async def snapshot() -> bytes:
            data = fid.aux["snapshot"] = (await imp.session_cwd(self.s.name)).encode() + b"\n"
            return data[offset:offset + count]
        return snapshot()

    def write(self, fid: Any, offset: int, data: bytes) -> Any:
        value = written_value(self.name, fid, data)    # as session/<id>/cwd takes it
        if not value:
            return len(data)
        if "\n" in value:
            raise P9Error(fit(f"{self.name}: ", "one path, on one line (invalid argument)"))
        imp = self._import()

        async def put() -> int:
            await imp.session_cwd(self.s.name, value)
            return len(data)
        return put()

    def truncate(self, fid: Any) -> None:
        fid.aux.pop("wbuf", None)

    def remove(self) -> None:
        raise P9Error("permission denied: the cwd of a host cannot be removed")
