"""The Kubernetes manifests (deploy/kubernetes/, issue 52), checked offline.

Every core object is validated, strictly (no unknown field), against the API schemas that
kubernetes-validate ships, for the oldest version the manifests target (1.33: hostUsers
is on by default from there) and the newest it knows.  cert-manager's objects have no
schema there (they are CRDs): their shape is checked here against cert-manager's v1 API
as documented, and so is what ties the files together: the secrets the pods mount are
the ones the Certificates make, the front's import dials the Service's name and port, which
the tool host's certificate names, and the toolsrv containers get exactly the least
privileges measured (tests/deploy/test_image.py).  No cluster runs here.
"""
from __future__ import annotations

import copy
import functools
from pathlib import Path

import pytest
import yaml

kv = pytest.importorskip("kubernetes_validate",
                         reason="kubernetes-validate is not installed (the test extra: make)")

DIR = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes"
OLDEST = "1.33.0"
CERT_MANAGER = "cert-manager.io/v1"
# cert-manager v1: the fields a Certificate's and an issuer's spec may have, and the usages
CERT_SPEC = {"secretName", "commonName", "dnsNames", "ipAddresses", "uris", "emailAddresses",
             "subject", "usages", "privateKey", "duration", "renewBefore", "issuerRef",
             "isCA", "secretTemplate", "keystores", "literalSubject",
             "revisionHistoryLimit", "additionalOutputFormats", "encodeUsagesInRequest"}
ISSUER_KINDS = {"selfSigned", "ca", "acme", "vault", "venafi"}
USAGES = {"signing", "digital signature", "content commitment", "key encipherment",
          "key agreement", "data encipherment", "cert sign", "crl sign", "encipher only",
          "decipher only", "any", "server auth", "client auth", "code signing",
          "email protection", "s/mime", "ipsec end system", "ipsec tunnel", "ipsec user",
          "timestamping", "ocsp signing", "microsoft sgc", "netscape sgc"}
MINIMAL_CAPS = ["SYS_ADMIN"]      # doc/hosts.md, Running a fleet; test_image.py's MINIMAL


@functools.cache
def docs() -> list[tuple[str, dict]]:
    """Every object of every file, read once (tests copy before they change one)."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    out = []
    for f in sorted(DIR.glob("*.yaml")):
        out += [(f.name, d) for d in yaml.load_all(f.read_text(), Loader=loader) if d]
    return out


def core() -> list[tuple[str, dict]]:
    return [(f, d) for f, d in docs() if d["apiVersion"] != CERT_MANAGER]


def of_kind(kind: str) -> list[dict]:
    return [d for _, d in docs() if d["kind"] == kind]


def toolsrv_containers() -> list[tuple[dict, dict]]:
    return [(d, c) for d in of_kind("Deployment")
            for c in d["spec"]["template"]["spec"]["containers"] if c["name"] == "toolsrv"]


def test_the_files_are_there() -> None:
    names = {p.name for p in DIR.glob("*.yaml")}
    assert {"sidecar.yaml", "tool-host.yaml", "front.yaml", "fleet-ca.yaml"} <= names
    assert len(core()) >= 6 and len(docs()) - len(core()) >= 5


@pytest.mark.parametrize("version", [OLDEST, kv.latest_version()])
def test_core_objects_validate(version: str) -> None:
    for name, d in core():
        kv.validate(d, version, strict=True)   # raises ValidationError naming the field


def test_the_validator_refuses_what_is_wrong() -> None:
    """A misspelt field and a wrong type are refused: the check above is not a no-op."""
    dep = copy.deepcopy(of_kind("Deployment")[0])
    dep["spec"]["template"]["spec"]["hostUser"] = False
    with pytest.raises(kv.ValidationError):
        kv.validate(dep, OLDEST, strict=True)
    dep = copy.deepcopy(of_kind("Deployment")[0])
    dep["spec"]["replicas"] = "one"
    with pytest.raises(kv.ValidationError):
        kv.validate(dep, OLDEST, strict=True)


def test_cert_manager_objects_have_their_shape() -> None:
    issuers = {d["metadata"]["name"]: d for d in of_kind("ClusterIssuer")}
    certs = of_kind("Certificate")
    for _, d in docs():
        if d["apiVersion"] == CERT_MANAGER:
            assert d["kind"] in {"Certificate", "ClusterIssuer", "Issuer"}, d
            assert set(d) <= {"apiVersion", "kind", "metadata", "spec"}, d
            assert d["metadata"]["name"], d
    for iss in issuers.values():
        assert len(set(iss["spec"]) & ISSUER_KINDS) == 1 and set(iss["spec"]) <= ISSUER_KINDS
    for c in certs:
        spec = c["spec"]
        assert set(spec) <= CERT_SPEC, set(spec) - CERT_SPEC
        assert c["metadata"].get("namespace") and spec["secretName"]
        ref = spec["issuerRef"]
        assert ref["kind"] == "ClusterIssuer" and ref["name"] in issuers, ref
        assert ref.get("group", "cert-manager.io") == "cert-manager.io"
        assert set(spec.get("usages", [])) <= USAGES, spec["usages"]
    # the CA issuer signs with the secret the CA Certificate makes, where a ClusterIssuer
    # reads it (cert-manager's own namespace)
    ca = [c for c in certs if c["spec"].get("isCA")]
    assert len(ca) == 1 and ca[0]["metadata"]["namespace"] == "cert-manager"
    assert any(i["spec"].get("ca", {}).get("secretName") == ca[0]["spec"]["secretName"]
               for i in issuers.values())
    server = [c for c in certs if "server auth" in c["spec"].get("usages", [])]
    client = [c for c in certs if "client auth" in c["spec"].get("usages", [])]
    assert server and client and all(c["spec"]["issuerRef"]["name"] != "toolsrv-selfsigned"
                                     for c in server + client)


def test_mounted_secrets_are_made_by_certificates() -> None:
    made = {(c["metadata"]["namespace"], c["spec"]["secretName"])
            for c in of_kind("Certificate")}
    for d in of_kind("Deployment"):
        for v in d["spec"]["template"]["spec"].get("volumes", []):
            if "secret" in v:
                assert (d["metadata"]["namespace"], v["secret"]["secretName"]) in made, v


def test_the_front_dials_the_service() -> None:
    svc = of_kind("Service")[0]
    imports = [c["args"][c["args"].index("--import") + 1]
               for _, c in toolsrv_containers() if "--import" in c["args"]]
    assert imports, "no front imports the tool host"
    name, rest = imports[0].split("=", 1)
    addr, *opts = rest.split(",")
    proto, host, port = addr.split("!")
    assert proto == "tls" and host == f"{svc['metadata']['name']}.{svc['metadata']['namespace']}.svc"
    assert int(port) == svc["spec"]["ports"][0]["port"]
    assert {o.split("=")[0] for o in opts} == {"ca", "cert", "key"}   # mutual TLS
    host_cert = next(c for c in of_kind("Certificate")
                     if c["metadata"]["namespace"] == svc["metadata"]["namespace"])
    assert host in host_cert["spec"]["dnsNames"]
    # the tool host listens where the Service sends, under mutual TLS
    (dep, c), = [(d, c) for d, c in toolsrv_containers()
                 if d["metadata"]["namespace"] == svc["metadata"]["namespace"]]
    listen = c["args"][c["args"].index("-a") + 1]
    target = svc["spec"]["ports"][0]["targetPort"]
    assert any(p["name"] == target and f"!{p['containerPort']}" in listen for p in c["ports"])
    assert "--tls-client-ca" in c["args"] and listen.startswith("tls!")


def test_least_privileges_and_the_socket() -> None:
    for dep, c in toolsrv_containers():
        pod = dep["spec"]["template"]["spec"]
        sc = c["securityContext"]
        assert sc["capabilities"] == {"add": MINIMAL_CAPS}, sc
        assert not sc.get("privileged") and sc["runAsUser"] == 0
        assert pod["hostUsers"] is False and pod["automountServiceAccountToken"] is False
        for other in pod["containers"]:
            if other is not c:          # the agent: nothing added, everything dropped
                assert other["securityContext"]["capabilities"] == {"drop": ["ALL"]}
                assert other["securityContext"]["allowPrivilegeEscalation"] is False
                env = {e["name"]: e["value"] for e in other["env"]}
                listen = c["args"][c["args"].index("-a") + 1]
                assert listen == f"unix!{env['NAMESPACE']}/toolsrv"
                shared = {m["name"] for m in c["volumeMounts"]} & \
                    {m["name"] for m in other["volumeMounts"]}
                assert any(v["name"] in shared and "emptyDir" in v for v in pod["volumes"])
