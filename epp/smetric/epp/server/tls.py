"""TLS for the ext_proc port, as the upstream picker serves it (``--secure-serving``, default on).

``--cert-path DIR`` names a directory with ``tls.crt`` and ``tls.key`` (a mounted Secret, the same
layout as upstream); without it a self-signed certificate is made at start-up (upstream does the same;
gateways connect without verifying it: Istio ``DestinationRule`` ``insecureSkipVerify``, kgateway and
GKE by default). The gRPC health port stays plaintext (kubelet gRPC probes do not speak TLS).
"""

from __future__ import annotations

import datetime
import socket
from pathlib import Path

CERT_FILE = "tls.crt"
KEY_FILE = "tls.key"
SELF_SIGNED_DAYS = 3650


class TlsError(ValueError):
    """The certificate directory is unusable (missing or unreadable files)."""


def load_cert_dir(path: str) -> tuple[bytes, bytes]:
    """``(key_pem, cert_pem)`` from ``path/tls.key`` and ``path/tls.crt``."""
    base = Path(path)
    try:
        return (base / KEY_FILE).read_bytes(), (base / CERT_FILE).read_bytes()
    except OSError as exc:
        raise TlsError(f"--cert-path={path}: needs {CERT_FILE} and {KEY_FILE} ({exc})") from None


def self_signed(hostname: str | None = None) -> tuple[bytes, bytes]:
    """A fresh EC P-256 key and a self-signed certificate for it: ``(key_pem, cert_pem)``."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    name = hostname or socket.gethostname() or "smetric-epp"
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name[:64])])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=SELF_SIGNED_DAYS))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name[:253])]), critical=False)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return key_pem, cert.public_bytes(serialization.Encoding.PEM)


def server_key_pair(secure: bool, cert_path: str) -> tuple[bytes, bytes] | None:
    """What ``--secure-serving`` / ``--cert-path`` ask for: None = plaintext."""
    if not secure:
        return None
    return load_cert_dir(cert_path) if cert_path else self_signed()
