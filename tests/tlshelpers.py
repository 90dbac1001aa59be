"""Certificates the tests make with the `openssl` command: a CA, a server certificate for
localhost and 127.0.0.1 that it signs, a client certificate it signs, and a second CA
with a server certificate of its own, which the first CA's clients must not trust."""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile

import pytest

needs_openssl = pytest.mark.skipif(shutil.which("openssl") is None,
                                   reason="the openssl command makes the test certificates")


def _run(*argv: str, cwd: str) -> None:
    subprocess.run(["openssl", *argv], cwd=cwd, check=True, capture_output=True, timeout=60)


def _ca(d: str, name: str) -> None:
    _run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-days", "2", "-subj", f"/CN={name}", "-keyout", f"{name}.key",
         "-out", f"{name}.pem", "-addext", "basicConstraints=critical,CA:TRUE",
         "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=d)


def _leaf(d: str, name: str, ca: str, subj: str, ext: str) -> None:
    _run("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
         "-subj", subj, "-keyout", f"{name}.key", "-out", f"{name}.csr", cwd=d)
    with open(os.path.join(d, f"{name}.ext"), "w") as f:
        f.write(ext)
    _run("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
         "-CAcreateserial", "-days", "2", "-extfile", f"{name}.ext", "-out", f"{name}.pem",
         cwd=d)
    os.chmod(os.path.join(d, f"{name}.key"), 0o600)


class Certs:
    """Paths of the PEM files: ca, server, client (signed by ca); other_ca, stranger
    (a server certificate other_ca signed); each leaf's key beside it as NAME.key."""

    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="certs.", dir="/tmp")
        d = self.dir
        _ca(d, "ca")
        _ca(d, "other_ca")
        server = "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n"
        _leaf(d, "server", "ca", "/O=toolsrv tests/CN=localhost", server)
        _leaf(d, "stranger", "other_ca", "/CN=localhost", server)
        _leaf(d, "elsewhere", "ca", "/CN=elsewhere.example",
              "subjectAltName=DNS:elsewhere.example\nextendedKeyUsage=serverAuth\n")
        _leaf(d, "client", "ca", "/O=fleet/CN=front1", "extendedKeyUsage=clientAuth\n")
        _leaf(d, "outsider", "other_ca", "/CN=outsider", "extendedKeyUsage=clientAuth\n")

    def pem(self, name: str) -> str:
        return os.path.join(self.dir, f"{name}.pem")

    def key(self, name: str) -> str:
        return os.path.join(self.dir, f"{name}.key")

    def cleanup(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)
