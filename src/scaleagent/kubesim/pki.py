"""Certificates and kubeconfigs for simulated clusters: each cluster has its own CA, as real ones do."""

from __future__ import annotations

import base64
import os
from dataclasses import dataclass
from pathlib import Path

import trustme
import yaml

ADMIN_USER = "kubesim-admin"
ADMIN_GROUP = "system:masters"
LIMITED_USER = "kubesim-limited"


@dataclass
class ClusterPKI:
    """The files a cluster's TLS server needs plus the admin's client credentials (all PEM)."""

    ca_pem: bytes
    server_cert_pem: bytes
    server_key_pem: bytes
    admin_cert_pem: bytes
    admin_key_pem: bytes

    @classmethod
    def generate(cls) -> ClusterPKI:
        ca = trustme.CA(organization_name="kubesim", organization_unit_name="cluster CA")
        server = ca.issue_cert(
            "127.0.0.1", "localhost", "kubernetes", "kubernetes.default.svc", common_name="kube-apiserver"
        )
        admin = ca.issue_cert(ADMIN_USER, common_name=ADMIN_USER, organization_name=ADMIN_GROUP)
        return cls(
            ca_pem=ca.cert_pem.bytes(),
            server_cert_pem=b"".join(b.bytes() for b in server.cert_chain_pems),
            server_key_pem=server.private_key_pem.bytes(),
            admin_cert_pem=b"".join(b.bytes() for b in admin.cert_chain_pems),
            admin_key_pem=admin.private_key_pem.bytes(),
        )

    def write_server_files(self, directory: Path) -> tuple[str, str, str]:
        """Write cert, key and CA to a private directory; return their paths (ssl needs files)."""
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        paths = []
        for name, data in (
            ("server.crt", self.server_cert_pem),
            ("server.key", self.server_key_pem),
            ("ca.crt", self.ca_pem),
        ):
            p = directory / name
            _write_private(p, data)
            paths.append(str(p))
        return paths[0], paths[1], paths[2]


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def kubeconfig(
    name: str,
    server: str,
    ca_pem: bytes,
    *,
    user: str,
    token: str | None = None,
    cert_pem: bytes | None = None,
    key_pem: bytes | None = None,
    namespace: str = "default",
) -> dict:
    creds: dict[str, str] = {}
    if token:
        creds["token"] = token
    if cert_pem and key_pem:
        creds["client-certificate-data"] = _b64(cert_pem)
        creds["client-key-data"] = _b64(key_pem)
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": {"server": server, "certificate-authority-data": _b64(ca_pem)}}],
        "users": [{"name": user, "user": creds}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": user, "namespace": namespace}}],
        "current-context": name,
        "preferences": {},
    }


def write_kubeconfig(path: Path, config: dict) -> None:
    _write_private(path, yaml.safe_dump(config, sort_keys=False).encode())


def _write_private(path: Path, data: bytes) -> None:
    """Credentials are written readable by their owner only."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
