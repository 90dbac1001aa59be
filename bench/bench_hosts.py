"""Many hosts (issue 30): what a front adds to a remote call, what TLS adds to TCP, how soon
a remote's change reaches the front.

Figures and their baselines, all measured in this run, on loopback, every server a
`toolsrv serve` process of its own:
  via front    the sandboxed /bin/sh echo called through a front that imports the remote
               (agent -> front over its Unix socket -> remote over its Unix socket), against
               the same call made directly on the remote: target the front adds <= 0.5 ms
               at the median.  With --front-code DIR a second front, run from the toolsrv
               package under DIR (an older checkout: `git archive REV toolsrv | tar -x -C
               DIR`), is measured in the same windows against the same baseline.
  front CPU    the CPU time (user + system, /proc) each front spends per forwarded call,
               against the remote's per call it serves (direct and forwarded alike).
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

from .common import PY, REPO, finish, lat, one, parser, row  # noqa: E402

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
    def __init__(self, home: str, *args: str, code: str | None = None,
                 module: str = "toolsrv") -> None:
        env = {k: v for k, v in os.environ.items() if k not in ("OLLIE_TOOLS_PATH",)}
        env.update(HOME=home, NAMESPACE=f"{home}/ns")
        if code:                       # another checkout's toolsrv package (--front-code)
            env["PYTHONPATH"] = code
        if module != "toolsrv":        # bench.nullserver (--null-remote), from this checkout
            env["PYTHONPATH"] = str(REPO)
        self.addr = f"unix!{home}/ns/toolsrv"
        self.p = subprocess.Popen([PY, "-m", module, "serve", "-a", self.addr,
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


def cpu_s(p: subprocess.Popen) -> float:
    """User + system CPU seconds the process has used (/proc/PID/stat)."""
    f = Path(f"/proc/{p.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


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


def others(opts, tmp: str, tools: Path, tcp: str, tls: str, fc: Client, rc: Client,
           args: bytes, windows: int, per: int, servers: list) -> list[dict]:
    """TLS against TCP, a remote change to the front's revwait, 16 imports' tools/index."""
    rows: list[dict] = []
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
    return rows


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--front-code", metavar="DIR", help="also measure a front run from the "
                    "toolsrv package under DIR (an older checkout)")
    ap.add_argument("--null-remote", action="store_true", help="the remote runs every call "
                    "with the null runner (bench/nullserver.py): the front's own cost, "
                    "without a spawn's noise; only the via-front rows and CPU")
    opts = ap.parse_args()
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
                       "--tls-key", f"{tmp}/s.key",
                       module="bench.nullserver" if opts.null_remote else "toolsrv")
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
        calls = {"via": lambda: fc.rdwr(via, args), "direct": lambda: rc.rdwr(direct, args)}
        fronts = {"via": front}
        if opts.front_code:
            os.makedirs(f"{tmp}/o", mode=0o755)
            before = Serve(f"{tmp}/o", "--tools", f"{tmp}/o", "--import", f"r={remote.addr}",
                           code=opts.front_code)
            servers.append(before)
            oc = Client.connect(before.addr)
            while b"r.echo" not in oc.read("tools/index") and time.monotonic() < end:
                time.sleep(0.05)
            viaold = agent(oc, "r.echo")
            calls["before"] = lambda: oc.rdwr(viaold, args)
            fronts["before"] = before
        for fn in calls.values():
            fn()                             # warm: the remote session made, tool loaded
        used = {k: cpu_s(s.p) for k, s in (*fronts.items(), ("remote", remote))}
        got = alternate(calls, windows, per)
        used = {k: cpu_s(s.p) - used[k] for k, s in (*fronts.items(), ("remote", remote))}
        d = lat(got["direct"])
        for k, label in (("via", "remote echo call via a front"),
                         ("before", f"the same via a front of {opts.front_code}")):
            if k not in got:
                continue
            v = lat(got[k])
            added = v["median"] - d["median"]
            rows.append(row(B, label, "ms", v, "same call on the remote", d,
                            "front adds <= 0.5 ms median", added <= 0.5,
                            f"the front adds {added:.3f} ms at the median"))
        n = windows * per
        served = used["remote"] * 1000 / (n * len(calls))
        for k in fronts:
            rows.append(row(B, f"front CPU per forwarded call ({'this' if k == 'via' else 'before'})",
                            "ms", one(used[k] * 1000 / n), "remote CPU per call it serves",
                            one(served), "informative"))
        if opts.null_remote:
            fc.close()
            rc.close()
        else:
            rows += others(opts, tmp, tools, tcp, tls, fc, rc, args, windows, per, servers)
    finally:
        for s in servers:
            s.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    finish(rows, opts)


if __name__ == "__main__":
    main()
