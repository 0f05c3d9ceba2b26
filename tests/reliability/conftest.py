"""Fixtures of the reliability tests: the throwaway PostgreSQL of the integration tests, two stores on one database
(SQLite and PostgreSQL), and a private CA."""

from __future__ import annotations

import datetime
import ipaddress
import ssl
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from planner.store.database import Store
from tests.fake_pulsar import FakePulsar
from tests.integration.conftest import postgres_server, postgres_url  # noqa: F401 - fixtures used by name


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.integration)])
def database_url(request, tmp_path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'planner.db'}"
    return request.getfixturevalue("postgres_url")


@pytest.fixture
def stores(database_url) -> Iterator[tuple[Store, Store]]:
    """Two stores on one database, with their own engines and connections, as two processes have."""
    first = Store(database_url)
    second = Store(database_url, migrate=False)
    yield first, second
    first.dispose()
    second.dispose()


@dataclass(frozen=True)
class PrivateCa:
    """A self-signed CA and a certificate it signed for 127.0.0.1 (and localhost), as PEM files."""

    ca_file: Path
    server_cert: Path
    server_key: Path

    def server_context(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.server_cert, self.server_key)
        return context


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


@pytest.fixture(scope="session")
def private_ca(tmp_path_factory: pytest.TempPathFactory) -> PrivateCa:
    directory = tmp_path_factory.mktemp("private-ca")
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(_name("pulsar-rebalance test CA"))
        .issuer_name(_name("pulsar-rebalance test CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    server_key = ec.generate_private_key(ec.SECP256R1())
    server_cert = (
        x509.CertificateBuilder()
        .subject_name(_name("127.0.0.1"))
        .issuer_name(ca_cert.subject)
        .public_key(server_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    ca_file = directory / "ca.pem"
    ca_file.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    cert_file = directory / "server.pem"
    cert_file.write_bytes(server_cert.public_bytes(serialization.Encoding.PEM))
    key_file = directory / "server-key.pem"
    key_file.write_bytes(
        server_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return PrivateCa(ca_file, cert_file, key_file)


@pytest.fixture
def tls_fake(private_ca: PrivateCa) -> Iterator[FakePulsar]:
    """The fake admin API over HTTPS with a certificate from the private CA."""
    server = FakePulsar(ssl_context=private_ca.server_context())
    yield server
    server.close()
