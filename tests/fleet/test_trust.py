"""`inv trust-host`: a host's key reaches known_hosts only with the operator's confirmation, and a changed key is
never overwritten."""

from __future__ import annotations

import re
from pathlib import Path

from tests.simhost.fleet import Fleet, SimHost
from tests.support.invoke_cli import derived_inventory, run_inv


def _fresh_known_hosts(fleet: Fleet, tmp_path: Path) -> tuple[Path, Path]:
    """An inventory whose ssh_config points at an empty known_hosts: the first contact with sim1."""
    known = tmp_path / "known_hosts"
    config = fleet.ssh_config_path.read_text().replace(str(fleet.known_hosts_path), str(known))
    (tmp_path / "ssh_config").write_text(config)
    inventory = derived_inventory(fleet, tmp_path)
    text = inventory.read_text().replace(str(fleet.ssh_config_path), str(tmp_path / "ssh_config"))
    inventory.write_text(re.sub(r"(?m)^known_hosts:.*\n", "", text))
    return inventory, known


def test_first_contact_needs_the_verified_fingerprint(fleet: Fleet, sim_host: SimHost, tmp_path: Path) -> None:
    inventory, known = _fresh_known_hosts(fleet, tmp_path)
    r = run_inv("status", inventory=inventory)
    assert r.returncode == 1 and "not in known_hosts" in r.stderr
    r = run_inv("trust-host", "--host", "sim1", inventory=inventory)  # no terminal, no fingerprint: nothing written
    assert r.returncode == 2
    shown = re.search(r"SHA256:[A-Za-z0-9+/]+", r.stdout + r.stderr)
    assert shown and not known.exists()
    r = run_inv("trust-host", "--host", "sim1", "--fingerprint", "SHA256:AAAAwrongAAAA", inventory=inventory)
    assert r.returncode == 2 and "nothing was written" in r.stderr and not known.exists()
    r = run_inv("trust-host", "--host", "sim1", "--fingerprint", shown.group(0), inventory=inventory)
    assert r.returncode == 0, r.stderr
    assert known.read_text().startswith("sim1 ssh-ed25519 ")
    assert run_inv("gpus", inventory=inventory).returncode == 0  # the host is reached now
    r = run_inv("trust-host", "--host", "sim1", "--fingerprint", shown.group(0), inventory=inventory)
    assert r.returncode == 0 and "already trusted" in r.stdout
    assert len(known.read_text().splitlines()) == 1


def test_a_changed_key_is_never_overwritten(fleet: Fleet, sim_host: SimHost, tmp_path: Path) -> None:
    inventory, known = _fresh_known_hosts(fleet, tmp_path)
    known.write_text(fleet.known_hosts_path.read_text())
    sim_host.rotate_host_key()
    before = known.read_text()
    r = run_inv("trust-host", "--host", "sim1", inventory=inventory)
    assert r.returncode == 1 and "DIFFERENT key" in r.stderr
    assert known.read_text() == before


def test_several_hosts_show_every_fingerprint_then_ask_once(fleet: Fleet, sim_hosts: dict[str, SimHost],
                                                            tmp_path: Path) -> None:
    """Issue 40, point 6: trust-host took one host at a time. Several (`sim1,sim2`, as a group or `all` selects
    them): every fingerprint first, then one question for the new keys; no answer (no terminal), or a fingerprint
    that is not one given: nothing written."""
    from fabfile.commands.trust import trust_host
    from fabfile.errors import FlagError
    from fabfile.inventory import hosts as inventory_hosts

    inventory, known = _fresh_known_hosts(fleet, tmp_path)
    r = run_inv("trust-host", "--host", "sim1,sim2", inventory=inventory)  # no terminal to answer
    assert r.returncode == 2 and "2 new fingerprint(s)" in r.stderr and not known.exists(), r.stderr
    offered = dict(re.findall(r"^(sim\d) \(\S+\) offers a \S+ key: (SHA256:\S+)$", r.stdout, re.M))
    assert sorted(offered) == ["sim1", "sim2"], r.stdout
    r = run_inv("trust-host", "--host", "sim1,sim2", "--fingerprint", offered["sim1"], inventory=inventory)
    assert r.returncode == 2 and f"sim2 offers {offered['sim2']}, not among those given" in r.stderr
    assert not known.exists()  # not even sim1's: all or none
    asked: list[int] = []
    inv = inventory_hosts.load(inventory)
    trust_host(inv, "sim1,sim2", None, lambda n: asked.append(n) is None)  # answers yes, once
    assert asked == [2] and sorted(ln.split()[0] for ln in known.read_text().splitlines()) == ["sim1", "sim2"]
    r = run_inv("trust-host", "--host", "sim1,sim2", inventory=inventory)
    assert r.returncode == 0 and r.stdout.count("already trusted in") == 2, r.stdout
    with_one = ",".join(offered.values())
    assert run_inv("trust-host", "--host", "sim1,sim2", "--fingerprint", with_one, inventory=inventory).returncode == 0
    try:
        trust_host(inv, "sim1", "SHA256:wrong", lambda n: True)
    except FlagError as e:  # one host: the sentence it always said
        assert "nothing was written" in e.message
