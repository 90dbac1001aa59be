"""Hosts of their own (issue 30): two `toolsrv serve` processes in separate network
namespaces joined by a veth pair, as two machines on a link.  The front, in one, imports
the remote, in the other, over TCP (with a shared secret) and over TLS (a certificate for
the remote's link address); its tools, its host-only variant and its calls come back
through the front, which the test reaches on its Unix socket.  Needs root and `ip netns`;
skips cleanly where they are not there."""
from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys

import pytest

from toolsrv.cli.client import Client

from hostshelpers import Server, wait_for
from tlshelpers import Certs, _leaf, needs_openssl

pytestmark = needs_openssl

ECHO = ("#!/bin/sh\ncat\n", {"readOnly": True, "description": "echo across the link"})
GPU = (None, {"description": "a tool for the gpu box", "cmd": "/bin/cat",
              "variants": [{"match": {"env": ["ONLY_ON_REMOTE"]},
                            "description": "the gpu box's cat"}]})
TCP_PORT, TLS_PORT = 5640, 5641      # each namespace has ports of its own


def _ip(*argv: str) -> None:
    subprocess.run(["ip", *argv], check=True, capture_output=True, timeout=30)


class Link:
    """Two namespaces, FRONT and REMOTE, with a veth pair between them: 10.X.Y.1 and .2."""

    def __init__(self) -> None:
        tag = f"{os.getpid() % 100000}{secrets.token_hex(2)}"
        self.front, self.remote = f"tsf{tag}", f"tsr{tag}"
        x, y = 200 + os.getpid() % 50, secrets.randbelow(250) + 1
        self.front_ip, self.remote_ip = f"10.{x}.{y}.1", f"10.{x}.{y}.2"
        self.made: list[str] = []
        try:
            for ns in (self.front, self.remote):
                _ip("netns", "add", ns)
                self.made.append(ns)
                _ip("-n", ns, "link", "set", "lo", "up")
            va, vb = f"va{tag}"[:15], f"vb{tag}"[:15]
            _ip("link", "add", va, "type", "veth", "peer", "name", vb)
            _ip("link", "set", va, "netns", self.front)
            _ip("link", "set", vb, "netns", self.remote)
            for ns, dev, addr in ((self.front, va, self.front_ip),
                                  (self.remote, vb, self.remote_ip)):
                _ip("-n", ns, "addr", "add", f"{addr}/30", "dev", dev)
                _ip("-n", ns, "link", "set", dev, "up")
        except BaseException:
            self.cleanup()
            raise

    def wrap(self, ns: str) -> tuple[str, ...]:
        return ("ip", "netns", "exec", ns)

    def cleanup(self) -> None:
        for ns in self.made:         # the veth pair goes with its namespaces
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)
        self.made = []


@pytest.fixture(scope="module")
def link():
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("network namespaces need root and the ip command")
    try:
        ln = Link()
    except (subprocess.CalledProcessError, OSError) as e:
        why = getattr(e, "stderr", b"") or str(e).encode()
        pytest.skip(f"ip netns does not work here: {why.decode(errors='replace')[:200]}")
    yield ln
    ln.cleanup()


@pytest.fixture(scope="module")
def certs(link):
    c = Certs()
    _leaf(c.dir, "linkhost", "ca", "/CN=remote-host",
          f"subjectAltName=IP:{link.remote_ip}\nextendedKeyUsage=serverAuth\n")
    yield c
    c.cleanup()


@pytest.fixture(scope="module")
def hosts(link, certs):
    secret = os.path.join(certs.dir, "secret")
    with open(os.open(secret, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
        f.write(secrets.token_hex(16))
    ip = link.remote_ip
    remote = Server({"echo": ECHO, "gpu": GPU},
                    "-a", f"tcp!{ip}!{TCP_PORT}", "-a", f"tls!{ip}!{TLS_PORT}",
                    "--listen-any", "--auth-secret", secret,
                    "--tls-cert", certs.pem("linkhost"), "--tls-key", certs.key("linkhost"),
                    wrap=link.wrap(link.remote), ONLY_ON_REMOTE="1")
    front = Server({"gpu": GPU}, "--import", f"far=tcp!{ip}!{TCP_PORT},secret={secret}",
                   "--import", f"sec=tls!{ip}!{TLS_PORT},ca={certs.pem('ca')},secret={secret}",
                   wrap=link.wrap(link.front))
    try:
        remote.start()
        front.start()
        yield front, remote
    finally:
        front.cleanup()
        remote.cleanup()


PROBE = """import socket, sys
for host in sys.argv[1:]:
    try:
        socket.create_connection((host, %d), timeout=20).close()
        print(host, "answers")
    except OSError as e:
        print(host, type(e).__name__)
""" % TCP_PORT


def test_the_namespaces_are_hosts_of_their_own(link, hosts):
    """From the front's namespace the remote is across the link, not on its loopback."""
    got = subprocess.run([*link.wrap(link.front), sys.executable, "-c", PROBE, "127.0.0.1",
                          link.remote_ip], capture_output=True, text=True, timeout=60)
    assert got.stdout.split("\n")[:2] == ["127.0.0.1 ConnectionRefusedError",
                                          f"{link.remote_ip} answers"], got.stderr


@pytest.mark.parametrize("name", ["far", "sec"])      # over TCP, and over TLS
def test_the_front_imports_the_remote_across_the_link(hosts, name):
    front, remote = hosts
    with Client.connect(front.addr) as c:
        assert wait_for(lambda: f"{name}.echo".encode() in c.read("tools/index")), \
            c.read("tools/errors").decode() + c.read("hosts/ctl").decode()
        assert b"the gpu box's cat" in c.read(f"tools/{name}.gpu/meta")   # its host's
        assert b"ONLY_ON_REMOTE" in c.read("tools/errors")                # not this one's
        s = f"session/n{name}"
        c.mkdir(s)
        c.mkdir(f"{s}/agent/a")
        c.write(f"{s}/agent/a/ctl", f"tool_load {name}.echo\ntool_load {name}.gpu\n".encode())
        tools = f"{s}/agent/a/tools"
        assert c.rdwr(f"{tools}/{name}.echo/call", b'{"over": "the link"}') == \
            b'{"over": "the link"}'
        assert c.rdwr(f"{tools}/{name}.gpu/call", b'{"g": 1}') == b'{"g": 1}'
        assert c.read(f"{tools}/{name}.echo/status").startswith(b"ok ")
        line = [ln for ln in c.read("hosts/ctl").decode().splitlines()
                if ln.startswith(name + " ")][0]
        assert line.endswith("up 2 tools"), line
    with Client.connect(remote.addr) as r:                    # ran there, for the front
        assert any(d.name.endswith(f"-n{name}") for d in r.ls("session"))
