"""Certificates and kubeconfigs of the simulated clusters: real X.509, so identities are read, not assumed.

A simulated API server authenticates a kubeconfig the way kube-apiserver does with client certificates:
the certificate must be signed by the cluster CA; the user is its Common Name and the groups are its
Organizations. So `admin.conf` (O=kubeadm:cluster-admins) and `super-admin.conf` (O=system:masters),
which Kamaji writes into the same Secret (clastix/kamaji controllers/resources.go, kubeadm
phases/kubeconfig `getKubeConfigSpecsBase`), really are different identities here.
"""

from __future__ import annotations

import base64
import datetime
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import Any

import yaml
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from components import kube

_NOT_BEFORE = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)
_NOT_AFTER = datetime.datetime(2036, 1, 1, tzinfo=datetime.timezone.utc)


@dataclass(frozen=True)
class Identity:
    user: str
    groups: tuple[str, ...]


@dataclass(frozen=True)
class CertificateAuthority:
    name: str
    key: ec.EllipticCurvePrivateKey
    certificate: x509.Certificate

    @property
    def pem(self) -> bytes:
        return self.certificate.public_bytes(serialization.Encoding.PEM)

    def __deepcopy__(self, memo: dict[int, Any]) -> CertificateAuthority:
        return self  # immutable (and its key cannot be pickled)

    def issue(self, user: str, groups: tuple[str, ...] = ()) -> tuple[bytes, bytes]:
        """(certificate PEM, key PEM) of a client certificate for `user` in `groups`."""
        key = _client_key(user, groups, self.name)
        subject = x509.Name(
            [x509.NameAttribute(NameOID.ORGANIZATION_NAME, group) for group in groups]
            + [x509.NameAttribute(NameOID.COMMON_NAME, user)]
        )
        certificate = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(self.certificate.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(_NOT_BEFORE)
            .not_valid_after(_NOT_AFTER)
            .sign(self.key, hashes.SHA256())
        )
        key_pem = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        return certificate.public_bytes(serialization.Encoding.PEM), key_pem

    def issue_server(self, sans: list[x509.GeneralName]) -> tuple[bytes, bytes]:
        """(certificate PEM, key PEM) of an API server certificate for these subject alternative names."""
        key = ec.generate_private_key(ec.SECP256R1())
        certificate = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]))
            .issuer_name(self.certificate.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(_NOT_BEFORE)
            .not_valid_after(_NOT_AFTER)
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .sign(self.key, hashes.SHA256())
        )
        key_pem = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        return certificate.public_bytes(serialization.Encoding.PEM), key_pem

    def verify(self, certificate: x509.Certificate) -> bool:
        try:
            self.key.public_key().verify(
                certificate.signature, certificate.tbs_certificate_bytes, ec.ECDSA(certificate.signature_hash_algorithm)
            )
        except InvalidSignature:
            return False
        return certificate.issuer == self.certificate.subject


# Key generation dominates the cost of a simulated run; keys depend only on who they are for.
@cache
def _client_key(user: str, groups: tuple[str, ...], ca_name: str) -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def new_ca(name: str) -> CertificateAuthority:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(_NOT_BEFORE)
        .not_valid_after(_NOT_AFTER)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    return CertificateAuthority(name=name, key=key, certificate=certificate)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def kubeconfig(server: str, ca: CertificateAuthority, user: str, groups: tuple[str, ...], cluster: str) -> str:
    """A kubeconfig with a client certificate, shaped like kubeadm's and kind's."""
    cert, key = ca.issue(user, groups)
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {"name": cluster, "cluster": {"server": server, "certificate-authority-data": _b64(ca.pem)}}
            ],
            "users": [{"name": user, "user": {"client-certificate-data": _b64(cert), "client-key-data": _b64(key)}}],
            "contexts": [{"name": f"{user}@{cluster}", "context": {"cluster": cluster, "user": user}}],
            "current-context": f"{user}@{cluster}",
        },
        sort_keys=False,
    )


@dataclass(frozen=True)
class ParsedKubeconfig:
    server: str
    ca_pem: bytes
    client_certificate: x509.Certificate | None


# Every call to a simulated API server authenticates its kubeconfig: the same few texts, parsed again each time
# (YAML and X.509), were about a tenth of an operation's CPU. The result is immutable, so it is kept.
@lru_cache(maxsize=512)
def parse_kubeconfig(text: str) -> ParsedKubeconfig | None:
    """Server, CA and client certificate of the current context, or None for anything unusable."""
    try:
        context = kube.current_context(text)
        ca_pem = base64.b64decode(context.cluster.get("certificate-authority-data", ""))
        cert_data = context.user.get("client-certificate-data")
        certificate = x509.load_pem_x509_certificate(base64.b64decode(cert_data)) if cert_data else None
        return ParsedKubeconfig(server=context.server, ca_pem=ca_pem, client_certificate=certificate)
    except (ValueError, TypeError):  # kube.KubeconfigError, bad base64, not a certificate
        return None


def identity_of(certificate: x509.Certificate) -> Identity:
    name = certificate.subject
    user = name.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value
    groups = tuple(str(a.value) for a in name.get_attributes_for_oid(NameOID.ORGANIZATION_NAME))
    return Identity(user=str(user), groups=groups)
