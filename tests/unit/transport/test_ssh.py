"""SSH connection policy: only transient failures are retried."""

from __future__ import annotations

import paramiko
from paramiko.ssh_exception import AuthenticationException, BadHostKeyException, NoValidConnectionsError, SSHException

from fabfile.transport.ssh import _transient


def test_only_transient_failures_are_retried() -> None:
    # paramiko generates RSA, DSS and ECDSA keys, not Ed25519: any key will do for a host-key mismatch.
    key = paramiko.ECDSAKey.generate()
    assert _transient(NoValidConnectionsError({("127.0.0.1", 22): OSError("refused")}))
    assert _transient(TimeoutError())
    assert _transient(EOFError())
    assert _transient(SSHException("Error reading SSH protocol banner"))
    assert not _transient(AuthenticationException("nope"))
    assert not _transient(SSHException("Server 'gpu1' not found in known_hosts"))
    assert not _transient(BadHostKeyException("gpu1", key, key))
