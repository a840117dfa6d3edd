"""SSH connection policy on simulated hosts: which failures are retried, and what the user reads when connecting
fails."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import paramiko
import pytest

from tests.simhost.fleet import Fleet, SimHost
from tests.support.invoke_cli import INV, ROOT, derived_inventory, run_inv


def test_refused_key_is_an_auth_error_not_retried(fleet: Fleet, sim_host: SimHost, tmp_path: Path) -> None:
    other_key = tmp_path / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other_key)], check=True)
    config = fleet.ssh_config_path.read_text().replace(str(fleet.client_key_path), str(other_key))
    (tmp_path / "ssh_config").write_text(config)
    inventory = derived_inventory(fleet, tmp_path)
    inventory.write_text(inventory.read_text().replace(str(fleet.ssh_config_path), str(tmp_path / "ssh_config")))
    r = run_inv("status", inventory=inventory)
    assert r.returncode == 1
    assert "authentication" in r.stderr.lower() and "IdentityFile" in r.stderr
    # not retried: the tool says "cannot connect yet (...); retrying for up to N s" before any retry (a count, not
    # a stopwatch: a loaded machine makes one attempt slow, never a second one appear)
    assert "retrying" not in r.stderr, r.stderr


def test_unresolvable_alias_fails_at_once_with_a_sentence(fleet: Fleet, sim_host: SimHost, tmp_path: Path) -> None:
    inventory = derived_inventory(fleet, tmp_path, hosts={"sim1": {"ssh_host": "no-such-alias.invalid"}})
    r = run_inv("status", "--host", "sim1", inventory=inventory)
    assert r.returncode == 1
    assert "cannot resolve" in r.stderr and "no-such-alias.invalid" in r.stderr and "Traceback" not in r.stderr
    # not retried: the tool says "cannot connect yet (...); retrying for up to N s" before any retry (a count, not
    # a stopwatch: a loaded machine makes one attempt slow, never a second one appear)
    assert "retrying" not in r.stderr, r.stderr


def test_transient_network_failure_is_retried_until_the_host_answers(fleet: Fleet, sim_host: SimHost,
                                                                      tmp_path: Path) -> None:
    """The host's network is down when the command starts and comes back 1.5 s later: the connect is retried
    with backoff and the command succeeds, once the host answers."""
    if fleet.mode != "netns":
        pytest.skip("needs netns mode (root)")
    inventory = derived_inventory(fleet, tmp_path)
    ns = sim_host.netns
    subprocess.run(["ip", "netns", "exec", ns, "ip", "link", "set", "lo", "down"], check=True)
    try:
        proc = subprocess.Popen([*INV, "gpus", "--inventory", str(inventory)], cwd=ROOT, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
        time.sleep(1.5)
    finally:
        subprocess.run(["ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up"], check=True)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "sim1" in out


def test_the_first_channel_does_not_wait_for_a_delayed_ack(fleet: Fleet, sim_host: SimHost) -> None:
    """OpenSSH's post-login hostkeys-00 request asks no reply; the transport answers it with one SSH_MSG_IGNORE, so
    the ACK that releases sshd's (Nagle-held) answer to our first channel open goes out at once instead of after the
    receiver's delayed-ACK timer (~40 ms a connection; the figure is in bench/cli_speed.py). Host keys are still
    verified: the connection is the hardened one."""
    from fabfile.inventory import hosts as inventory
    from fabfile.transport.ssh import SSHTransport, _NudgingTransport

    inv = inventory.load(fleet.inventory_path)
    h = inv.hosts["sim1"]
    t = SSHTransport(h.name, h.ssh_host, ssh_config=inv.ssh_config, known_hosts=inv.known_hosts,
                     timeouts=h.timeouts)
    try:
        assert t.run("echo ok", 30).stdout.strip() == "ok"
        raw = t.cxn.transport
        assert isinstance(raw, _NudgingTransport) and raw._nudged  # the server's request came, and was answered
        assert isinstance(t.cxn.client._policy, paramiko.RejectPolicy)
    finally:
        t.close()
