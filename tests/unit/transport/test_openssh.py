"""The OpenSSH carrier of read-only commands: where its control sockets live, what it checks host keys against, and
when it gives way to Paramiko. Real `ssh` throughout (`ssh -G` resolves a real ssh_config; a refused port is a real
refusal); no sshd is needed here (tests/fleet/test_ssh.py runs the carrier against one)."""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

import pytest

from fabfile.errors import ConnectError
from fabfile.inventory.values import Timeouts
from fabfile.transport import openssh


def _config(tmp_path: Path, *lines: str) -> Path:
    cfg = tmp_path / "ssh_config"
    cfg.write_text("Host gpu1\n  HostName 127.0.0.1\n" + "".join(f"  {line}\n" for line in lines))
    return cfg


def _effective(t: openssh.OpenSSHTransport, alias: str = "gpu1") -> dict[str, str]:
    """What ssh itself makes of the carrier's command line (`ssh -G` with the same options)."""
    import subprocess

    out = subprocess.run([*t.argv, "-G", alias], capture_output=True, text=True, check=True).stdout
    return {k: v for k, _, v in (line.partition(" ") for line in out.splitlines())}


def test_control_sockets_live_in_a_private_directory_of_the_runtime_dir(control_sockets: Path) -> None:
    d = openssh.control_dir()
    assert d == control_sockets
    st = os.lstat(d)
    assert stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and stat.S_IMODE(st.st_mode) == 0o700


def test_without_a_runtime_dir_the_sockets_go_under_the_users_cache(monkeypatch: pytest.MonkeyPatch,
                                                                    tmp_path: Path) -> None:
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    d = openssh.control_dir()
    assert d == tmp_path / ".cache" / "specdeploy" / "ssh"
    assert stat.S_IMODE(os.lstat(d).st_mode) == 0o700


def test_a_directory_others_can_reach_is_never_used(control_sockets: Path, tmp_path: Path) -> None:
    """A looser directory is neither used nor tightened (a socket another account put there could pose as our
    master): the command goes over Paramiko instead."""
    assert openssh.control_dir() is not None
    control_sockets.chmod(0o777)
    assert openssh.control_dir() is None
    assert openssh.open_openssh("gpu1", "gpu1", ssh_config=_config(tmp_path), known_hosts=None,
                                timeouts=Timeouts()) is None


def test_host_keys_are_checked_strictly_against_the_files_paramiko_trusts(tmp_path: Path) -> None:
    """Whatever the ssh_config says (accept-new here), the command line wins: strict checking, exactly the
    files the Paramiko path loads, no global file, no prompt, the socket in the private directory."""
    own = tmp_path / "own_known_hosts"
    extra = tmp_path / "inventory_known_hosts"
    cfg = _config(tmp_path, "StrictHostKeyChecking accept-new", f"UserKnownHostsFile {own}",
                  "GlobalKnownHostsFile /etc/ssh/ssh_known_hosts", "BatchMode no", "UpdateHostKeys yes")
    t = openssh.open_openssh("gpu1", "gpu1", ssh_config=cfg, known_hosts=extra, timeouts=Timeouts(connect=7))
    assert t is not None
    got = _effective(t)
    assert got["stricthostkeychecking"] == "true"  # -G's word for "yes"; accept-new reads "accept-new"
    assert got["userknownhostsfile"].split() == [os.path.expanduser("~/.ssh/known_hosts"), str(own), str(extra)]
    assert got["globalknownhostsfile"] == "/dev/null"
    assert got["batchmode"] == "yes" and got["updatehostkeys"] == "false"
    assert got["verifyhostkeydns"] == "false" and got["connecttimeout"] == "7"
    assert got["controlmaster"] == "auto" and got["controlpersist"] == str(openssh.CONTROL_PERSIST_S)
    assert Path(got["controlpath"]).parent == openssh.control_dir()


def test_an_alias_without_known_hosts_files_trusts_only_the_users_own(tmp_path: Path) -> None:
    """ssh -G prints OpenSSH's default pair when the ssh_config names none; Paramiko reads only the first."""
    t = openssh.open_openssh("gpu1", "gpu1", ssh_config=_config(tmp_path), known_hosts=None, timeouts=Timeouts())
    assert t is not None
    assert _effective(t)["userknownhostsfile"].split() == [os.path.expanduser("~/.ssh/known_hosts")]


def test_two_inventories_never_share_a_connection(tmp_path: Path) -> None:
    """Same host, port and user (the same %C), another trust store: another socket."""
    cfg = _config(tmp_path)
    a = openssh.open_openssh("gpu1", "gpu1", ssh_config=cfg, known_hosts=None, timeouts=Timeouts())
    b = openssh.open_openssh("gpu1", "gpu1", ssh_config=cfg, known_hosts=tmp_path / "kh", timeouts=Timeouts())
    assert a is not None and b is not None
    assert _effective(a)["controlpath"] != _effective(b)["controlpath"]


@pytest.mark.parametrize("why", ["no ssh binary", "ProxyJump", "path too long", "bad ssh_config"])
def test_where_openssh_cannot_carry_the_command_paramiko_does(why: str, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = _config(tmp_path)
    if why == "no ssh binary":
        monkeypatch.setenv("PATH", str(tmp_path))
    elif why == "ProxyJump":
        cfg = _config(tmp_path, "ProxyJump bastion")
    elif why == "path too long":
        deep = tmp_path / ("d" * 60)
        deep.mkdir(mode=0o700)
        monkeypatch.setenv("XDG_RUNTIME_DIR", str(deep))
    else:
        cfg = _config(tmp_path, "NoSuchOption yes")
    assert openssh.open_openssh("gpu1", "gpu1", ssh_config=cfg, known_hosts=None, timeouts=Timeouts()) is None


def test_a_refused_port_is_handed_to_paramiko_which_retries_and_words_it(tmp_path: Path) -> None:
    """A failure of the network's (here a refused port, for real) goes to the Paramiko path, whose retries and
    sentences hold as before (tests/fleet/test_observed_state.py: a dead ProxyCommand in its own words)."""
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = _config(tmp_path, f"Port {port}", "User nobody")
    t = openssh.open_openssh("gpu1", "gpu1", ssh_config=cfg, known_hosts=None,
                             timeouts=Timeouts(connect_refused=0.01))
    assert t is not None
    with pytest.raises(ConnectError) as e:
        t.run("true", 30)
    assert "could not reach gpu1" in e.value.message
    assert t.stats.commands == 1 and t.held is not None  # one ssh attempt, then Paramiko's
    assert list(openssh.control_dir().iterdir()) == []  # type: ignore[union-attr]
