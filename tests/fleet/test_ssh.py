"""SSH connection policy on simulated hosts: which failures are retried, and what the user reads when connecting
fails."""

from __future__ import annotations

import os
import stat
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


def test_closing_a_session_whose_proxy_died_is_quiet_and_lets_the_proxy_go(fleet: Fleet, sim_host: SimHost) -> None:
    """Ctrl-C reaches the whole process group, the ProxyCommand too: it dies while the session still counts as
    open. Closing the session then says goodbye over a dead pipe; that must not replace the Ctrl-C being handled
    with a paramiko traceback (it did: ProxyCommandFailure from the SFTP channel's close, and `inv tune` never
    re-deployed its best configuration)."""
    if fleet.mode != "netns":
        pytest.skip("needs netns mode (root): only there is the host reached through a ProxyCommand")
    import signal

    from fabfile.inventory import hosts as inventory
    from fabfile.transport.proxy import WatchedProxyCommand
    from fabfile.transport.ssh import SSHTransport

    inv = inventory.load(fleet.inventory_path)
    h = inv.hosts["sim1"]
    t = SSHTransport(h.name, h.ssh_host, ssh_config=inv.ssh_config, known_hosts=inv.known_hosts,
                     timeouts=h.timeouts)
    t.put(b"x", "~/proxy-dies.txt")  # the SFTP channel is open: its close is the goodbye that fails
    proxy = t.cxn.transport.sock
    assert isinstance(proxy, WatchedProxyCommand)
    # Hold a writer of the proxy's stdout so the transport's reader thread sees no end of file: the close below
    # runs, as after a Ctrl-C, before the reader has noticed the death (the race that made this show 2 runs in 6).
    held = os.open(f"/proc/{proxy.process.pid}/fd/1", os.O_WRONLY)
    try:
        proxy.process.send_signal(signal.SIGINT)
        proxy.process.wait(timeout=10)
        t.close()
    finally:
        os.close(held)
    assert t.cxn is None
    # And the next session (the restore after a Ctrl-C) connects afresh.
    t2 = SSHTransport(h.name, h.ssh_host, ssh_config=inv.ssh_config, known_hosts=inv.known_hosts,
                      timeouts=h.timeouts)
    try:
        assert t2.run("echo ok", 30).stdout.strip() == "ok"
    finally:
        t2.close()


# -- read-only commands over OpenSSH's client (fabfile/transport/openssh.py) ------------------------------------
# what changes between two runs a second apart, whatever carries them
VOLATILE = {"uptime_s", "gathered_at", "latency_s"}


def _steady(x: object) -> object:
    if isinstance(x, dict):
        return {k: _steady(v) for k, v in x.items() if k not in VOLATILE}
    if isinstance(x, list):
        return [_steady(v) for v in x]
    return x


def _carriers(fleet: Fleet, tmp_path: Path) -> tuple[Path, Path]:
    """The fleet's inventory as it is (read-only commands over OpenSSH, the default), and with `ssh_client:
    paramiko` (every command over Paramiko, as before)."""
    openssh = derived_inventory(fleet, tmp_path, name="openssh.yaml")
    paramiko_ = derived_inventory(fleet, tmp_path, defaults={"ssh_client": "paramiko"}, name="paramiko.yaml")
    return openssh, paramiko_


def test_read_only_commands_answer_the_same_over_either_client(fleet: Fleet, sim_host: SimHost, tmp_path: Path,
                                                               control_sockets: Path) -> None:
    """status, check-env and gpus of a running deploy: the same documents and the same tables over the reused
    OpenSSH connection as over Paramiko (their timestamps aside), and the inventory's `ssh_client: paramiko` is
    what the fallback takes: no control socket."""
    from tests.support.invoke_cli import inv_json

    openssh, paramiko_ = _carriers(fleet, tmp_path)
    assert run_inv("deploy", "--steps", "3", inventory=paramiko_).returncode == 0
    commands = ("status", "check-env", "gpus")
    over_p = {c: inv_json(c, inventory=paramiko_)[:2] for c in commands}
    assert not control_sockets.exists() or list(control_sockets.iterdir()) == []
    for command in commands:
        code_o, doc_o, _ = inv_json(command, inventory=openssh)
        code_p, doc_p = over_p[command]
        assert (code_o, _steady(doc_o)) == (code_p, _steady(doc_p)), command
    assert len(list(control_sockets.iterdir())) == 1  # they came over the OpenSSH master
    for command in ("check-env", "gpus"):
        over_p, over_o = run_inv(command, inventory=paramiko_), run_inv(command, inventory=openssh)
        assert (over_o.returncode, over_o.stdout, over_o.stderr) == \
            (over_p.returncode, over_p.stdout, over_p.stderr), command
    logs_p, logs_o = (run_inv("logs", "--lines", "20", inventory=i) for i in (paramiko_, openssh))
    assert logs_o.returncode == logs_p.returncode == 0 and "ready to roll" in logs_o.stdout
    assert logs_o.stdout.splitlines()[:5] == logs_p.stdout.splitlines()[:5]  # the log grows with every /ready


def test_one_connection_is_reused_across_commands_from_a_private_socket(fleet: Fleet, sim_host: SimHost,
                                                                        tmp_path: Path,
                                                                        control_sockets: Path) -> None:
    from tests.support.invoke_cli import ssh_logins

    openssh, _ = _carriers(fleet, tmp_path)
    before = ssh_logins(sim_host)
    for _ in range(3):
        assert run_inv("status", inventory=openssh).returncode == 1  # nothing deployed: exit 1, but it answered
    assert ssh_logins(sim_host) - before == 1  # three commands, one login: the master's
    assert stat.S_IMODE(os.lstat(control_sockets).st_mode) == 0o700
    (sock,) = control_sockets.iterdir()
    assert stat.S_ISSOCK(os.lstat(sock).st_mode) and not os.lstat(sock).st_mode & 0o077
    check = subprocess.run(["ssh", "-o", f"ControlPath={sock}", "-O", "check", "sim1"], capture_output=True,
                           text=True, stdin=subprocess.DEVNULL)
    assert check.returncode == 0 and "Master running" in check.stderr


def test_a_changed_host_key_is_refused_over_openssh_in_paramikos_words(fleet: Fleet, sim_host: SimHost,
                                                                       tmp_path: Path,
                                                                       control_sockets: Path) -> None:
    openssh, paramiko_ = _carriers(fleet, tmp_path)
    sim_host.rotate_host_key()
    over_p = run_inv("status", inventory=paramiko_)
    over_o = run_inv("status", inventory=openssh)
    assert over_o.returncode == over_p.returncode == 1
    assert "does not match known_hosts: expected " in over_o.stderr and "retrying" not in over_o.stderr
    assert over_o.stderr == over_p.stderr  # the sentence, both fingerprints and the hint, word for word
    assert list(control_sockets.iterdir()) == []  # nothing was opened to reuse
    assert run_inv("check-env", inventory=openssh).stderr == run_inv("check-env", inventory=paramiko_).stderr
