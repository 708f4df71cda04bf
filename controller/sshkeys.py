"""SSH key pairs for MPIJobs: ECDSA P-521, as the Kubeflow MPI Operator makes them.

Randomness is I/O of a sort, so it lives here and is handed to the pure planner as `keygen`.
"""

from __future__ import annotations

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from reconcilers.types import SSHKey


def generate() -> SSHKey:
    key = ec.generate_private_key(ec.SECP521R1())
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    ).decode()
    public = key.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    ).decode()
    return SSHKey(private_pem=private, public_openssh=public + "\n")
