"""Every input error of a run is said at once, one line each naming its field, then exit 2 with nothing touched:
only the first one was (a file with four mistakes took four runs to fix). In-process, no host: a refusal never
gets as far as one."""

from __future__ import annotations

from pathlib import Path

from tests.support.cli import run_cli

BASE = "defaults:\n  python: /opt/venv/bin/python3\n  model: /models/m\nhosts:\n"


def _file(tmp_path: Path, hosts: str) -> Path:
    p = tmp_path / "inventory.yaml"
    p.write_text(BASE + hosts)
    return p


def _errors(stderr: str) -> list[str]:
    return [ln.removeprefix("error: ") for ln in stderr.splitlines() if ln.startswith("error: ")]


def test_every_field_refused_by_its_own_rule_is_named_on_its_own_line(tmp_path: Path) -> None:
    p = _file(tmp_path, "  a: {ssh_host: gpu-a, tp: 4, gpus: 2, accept_gate: 99}\n"
                        "  b: {ssh_host: gpu-b, model: models/rel, timeouts: {silence: 1}}\n")
    r = run_cli("render", "--host", "all", inventory=p)
    assert r.returncode == 2 and r.stdout == "", r.stdout
    said = _errors(r.stderr)
    fields = ["hosts.a.tp:", "hosts.a.accept_gate:", "hosts.b.model:", "hosts.b.timeouts.silence:"]
    assert [next(f for f in fields if f in ln) for ln in said] == fields, r.stderr
    assert all(ln.startswith(f"{p}: ") for ln in said)
    assert "4 input errors; nothing was touched on any host" in r.stderr


def test_every_field_the_schema_refuses_is_named_and_a_union_says_it_once(tmp_path: Path) -> None:
    p = _file(tmp_path, "  a: {ssh_host: gpu-a, tp: x, bogus: 1}\n  b: {ssh_host: gpu-b, port: y}\n"
                        "groups:\n  g: {hosts: a, zz: 1}\n")
    r = run_cli("render", "--host", "all", inventory=p)
    assert r.returncode == 2
    said = _errors(r.stderr)
    for field in ("hosts.a.tp:", "hosts.a.bogus: unknown field", "hosts.b.port:", "groups.g.GroupFields.hosts:",
                  "groups.g.GroupFields.zz: unknown field"):
        assert sum(field in ln for ln in said) == 1, (field, r.stderr)
    assert not any("list[str]" in ln for ln in said), r.stderr  # the union's other branch: the same value again
    assert len(said) == 5, r.stderr


def test_bad_flags_and_a_bad_inventory_are_said_together(tmp_path: Path) -> None:
    p = _file(tmp_path, "  a: {ssh_host: gpu-a, tp: 4, gpus: 2}\n")
    r = run_cli("deploy", "--steps", "-1", "--topk", "0", "--strategy", "bogus", inventory=p)
    assert r.returncode == 2
    said = _errors(r.stderr)
    assert [ln.split(":")[0] if ln.startswith("--") else "hosts.a.tp" for ln in said] == [
        "hosts.a.tp", "--steps", "--topk", "--strategy"], r.stderr
    assert "hosts.a.tp:" in said[0]


def test_every_nccl_value_refused_on_every_host_is_named(tmp_path: Path) -> None:
    """Lower-case names (NCCL never reads them) and NCCL_NTHREADS outside NCCL's documented values are refused, with
    a level in the wrong case on another host, all in one run."""
    p = _file(tmp_path, "  c: {ssh_host: gpu-c, gpus: 2, env: {nccl_p2p_level: SYS, NCCL_NTHREADS: '100'}}\n"
                        "  d: {ssh_host: gpu-d, gpus: 2, nccl_env: {NCCL_P2P_LEVEL: sys}}\n")
    r = run_cli("render", "--host", "c,d", inventory=p)
    assert r.returncode == 2 and r.stdout == ""
    said = _errors(r.stderr)
    assert len(said) == 3, r.stderr
    assert said[0].startswith("c: env.nccl_p2p_level is not a variable NCCL reads") and "NCCL_P2P_LEVEL" in said[0]
    assert said[1].startswith("c: env.NCCL_NTHREADS='100' is not one of NCCL's documented values (64, 128, 256, 512)")
    assert said[2].startswith("d: nccl_env.NCCL_P2P_LEVEL='sys' is not a level NCCL knows: write SYS")
    r = run_cli("render", "--host", "c,d", "--json", inventory=p)
    assert r.returncode == 2 and r.stdout == ""  # nothing half-rendered


def test_one_error_stays_one_line_as_before(tmp_path: Path) -> None:
    p = _file(tmp_path, "  a: {ssh_host: gpu-a, tp: 4, gpus: 2}\n")
    r = run_cli("render", inventory=p)
    assert r.returncode == 2 and len(_errors(r.stderr)) == 1 and "input errors" not in r.stderr, r.stderr


def test_every_bad_flag_of_a_sweep_is_said_at_once(tmp_path: Path) -> None:
    """A sweep has the most flags of any command; each was its own run to find."""
    p = _file(tmp_path, "  a: {ssh_host: gpu-a}\n")
    r = run_cli("sweep", "--steps", "x", "--concurrency", "0", "--num-prompts", "-3", "--max-ttft-ms", "nan",
                "--topk", "0", "--predict", "--adaptive", inventory=p)
    assert r.returncode == 2 and r.stdout == "", r.stdout
    said = _errors(r.stderr)
    flags = ["--max-ttft-ms:", "--steps:", "--concurrency:", "--num-prompts:", "--topk:", "--adaptive:"]
    assert [next(f for f in flags if ln.startswith(f)) for ln in said] == flags, r.stderr
    assert f"{len(flags)} input errors; nothing was touched on any host" in r.stderr
