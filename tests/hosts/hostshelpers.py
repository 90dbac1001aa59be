"""Whole `toolsrv serve` processes for the import tests: each with a home of its own outside
the checkout (its tools, its state, its environment), restartable on the same address,
killable mid-call; and a bounded wait for what a front shows."""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

from apphelpers import add_tool

TOOLSRV = [sys.executable, "-m", "toolsrv"]


class Server:
    """`toolsrv serve` in a home of its own; `addr` is its unix! address, `tls` its tls!
    one when it listens on one (the port chosen at the first start and kept)."""

    def __init__(self, tools: dict[str, tuple[str | None, dict]], *args: str,
                 tls_port: bool = False, wrap: tuple[str, ...] = (), **env: str) -> None:
        self.wrap = list(wrap)     # a command that runs it: ("ip", "netns", "exec", NS)
        self.home = tempfile.mkdtemp(prefix="host.", dir="/tmp")
        d = os.path.join(self.home, "tools")
        os.makedirs(d)
        for p in (self.home, d):
            os.chmod(p, 0o755)
        for name, (script, meta) in tools.items():
            add_tool(d, name, script, meta)
        self.tools_dir = d
        self.env = {k: v for k, v in os.environ.items()
                    if k not in ("OLLIE_TOOLS_PATH", "TOOLSRV_ADDR")}
        self.env.update(HOME=self.home, NAMESPACE=os.path.join(self.home, "ns"),
                        XDG_STATE_HOME=os.path.join(self.home, "state"),
                        OLLIE_TOOLS_PATH=d, **env)
        self.addr = f"unix!{self.home}/ns/toolsrv"
        self.args = ["-a", self.addr, "--state", os.path.join(self.home, "st"), *args]
        self.tls: str | None = "tls!127.0.0.1!0" if tls_port else None
        self.p: subprocess.Popen | None = None
        self.lines: list[str] = []

    def start(self) -> "Server":
        args = self.args + (["-a", self.tls] if self.tls else [])
        self.p = subprocess.Popen(self.wrap + TOOLSRV + ["serve", *args], env=self.env, cwd=self.home,
                                  stderr=subprocess.PIPE, text=True, start_new_session=True)
        assert self.p.stderr is not None
        for line in self.p.stderr:
            self.lines.append(line)
            if "agent/me/log" in line:
                break
        else:
            raise RuntimeError("toolsrv serve did not start:\n" + "".join(self.lines))
        m = re.search(r"tls!127\.0\.0\.1!(\d+)", "".join(self.lines[-30:]))
        if self.tls and m:
            self.tls = m.group(0)
        threading.Thread(target=self._drain, args=(self.p,), daemon=True).start()
        return self

    def _drain(self, p: subprocess.Popen) -> None:
        for line in p.stderr or ():
            self.lines.append(line)

    def kill(self) -> None:
        """SIGKILL: the host goes away without a word."""
        if self.p is not None and self.p.poll() is None:
            os.killpg(self.p.pid, signal.SIGKILL)
            self.p.wait(30)

    def stop(self) -> None:
        if self.p is not None and self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.home, ignore_errors=True)


def wait_for(pred, timeout: float = 60.0) -> bool:
    """pred() true within timeout (polled: the front shows a remote's change when it has
    seen it, which it is told of, not timed)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            if pred():
                return True
        except Exception:          # noqa: BLE001  (not there yet)
            pass
        time.sleep(0.05)
    return False
