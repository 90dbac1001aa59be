"""hosts/: the tree's view of the imports (hosts.py): hosts/ctl, read and written.

A write runs its lines on that Twrite (a 4 KiB piece of a longer write(2) keeps its last
partial line for the next), as an agent's ctl does, and its error goes to the writer; the
reply waits until the change is made and saved.  A read answers the state after the fid's
writes (answer_read).  hosts_dir also gives the tree session/<id>/hosts (sessioncwd.py)."""
from __future__ import annotations

from typing import Any

from ..errors import P9Error, too_long
from ..tree.node import Committed, Dir_, Node, answer_read, answered

MAX_LINE = 4096
STATE_FILE = "hosts.json"    # in the state directory (hosts.py)


class Lazy:
    """hosts.Hosts, made on the first hosts/ctl write: a server that imports nothing does
    not load the import machinery (its 9P client, TLS) at start-up."""

    def __init__(self, make: Any) -> None:
        self.make = make
        self.real: Any = None

    def text(self) -> str:
        return self.real.text() if self.real is not None else ""

    async def apply(self, text: str) -> None:
        if self.real is None:
            self.real = self.make()
        await self.real.apply(text)

    def forget(self, agent: Any, whole: bool = False) -> None:
        if self.real is not None:
            self.real.forget(agent, whole)

    def forget_session(self, name: str) -> None:
        if self.real is not None:
            self.real.forget_session(name)

    async def close(self) -> None:
        if self.real is not None:
            await self.real.close()


class HostsCtl(Node):
    perm = 0o666

    def __init__(self, name: str, qpath: int, parent: Node, hosts: Any) -> None:
        super().__init__(name, qpath, parent)
        self.hosts = hosts

    def _text(self) -> bytes:
        return self.hosts.text().encode()

    def length(self) -> int:
        return len(self._text())

    def read(self, fid: Any, offset: int, count: int) -> bytes:
        return answer_read(fid, self._text, offset, count)

    def write(self, fid: Any, offset: int, data: bytes) -> Any:
        buf = fid.aux.pop("hostsbuf", b"") + data
        if not buf.endswith(b"\n") and len(data) >= MAX_LINE:    # one piece of a longer
            cut = buf.rfind(b"\n") + 1            # write(2): its whole lines now
            fid.aux["hostsbuf"], buf = buf[cut:], buf[:cut]
            if len(fid.aux["hostsbuf"]) > MAX_LINE:
                del fid.aux["hostsbuf"]
                raise P9Error(too_long("hosts/ctl", MAX_LINE, "line"))
        try:
            text = buf.decode()
        except UnicodeDecodeError:
            raise P9Error("hosts/ctl: illegal UTF-8") from None

        async def run() -> int:
            await self.hosts.apply(text)
            answered(fid, offset + len(data))
            return len(data)
        return Committed(run()) if text.strip() else len(data)

    def truncate(self, fid: Any) -> None:
        fid.aux.pop("hostsbuf", None)

    def remove(self) -> None:
        return None


def hosts_dir(fs: Any, hosts: Any) -> Dir_:
    """The hosts/ directory of fs's root."""
    d = Dir_("hosts", fs.q("hosts"), fs.root, lambda d: [ctl])
    ctl = HostsCtl("ctl", fs.q("hosts", "ctl"), d, hosts)
    from .sessioncwd import SessionHosts    # session/<id>/hosts: a session's remote cwds
    fs.session_hosts = SessionHosts(fs, hosts)
    return d
