"""The imports of one server: made from `serve --import`, changed through hosts/ctl, kept
in the state directory.

    hosts/ctl   read: one line per import, `NAME ADDR up N tools` or `NAME ADDR down: why`
                write: `import NAME ADDR` or `unimport NAME`, a line each

Theory of operation.  `Hosts` owns the Imports (imports.py) by name and this server's
front id, FRONT (the host name and eight random hex digits, kept in <state>/hosts.json so
a restarted front finds its remote sessions again; without state, new each start), which
names this server's sessions on every remote.  Imports given on the command line carry
their own credentials (Spec: ca=, cert=, key=, secret= files, named by whoever starts the
server).  One made through hosts/ctl names no file: it dials with the server's own
client credentials ($TOOLSRV_TLS_CA, $TOOLSRV_TLS_CERT/_KEY, $TOOLSRV_SECRET_FILE), since
a client may not make the server open a path of its choosing (SECURITY.md).  hosts/ctl is
written only by a client of the server itself (a tool's scoped connection may not:
scope.AgentScope).  Runtime imports and unimports are saved at once; a command-line import
comes back on every start, whatever was unimported at runtime.
"""
from __future__ import annotations

import json
import logging
import os
import re
import socket
from typing import Any

from ..errors import P9Error, busy, fit
from .ctlfile import STATE_FILE
from .imports import Import, Spec

log = logging.getLogger("toolsrv.hosts")
MAX_IMPORTS = 256


def new_front_id() -> str:
    host = re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname())[:32].strip("-") or "host"
    return f"{host}-{os.urandom(4).hex()}"


class Hosts:
    """Every import of this server, by name."""

    def __init__(self, registry: Any, specs: list[Spec], state_dir: str | None) -> None:
        self.registry = registry
        self.state = os.path.join(state_dir, STATE_FILE) if state_dir else None
        self.fixed = {s.name: s for s in specs}          # from the command line
        saved = self._read_state()
        self.front = saved.get("front") or new_front_id()
        self.runtime: dict[str, Spec] = {}
        for name, addr in saved.get("imports", {}).items():
            try:
                if name not in self.fixed:
                    self.runtime[name] = Spec.checked(name, addr)
            except ValueError as e:
                log.warning("%s: import %s not restored: %s", self.state, name, e)
        self.imports: dict[str, Import] = {}

    def _read_state(self) -> dict:
        if self.state is None:
            return {}
        try:
            with open(self.state) as f:
                data = json.load(f)
            return data if isinstance(data, dict) else {}
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as e:
            log.warning("%s: unreadable, imports made at runtime are lost: %s", self.state, e)
            return {}

    def save(self) -> None:
        """Write hosts.json (only once there is an import: a server that imports nothing
        keeps no such file); a failure is logged, the imports stay as they are."""
        if self.state is None or not (self.imports or os.path.exists(self.state)):
            return
        try:
            self._write()
        except OSError as e:
            log.error("%s: cannot save the imports: %s", self.state, e)
            try:
                os.unlink(f"{self.state}.tmp")
            except OSError:
                pass

    def _write(self) -> None:
        assert self.state is not None
        data = {"front": self.front,
                "imports": {n: s.addr for n, s in sorted(self.runtime.items())}}
        tmp = f"{self.state}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=1)
        os.replace(tmp, self.state)

    def start(self) -> None:
        for spec in [*self.fixed.values(), *self.runtime.values()]:
            self._start(spec)
        self.save()

    def _start(self, spec: Spec) -> None:
        imp = self.imports[spec.name] = Import(spec, self.registry, self.front)
        imp.start()

    def forget(self, agent: Any, whole: bool = False) -> None:
        """A local agent was removed (with its session: whole): each import removes its
        agent there (and the session)."""
        for imp in self.imports.values():
            imp.forget(agent, whole)

    def forget_session(self, name: str) -> None:
        """A local session was removed: each import removes the session it made there
        (one made for the session's `hosts/NAME` cwd alone has no agent to remove it)."""
        for imp in self.imports.values():
            imp.forget_session(name)

    async def close(self) -> None:
        for imp in list(self.imports.values()):
            await imp.close()

    # -- hosts/ctl --
    def text(self) -> str:
        return "".join(self.imports[n].status_line() for n in sorted(self.imports))

    async def apply(self, text: str) -> None:
        """Run hosts/ctl lines; raises P9Error naming the bad one."""
        for line in text.splitlines():
            words = line.split()
            if not words:
                continue
            if words[0] == "import" and len(words) == 3:
                self._import(words[1], words[2])
            elif words[0] == "unimport" and len(words) == 2:
                await self._unimport(words[1])
            else:
                raise P9Error(fit("hosts/ctl: bad line ", repr(line[:60]),
                                  ": want `import NAME ADDR` or `unimport NAME` "
                                  "(invalid argument)"))

    def _import(self, name: str, addr: str) -> None:
        try:
            spec = Spec.checked(name, addr)
        except ValueError as e:
            raise P9Error(fit("hosts/ctl: ", str(e))) from None
        if name in self.imports:
            raise P9Error(fit("hosts/ctl: file already exists: ", name, " is imported already"))
        if len(self.imports) >= MAX_IMPORTS:
            raise P9Error("hosts/ctl: " + busy(f"at most {MAX_IMPORTS} imports"))
        self.runtime[name] = spec
        self._start(spec)
        self.save()

    async def _unimport(self, name: str) -> None:
        imp = self.imports.pop(name, None)
        if imp is None:
            raise P9Error(fit("hosts/ctl: file not found: ", name, " is not imported"))
        self.runtime.pop(name, None)
        self.save()
        await imp.close()
