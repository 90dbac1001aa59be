"""Many hosts (issue 30): what a front adds to a remote call, what TLS adds to TCP, how soon
a remote's change reaches the front.

Figures and their baselines, all measured in this run, on loopback, every server a
`toolsrv serve` process of its own:
  via front    the sandboxed /bin/sh echo called through a front that imports the remote
               (agent -> front over its Unix socket -> remote over its Unix socket), against
               the same call made directly on the remote: target the front adds <= 0.5 ms
               at the median.
  tls          the same call on the remote over tls!127.0.0.1 (one connection, handshake
               not counted), against tcp!127.0.0.1: informative, the ratio is TLS's cost.
  tls read     a read of tools/index over TLS against plain TCP: informative.
  revwait      a .meta written in the remote's tools directory until the front's revwait
               read returns, against the remote's own revwait: target <= 100 ms.
Variants alternate window by window so host noise hits them alike.

    python bench/bench_hosts.py [--quick] [--json FILE]
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    __package__ = "bench"

from toolsrv.cli.client import Client  # noqa: E402
from toolsrv.serve.tls import ClientTLS  # noqa: E402

from .common import PY, REPO, finish, lat, parser, row  # noqa: E402

B = "hosts"
ECHO = {"description": "echo", "readOnly": True, "args": {"type": "object"}}


def _certs(d: str) -> None:
    """A CA and a server certificate for 127.0.0.1 (openssl, as the tests make them)."""
    def ossl(*a: str) -> None:
        subprocess.run(["openssl", *a], cwd=d, check=True, capture_output=True, timeout=60)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    ossl("req", "-x509", *ec, "-days", "2", "-subj", "/CN=bench-ca", "-keyout", "ca.key",
         "-out", "ca.pem", "-addext", "basicConstraints=critical,CA:TRUE")
    ossl("req", *ec, "-subj", "/CN=localhost", "-keyout", "s.key", "-out", "s.csr")
    Path(d, "s.ext").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    ossl("x509", "-req", "-in", "s.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
         "-CAcreateserial", "-days", "2", "-extfile", "s.ext", "-out", "s.pem")


class Serve:
    def __init__(self, home: str, *args: str) -> None:
        env = {k: v for k, v in os.environ.items() if k not in ("OLLIE_TOOLS_PATH",)}
        env.update(HOME=home, NAMESPACE=f"{home}/ns")
        self.addr = f"unix!{home}/ns/toolsrv"
        self.p = subprocess.Popen([PY, "-m", "toolsrv", "serve", "-a", self.addr,
                                   "--no-state", *args], env=env, cwd=home,
                                  stderr=subprocess.PIPE, text=True)
        lines = []
        for line in self.p.stderr:   # type: ignore[union-attr]
            lines.append(line)
            if "agent/me/log" in line:
                break
        self.banner = "".join(lines)
        threading.Thread(target=lambda: [None for _ in self.p.stderr], daemon=True).start()

    def stop(self) -> None:
        self.p.send_signal(signal.SIGTERM)
        try:
            self.p.wait(30)
        except subprocess.TimeoutExpired:
            self.p.kill()


def agent(c: Client, tool: str) -> str:
    c.mkdir("session/b") if "b" not in [d.name for d in c.ls("session")] else None
    c.mkdir("session/b/agent/a") if "a" not in [d.name for d in c.ls("session/b/agent")] \
        else None
    c.write("session/b/agent/a/ctl", f"tool_load {tool}\n".encode())
    return f"session/b/agent/a/tools/{tool}/call"


def alternate(fns: dict[str, object], windows: int, per: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(windows):
        for k, fn in fns.items():
            for _ in range(per):
                t = time.perf_counter()
                fn()   # type: ignore[operator]
                out[k].append(time.perf_counter() - t)
    return out


def many_imports(tmp: str, windows: int, per: int, servers: list) -> dict:
    """tools/index of a front importing 16 servers of 100 tools each (one remote process
    imported under 16 names), against a server with the same 1,600 tools of its own."""
    hundred, many = Path(tmp, "hundred"), Path(tmp, "many")
    for d in (hundred, many):
        d.mkdir(mode=0o755)
    for i in range(100):
        (hundred / f"t{i:03d}.meta").write_text(json.dumps({**ECHO, "cmd": "/bin/cat"}))
        for k in range(16):
            (many / f"i{k}.t{i:03d}.meta").write_text(json.dumps({**ECHO, "cmd": "/bin/cat"}))
    for name in ("h", "m", "f16"):
        os.makedirs(f"{tmp}/{name}", mode=0o755)
    remote = Serve(f"{tmp}/h", "--tools", str(hundred))
    local = Serve(f"{tmp}/m", "--tools", str(many))
    front = Serve(f"{tmp}/f16", "--tools", f"{tmp}/f16",
                  *[x for k in range(16) for x in ("--import", f"i{k}={remote.addr}")])
    servers += [remote, local, front]
    fc, lc = Client.connect(front.addr), Client.connect(local.addr)
    end = time.monotonic() + 120
    while fc.read("tools/index").count(b"\n") < 1600 and time.monotonic() < end:
        time.sleep(0.1)
    assert fc.read("tools/index") == lc.read("tools/index"), "not the same 1,600 lines"
    got = alternate({"front": lambda: fc.read("tools/index"),
                     "local": lambda: lc.read("tools/index")}, windows, per)
    fc.close()
    lc.close()
    return row(B, "tools/index, 16 imports of 100 tools", "ms", lat(got["front"]),
               "1,600 tools of its own", lat(got["local"]), "informative")


def main() -> None:
    opts = parser(__doc__).parse_args()
    windows, per = (3, 10) if opts.quick else (10, 40)
    tmp = tempfile.mkdtemp(prefix="bench-hosts.", dir="/tmp")
    os.chmod(tmp, 0o755)
    tools = Path(tmp, "tools")
    tools.mkdir(mode=0o755)
    (tools / "echo.meta").write_text(json.dumps(ECHO))
    (tools / "echo").write_text("#!/bin/sh\ncat\n")
    (tools / "echo").chmod(0o755)
    os.environ["OLLIE_TOOLS_PATH"] = str(tools)
    _certs(tmp)
    rows, servers = [], []
    try:
        os.makedirs(f"{tmp}/r", mode=0o755)
        os.makedirs(f"{tmp}/f", mode=0o755)
        remote = Serve(f"{tmp}/r", "--tools", str(tools), "-a", "tcp!127.0.0.1!0",
                       "-a", "tls!127.0.0.1!0", "--tls-cert", f"{tmp}/s.pem",
                       "--tls-key", f"{tmp}/s.key")
        servers.append(remote)
        tcp = re.search(r"tcp!127\.0\.0\.1![1-9]\d*", remote.banner).group(0)   # type: ignore
        tls = re.search(r"tls!127\.0\.0\.1![1-9]\d*", remote.banner).group(0)   # type: ignore
        front = Serve(f"{tmp}/f", "--tools", f"{tmp}/f", "--import", f"r={remote.addr}")
        servers.append(front)
        fc, rc = Client.connect(front.addr), Client.connect(remote.addr)
        end = time.monotonic() + 60
        while b"r.echo" not in fc.read("tools/index") and time.monotonic() < end:
            time.sleep(0.05)
        args = json.dumps({"payload": "x" * 80}).encode()
        via, direct = agent(fc, "r.echo"), agent(rc, "echo")
        for p, c in ((via, fc), (direct, rc)):
            c.rdwr(p, args)                  # warm: the remote session made, tool loaded
        got = alternate({"via": lambda: fc.rdwr(via, args),
                         "direct": lambda: rc.rdwr(direct, args)}, windows, per)
        v, d = lat(got["via"]), lat(got["direct"])
        added = v["median"] - d["median"]
        rows.append(row(B, "remote echo call via a front", "ms", v, "same call on the remote",
                        d, "front adds <= 0.5 ms median", added <= 0.5,
                        f"the front adds {added:.3f} ms at the median"))
        tc = Client.connect(tcp)
        sc = Client.connect(tls, tls=ClientTLS(ca=f"{tmp}/ca.pem"))
        pt, ps = agent(tc, "echo"), agent(sc, "echo")
        got = alternate({"tls": lambda: sc.rdwr(ps, args), "tcp": lambda: tc.rdwr(pt, args)},
                        windows, per)
        rows.append(row(B, "echo call over TLS", "ms", lat(got["tls"]), "over plain TCP",
                        lat(got["tcp"]), "informative"))
        got = alternate({"tls": lambda: sc.read("tools/index"),
                         "tcp": lambda: tc.read("tools/index")}, windows, per * 2)
        rows.append(row(B, "read tools/index over TLS", "ms", lat(got["tls"]),
                        "over plain TCP", lat(got["tcp"]), "informative"))
        fr, rr = [], []
        for i in range(3 if opts.quick else 10):
            for who, c, out in (("f", fc, fr), ("r", rc, rr)):
                rev = int(c.read("revision"))
                box: list[float] = []
                t = threading.Thread(target=lambda c=c, rev=rev: (
                    c.rdwr("revwait", f"{rev}\n".encode()), box.append(time.perf_counter())))
                t.start()
                time.sleep(0.05)              # the revwait read is waiting
                t0 = time.perf_counter()
                (tools / f"new{who}{i}.meta").write_text(json.dumps({**ECHO, "cmd": "/bin/cat"}))
                t.join(60)
                out.append(box[0] - t0)
                settle = time.monotonic() + 60     # the front has it too: quiet again
                while f"r.new{who}{i}".encode() not in fc.read("tools/index") and \
                        time.monotonic() < settle:
                    time.sleep(0.02)
        f, r = lat(fr), lat(rr)
        rows.append(row(B, "remote .meta change to the front's revwait", "ms", f,
                        "to the remote's own revwait", r, "<= 100 ms", f["median"] <= 100))
        for c in (fc, rc, tc, sc):
            c.close()
        rows.append(many_imports(tmp, windows, per, servers))
    finally:
        for s in servers:
            s.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    finish(rows, opts)


if __name__ == "__main__":
    main()
