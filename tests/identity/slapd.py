"""A real OpenLDAP server (Debian's slapd) for the directory tests: its own temp directory, a
free port, a CA and a server certificate for StartTLS, the directory of ``directory.ldif``
loaded with ldap-utils' ``ldapadd``. Started once per test session (tests/identity/conftest.py).
"""

from __future__ import annotations

import datetime
import ipaddress
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
SLAPD = Path("/usr/sbin/slapd")
BASE = "dc=example,dc=com"
ADMIN_DN = f"cn=admin,{BASE}"
ADMIN_PASSWORD = "admin-secret"
SERVICE_DN = f"cn=cardpool,ou=services,{BASE}"
SERVICE_PASSWORD = "service-secret"
PEOPLE = f"ou=people,{BASE}"
GROUPS = f"ou=groups,{BASE}"

CONFIG = """\
include /etc/ldap/schema/core.schema
include /etc/ldap/schema/cosine.schema
include /etc/ldap/schema/nis.schema
include /etc/ldap/schema/inetorgperson.schema
modulepath /usr/lib/ldap
moduleload back_mdb
moduleload ppolicy
pidfile {dir}/slapd.pid
argsfile {dir}/slapd.args
TLSCACertificateFile {dir}/ca.pem
TLSCertificateFile {dir}/server.pem
TLSCertificateKeyFile {dir}/server.key
database mdb
maxsize 16777216
suffix "{base}"
rootdn "{admin}"
rootpw {admin_password}
directory {dir}/data
overlay ppolicy
ppolicy_default "cn=default,ou=policies,{base}"
access to attrs=userPassword by self write by anonymous auth by * none
access to * by dn.exact="{service}" read by self read by * none
"""


def missing() -> str | None:
    """Why slapd cannot run here, or None."""
    if not SLAPD.exists():
        return "needs Debian's slapd (apt-get install slapd ldap-utils; .ci/run installs it)"
    if shutil.which("ldapadd") is None:
        return "needs ldap-utils' ldapadd (apt-get install ldap-utils; .ci/run installs it)"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _certificates(directory: Path) -> None:
    """A CA and a server certificate for 127.0.0.1 / localhost, signed by it."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "cardpool test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    (directory / "ca.pem").write_bytes(ca.public_bytes(pem))
    (directory / "server.pem").write_bytes(cert.public_bytes(pem))
    (directory / "server.key").write_bytes(
        key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )


@dataclass
class Slapd:
    """A running slapd: where it listens and how to change its directory."""

    directory: Path
    port: int
    process: subprocess.Popen

    @property
    def url(self) -> str:
        return f"ldap://127.0.0.1:{self.port}"

    @property
    def ca_file(self) -> str:
        return str(self.directory / "ca.pem")

    def admin(self):
        """An ldap3 connection bound as the directory's administrator."""
        import ldap3

        return ldap3.Connection(
            ldap3.Server(self.url), ADMIN_DN, ADMIN_PASSWORD, auto_bind=True, raise_exceptions=True
        )

    def modify(self, dn: str, changes: dict) -> None:
        with self.admin() as conn:
            conn.modify(dn, changes)

    def add(self, dn: str, object_class, attributes: dict) -> None:
        with self.admin() as conn:
            conn.add(dn, object_class, attributes)

    def delete(self, dn: str) -> None:
        with self.admin() as conn:
            conn.delete(dn)

    def reload(self) -> None:
        """Back to directory.ldif: everything under the base removed and loaded again."""
        import ldap3

        with self.admin() as conn:
            conn.search(BASE, "(objectClass=*)", ldap3.SUBTREE, attributes=[])
            for dn in sorted((e.entry_dn for e in conn.entries), key=len, reverse=True):
                conn.delete(dn)
        self._load()

    def _load(self) -> None:
        subprocess.run(
            ["ldapadd", "-x", "-H", self.url, "-D", ADMIN_DN, "-w", ADMIN_PASSWORD, "-f"]
            + [str(HERE / "directory.ldif")],
            check=True,
            capture_output=True,
        )

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


def start(directory: Path) -> Slapd:
    """Start slapd in *directory* on a free port with the test directory loaded."""
    (directory / "data").mkdir(parents=True)
    _certificates(directory)
    config = directory / "slapd.conf"
    config.write_text(
        CONFIG.format(
            dir=directory,
            base=BASE,
            admin=ADMIN_DN,
            admin_password=ADMIN_PASSWORD,
            service=SERVICE_DN,
        )
    )
    port = _free_port()
    log = open(directory / "slapd.log", "w")  # noqa: SIM115 - kept open for the process
    process = subprocess.Popen(
        [str(SLAPD), "-d", "0", "-f", str(config), "-h", f"ldap://127.0.0.1:{port}/"],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    server = Slapd(directory=directory, port=port, process=process)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError("slapd died on start:\n" + (directory / "slapd.log").read_text())
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.05)
    else:
        server.stop()
        raise RuntimeError("slapd did not listen within 20 s")
    server._load()
    return server
