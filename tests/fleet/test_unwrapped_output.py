"""Issue 40, point 1, on a simulated host: `inv deploy | grep` gets the tunnel line and the deploy id whole beside a
terminal of 80 or 200 columns (and `inv gpus | grep` each GPU's one line), and `inv profile` on such a terminal
names each figure's source whole (folded into its column it read `SGLang` / `meta_info: Σ` / `completion_tok`)."""

from __future__ import annotations

from pathlib import Path

from tests.simhost.fleet import Fleet, SimHost
from tests.support.invoke_cli import derived_inventory, run_inv
from tests.support.terminal import WIDTHS, run_on_terminal


def test_deploy_piped_and_profile_on_a_terminal_keep_commands_ids_and_sources_whole(fleet: Fleet, sim_host: SimHost,
                                                                                   tmp_path: Path) -> None:
    inv = derived_inventory(fleet, tmp_path, hosts={sim_host.name: {"tp": 8, "gpus": 8}})  # 8 ranks
    for columns in WIDTHS:
        code, piped, shown = run_on_terminal("deploy", "--steps", "3", "--measure", columns=columns, inventory=inv,
                                             stdout_tty=False)
        assert code == 0, shown
        tunnel = [ln for ln in piped.splitlines() if "ssh -F" in ln]
        assert len(tunnel) == 1 and tunnel[0].rstrip().endswith("then http://127.0.0.1:8000"), piped
        assert f" {sim_host.name}  then" in tunnel[0], tunnel  # the host alias on the same line as `ssh -F`
        ids = [ln for ln in piped.splitlines() if "deploy id:" in ln]
        assert len(ids) == 1 and ids[0].split("deploy id: ")[1].split()[0].count("-") == 1, piped
        code, shown, _ = run_on_terminal("profile", "--num-prompts", "4", "--output-len", "16", columns=columns,
                                         inventory=inv)
        assert code == 0, shown
        assert "meta_info: Σ completion_tokens / Σ spec_verify_ct" in shown, shown
        assert "ranks 0–7 agree within" in shown and shown.count("\nverify ") == 1, shown  # one table, 8 ranks
        assert "SGLang device timer" in shown and all(len(ln) <= columns for ln in shown.splitlines()
                                                       if ln.startswith(("draft", "verify", "cycle"))), shown
        # `inv gpus | grep H200`: each GPU on one line, its holder beside it (point 8: it printed two lines each)
        code, piped, _ = run_on_terminal("gpus", columns=columns, inventory=inv, stdout_tty=False)
        gpus = [ln for ln in piped.splitlines() if "NVIDIA H200" in ln]
        assert code == 0 and len(gpus) == 8, piped
        assert all(f"sglang::scheduler_TP{i}" in ln for i, ln in enumerate(gpus)), piped
    code, shown, _ = run_on_terminal("profile", "--num-prompts", "4", "--output-len", "16", "--verbose", columns=80,
                                     inventory=inv)
    assert code == 0 and shown.count("\nverify ") == 8 and "agree within" not in shown, shown
    run_inv("stop", inventory=inv)
