"""The local cluster's certificates: one CA, the API server's serving certificate, an admin
client certificate (group ``system:masters``) and the service-account signing key.

Short-lived by design (the cluster lives for a test session or a demo); everything is
written 0600 into the cluster's own state directory.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALID_FOR = dt.timedelta(days=30)
SERVICE_IP = "10.96.0.1"  # first address of the service CIDR the API server is given


@dataclass(frozen=True)
class Pki:
    ca_cert: Path
    server_cert: Path
    server_key: Path
    admin_cert: Path
    admin_key: Path
    sa_key: Path
    sa_pub: Path


def _name(common_name: str, organization: str | None = None) -> x509.Name:
    parts = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        parts.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(parts)


def _write(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)


def _key_pem(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _issue(subject: x509.Name, key: ec.EllipticCurvePrivateKey, issuer: x509.Name,
           issuer_key: ec.EllipticCurvePrivateKey, *, ca: bool,
           usage: list[x509.ObjectIdentifier], sans: list[x509.GeneralName]) -> x509.Certificate:
    now = dt.datetime.now(dt.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + VALID_FOR)
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(
            digital_signature=True, key_encipherment=not ca, key_cert_sign=ca, crl_sign=ca,
            content_commitment=False, data_encipherment=False, key_agreement=False,
            encipher_only=False, decipher_only=False), critical=True)
    )
    if usage:
        builder = builder.add_extension(x509.ExtendedKeyUsage(usage), critical=False)
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def generate(directory: Path) -> Pki:
    """Write a fresh CA, serving cert, admin client cert and service-account key pair."""
    directory.mkdir(parents=True, exist_ok=True)
    pem = serialization.Encoding.PEM
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("specd-local-ca")
    ca = _issue(ca_name, ca_key, ca_name, ca_key, ca=True, usage=[], sans=[])

    server_key = ec.generate_private_key(ec.SECP256R1())
    dns = ["localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
           "kubernetes.default.svc.cluster.local"]
    sans: list[x509.GeneralName] = [x509.DNSName(name) for name in dns]
    sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ("127.0.0.1", SERVICE_IP)]
    server = _issue(_name("kube-apiserver"), server_key, ca_name, ca_key, ca=False,
                    usage=[ExtendedKeyUsageOID.SERVER_AUTH], sans=sans)

    admin_key = ec.generate_private_key(ec.SECP256R1())
    admin = _issue(_name("specd-admin", "system:masters"), admin_key, ca_name, ca_key,
                   ca=False, usage=[ExtendedKeyUsageOID.CLIENT_AUTH], sans=[])

    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)

    pki = Pki(ca_cert=directory / "ca.crt", server_cert=directory / "apiserver.crt",
              server_key=directory / "apiserver.key", admin_cert=directory / "admin.crt",
              admin_key=directory / "admin.key", sa_key=directory / "sa.key",
              sa_pub=directory / "sa.pub")
    _write(pki.ca_cert, ca.public_bytes(pem))
    _write(pki.server_cert, server.public_bytes(pem))
    _write(pki.server_key, _key_pem(server_key))
    _write(pki.admin_cert, admin.public_bytes(pem))
    _write(pki.admin_key, _key_pem(admin_key))
    _write(pki.sa_key, _key_pem(sa_key))
    _write(pki.sa_pub, sa_key.public_key().public_bytes(
        pem, serialization.PublicFormat.SubjectPublicKeyInfo))
    return pki


def load(directory: Path) -> Pki:
    return Pki(ca_cert=directory / "ca.crt", server_cert=directory / "apiserver.crt",
               server_key=directory / "apiserver.key", admin_cert=directory / "admin.crt",
               admin_key=directory / "admin.key", sa_key=directory / "sa.key",
               sa_pub=directory / "sa.pub")
