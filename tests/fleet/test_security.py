"""Another local user on a GPU host gets neither code execution nor secrets through the tool.

Each test plays that user on a simulated host: an unprivileged account (``nobody``, through ``setpriv`` inside the
host's namespaces) plants files in the log and state directories, polls ``/proc/*/cmdline`` during a deploy and
reads what it can, while the operator (root on the host, over real SSH) runs the tool as usual."""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
import threading
from pathlib import Path

import pytest
import yaml

from fabfile.transport.agentclient import bundle
from tests.simhost.fleet import Fleet, SimHost
from tests.support.invoke_cli import derived_inventory, inv_host_json, inv_json, run_inv, sglang_pids

NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
MARKER = "/tmp/pwned"


def as_nobody(host: SimHost, script: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    """Run a shell script inside the host as the unprivileged account."""
    return host.exec([*NOBODY, "/bin/sh", "-c", script], timeout=timeout)


def exists(host: SimHost, path: str) -> bool:
    return host.exec(["test", "-e", path]).returncode == 0


def planted_package(directory: str) -> str:
    """Shell that plants ``DIRECTORY/sglang/__init__.py``: Python would import it if DIRECTORY were on its path."""
    code = f"import os\\nopen(\"{MARKER}\", \"a\").write(str(os.getuid()))\\n"
    return f"mkdir -p {directory}/sglang && chmod 777 {directory} && printf '{code}' > {directory}/sglang/__init__.py"


@pytest.fixture
def inventory(fleet: Fleet, sim_host: SimHost, tmp_path: Path) -> Path:
    return derived_inventory(fleet, tmp_path)


# ---------------------------------------------------------------------------------------------- 1. log directory


def test_a_log_dir_another_user_owns_is_refused_and_nothing_runs(fleet: Fleet, sim_host: SimHost,
                                                                 tmp_path: Path) -> None:
    # The old default, /tmp/specdeploy-logs, created first by someone else with a planted `sglang` package.
    r = as_nobody(sim_host, planted_package("/tmp/specdeploy-logs"))
    assert r.returncode == 0, r.stderr
    inv = derived_inventory(fleet, tmp_path, defaults={"log_dir": "/tmp/specdeploy-logs"})
    r = run_inv("deploy", "--steps", "3", inventory=inv)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "/tmp/specdeploy-logs belongs to nobody" in r.stderr and "Traceback" not in r.stderr
    assert not exists(sim_host, MARKER)
    assert sglang_pids(sim_host) == []  # nothing started


def test_a_log_dir_others_can_write_is_refused(fleet: Fleet, sim_host: SimHost, tmp_path: Path) -> None:
    sim_host.exec("mkdir -p /srv/shared-logs && chmod 1777 /srv/shared-logs")  # ours, but anyone may add files
    inv = derived_inventory(fleet, tmp_path, defaults={"log_dir": "/srv/shared-logs"})
    r = run_inv("deploy", "--steps", "3", inventory=inv)
    assert r.returncode == 2 and "writable by other accounts" in r.stderr, r.stderr
    assert sglang_pids(sim_host) == []


def test_default_log_dir_is_private_under_home_and_python_keeps_cwd_off_its_path(fleet: Fleet, sim_host: SimHost,
                                                                                  tmp_path: Path) -> None:
    inv = derived_inventory(fleet, tmp_path)
    text = inv.read_text().replace("  log_dir: /root/sglang-logs\n", "")
    assert "log_dir" not in text
    inv.write_text(text)
    code, doc, err = inv_host_json("deploy", "--steps", "3", inventory=inv)
    assert code == 0, err
    assert doc["log_path"] == "/root/.specdeploy/logs/sglang-eagle3-s3-k1-d4.log"
    modes = sim_host.exec("stat -c '%a %U' /root/.specdeploy/logs /root/.specdeploy/logs/*.log").stdout.split("\n")
    assert modes[0] == "700 root" and modes[1] == "600 root"
    environ = sim_host.exec(f"tr '\\0' '\\n' < /proc/{doc['pid']}/environ").stdout
    assert "PYTHONSAFEPATH=1" in environ.splitlines()
    # nobody cannot read the log (SGLang writes its arguments there)
    assert as_nobody(sim_host, f"cat {doc['log_path']}").returncode != 0


def test_an_existing_log_dir_of_ours_is_tightened(fleet: Fleet, sim_host: SimHost, tmp_path: Path) -> None:
    sim_host.exec("chmod 755 /root/sglang-logs && touch /root/sglang-logs/sglang-eagle3-s3-k1-d4.log && "
                  "chmod 644 /root/sglang-logs/sglang-eagle3-s3-k1-d4.log && chmod 755 /root/.specdeploy || true")
    code, _, err = inv_host_json("deploy", "--steps", "3", inventory=derived_inventory(fleet, tmp_path))
    assert code == 0, err
    out = sim_host.exec("stat -c '%a' /root/sglang-logs /root/sglang-logs/sglang-eagle3-s3-k1-d4.log "
                        "/root/.specdeploy /root/.specdeploy/deploys").stdout.split()
    assert out == ["700", "600", "700", "700"]


def test_a_planted_log_symlink_is_never_followed(fleet: Fleet, sim_host: SimHost, tmp_path: Path) -> None:
    sim_host.exec("echo original > /root/victim.txt && "
                  "ln -s /root/victim.txt /root/sglang-logs/sglang-eagle3-s3-k1-d4.log")
    r = run_inv("deploy", "--steps", "3", inventory=derived_inventory(fleet, tmp_path))
    assert r.returncode == 2 and "symlink" in r.stderr, r.stderr
    assert sim_host.exec("cat /root/victim.txt").stdout == "original\n"
    assert sglang_pids(sim_host) == []


def test_deploy_router_refuses_a_shared_log_dir(fleet: Fleet, sim_hosts: dict[str, SimHost], tmp_path: Path) -> None:
    router_host = sim_hosts["sim1"]
    assert as_nobody(router_host, planted_package("/tmp/specdeploy-logs")).returncode == 0
    inv = derived_inventory(fleet, tmp_path, hosts={"sim2": {"listen": "0.0.0.0"},
                                                     "sim1": {"log_dir": "/tmp/specdeploy-logs"}})
    data = yaml.safe_load(inv.read_text())
    data["groups"] = {"replicas": ["sim2"]}
    data["routers"] = {"front": {"host": "sim1", "group": "replicas"}}
    inv.write_text(yaml.safe_dump(data))
    code, _, err = inv_host_json("deploy", "--host", "sim2", "--steps", "2", inventory=inv)
    assert code == 0, err
    r = run_inv("deploy-router", inventory=inv)
    assert r.returncode == 2 and "/tmp/specdeploy-logs belongs to nobody" in r.stdout + r.stderr, r.stderr
    assert not exists(router_host, MARKER)
    assert "sglang_router" not in router_host.exec("cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' '").stdout


# ---------------------------------------------------------------------------------------------- 3. state directory


def test_a_planted_agent_in_a_shared_state_dir_never_runs(fleet: Fleet, sim_host: SimHost, tmp_path: Path) -> None:
    sha16 = bundle().manifest_sha256[:16]
    d = f"/tmp/sdstate/agent/{sha16}"
    r = as_nobody(sim_host, f"mkdir -p {d} && chmod -R 777 /tmp/sdstate && "
                            f"printf 'open(\"{MARKER}\", \"a\").write(\"agent\")\\n' > {d}/__main__.py")
    assert r.returncode == 0, r.stderr
    inv = derived_inventory(fleet, tmp_path, defaults={"state_dir": "/tmp/sdstate"})
    r = run_inv("status", inventory=inv)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "/tmp/sdstate belongs to nobody" in r.stdout + r.stderr
    assert not exists(sim_host, MARKER)


def test_a_changed_agent_file_is_refused_before_it_runs(inventory: Path, sim_host: SimHost) -> None:
    code, _, err = inv_json("gpus", inventory=inventory)  # installs the agent
    assert code == 0, err
    sha16 = bundle().manifest_sha256[:16]
    sim_host.exec(f"echo 'open(\"{MARKER}\", \"a\").write(\"x\")' >> /root/.specdeploy/agent/{sha16}/"
                  "specdeploy_agent/verbs.py")
    r = run_inv("gpus", inventory=inventory)
    assert r.returncode == 2 and "differs from the file shipped" in r.stdout + r.stderr
    assert not exists(sim_host, MARKER)


def test_two_deploys_install_the_agent_at_the_same_moment(fleet: Fleet, sim_host: SimHost, tmp_path: Path) -> None:
    """A fresh host, two `inv deploy` started together: both install (or find) the agent; no traceback; the second
    waits for the first's lock and then deploys too."""
    inv = derived_inventory(fleet, tmp_path, defaults={"timeouts": {"lock_wait": 60}})
    assert not exists(sim_host, "/root/.specdeploy")
    results: list[subprocess.CompletedProcess[str]] = []
    start = threading.Barrier(2)

    def one() -> None:
        start.wait()
        results.append(run_inv("deploy", "--steps", "3", inventory=inv, timeout=180))

    threads = [threading.Thread(target=one) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for r in results:
        assert r.returncode == 0, r.stdout + r.stderr
        assert "Traceback" not in r.stderr
    sha16 = bundle().manifest_sha256[:16]
    listing = sim_host.exec("ls -a /root/.specdeploy/agent; stat -c '%a %U' /root/.specdeploy/agent/" + sha16)
    names = listing.stdout.split()
    assert sha16 in names and not [n for n in names if n.startswith((".install-", ".upload-"))], listing.stdout
    assert "700 root" in listing.stdout


def test_concurrent_installs_race_on_the_rename(fleet: Fleet, sim_host: SimHost) -> None:
    """Many sessions ship the same agent into one fresh state dir at once: each ends verified, none fails."""
    from fabfile.inventory.hosts import load
    from fabfile.transport.session import HostSession

    inv = load(fleet.inventory_path)
    host = inv.hosts["sim1"]
    sessions = [HostSession.open(inv, host) for _ in range(4)]
    errors: list[BaseException] = []
    gate = threading.Barrier(len(sessions))

    def ship(s: HostSession) -> None:
        try:
            gate.wait()
            s.agent.ship()
            s.gpus()
        except BaseException as e:  # reported below
            errors.append(e)

    try:
        threads = [threading.Thread(target=ship, args=(s,)) for s in sessions]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        for s in sessions:
            s.close()
    assert errors == []
    left = sim_host.exec("ls -a /root/.specdeploy/agent").stdout.split()
    assert sorted(left) == [".", "..", bundle().manifest_sha256[:16]]


def test_an_installed_agent_owned_by_someone_else_is_refused(fleet: Fleet, sim_host: SimHost,
                                                             inventory: Path) -> None:
    code, _, err = inv_json("gpus", inventory=inventory)
    assert code == 0, err
    sha16 = bundle().manifest_sha256[:16]
    sim_host.exec(f"chown -R 65534:65534 /root/.specdeploy/agent/{sha16}")
    r = run_inv("gpus", inventory=inventory)
    assert r.returncode == 2 and "belongs to nobody" in r.stdout + r.stderr, r.stdout + r.stderr


# ---------------------------------------------------------------------------------------------- 2. secrets

SECRETS = {"HF_TOKEN": "hf_S3CRETa'q\"1", "MY_PASSWORD": "pw-S3CRETb-2", "DATABASE_URL": "postgres://u:S3CRETc@db/x"}
API_KEY = "key-S3CRETd-4"
POLLER = """
import os, sys, time
seen = set()
while not os.path.exists('/tmp/stop-polling'):
    for p in os.listdir('/proc'):
        if p.isdigit():
            try:
                seen.add(open('/proc/%s/cmdline' % p, 'rb').read())
            except OSError:
                pass
    time.sleep(0.002)
with open('/tmp/cmdlines-seen', 'wb') as f:
    f.write(b'\\n'.join(sorted(seen)))
"""


@pytest.fixture
def secret_inventory(fleet: Fleet, sim_host: SimHost, tmp_path: Path) -> Path:
    return derived_inventory(fleet, tmp_path, defaults={
        "env": dict(SECRETS), "secret_env": ["DATABASE_URL"], "sglang_args": [f"--api-key={API_KEY}"]})


class Poller:
    """``nobody`` polling every process's command line on the host while the operator works."""

    def __init__(self, host: SimHost) -> None:
        self.host = host
        host.exec("rm -f /tmp/stop-polling /tmp/cmdlines-seen")
        self.thread = threading.Thread(target=lambda: as_nobody(host, f"/usr/bin/python3 -c \"{POLLER}\"", 600))
        self.thread.start()

    def stop(self) -> str:
        self.host.exec("touch /tmp/stop-polling")
        self.thread.join()
        seen = self.host.exec("cat /tmp/cmdlines-seen").stdout
        assert "sglang.launch_server" in seen  # it did watch the deploy
        return seen


def _leaks(text: str) -> list[str]:
    return [line for line in text.splitlines() if "S3CRET" in line]


def test_secrets_stay_out_of_command_lines_and_reach_the_server(secret_inventory: Path, sim_host: SimHost) -> None:
    poller = Poller(sim_host)
    try:
        code, doc, err = inv_host_json("deploy", "--steps", "3", inventory=secret_inventory)
    finally:
        seen = poller.stop()
    assert code == 0, err
    assert _leaks(seen) == []
    # The server got every value exactly (quotes included), and enforces the key.
    environ = dict(line.split("=", 1) for line in
                   sim_host.exec(f"tr '\\0' '\\n' < /proc/{doc['pid']}/environ").stdout.splitlines() if "=" in line)
    assert {k: environ[k] for k in SECRETS} == SECRETS
    probe = ("import urllib.request as u, sys\n"
             "def get(h):\n"
             "  try: return u.urlopen(u.Request('http://127.0.0.1:8000/get_model_info', headers=h), timeout=5).status\n"
             "  except Exception as e: return getattr(e, 'code', 0)\n"
             f"print(get({{}}), get({{'Authorization': 'Bearer {API_KEY}'}}))\n")
    assert sim_host.exec(["/usr/bin/python3", "-c", probe]).stdout.split() == ["401", "200"]


def test_an_sglang_without_config_files_gets_the_key_on_its_command_line_and_the_plan_says_so(
        secret_inventory: Path, sim_host: SimHost) -> None:
    sim_host.set_version("0.5.2")  # --config FILE came in 0.5.3
    code, doc, err = inv_host_json("deploy", "--steps", "3", inventory=secret_inventory)
    assert code == 0, err
    assert any("takes --api-key only on its command line" in n for n in doc["notes"]), doc["notes"]
    assert "--config" not in doc["launch_argv"] and "--api-key=***" in doc["launch_argv"]
    assert "S3CRET" not in json.dumps(doc)
    cmdline = sim_host.exec(f"tr '\\0' ' ' < /proc/{doc['pid']}/cmdline").stdout
    assert f"--api-key={API_KEY}" in cmdline  # the one place left, named in the plan


def test_bench_against_a_server_with_an_api_key(secret_inventory: Path, sim_host: SimHost) -> None:
    code, _, err = inv_host_json("deploy", "--steps", "3", inventory=secret_inventory)
    assert code == 0, err
    for client in ("sglang", "builtin"):
        code, doc, err = inv_host_json("bench", "--client", client, "--num-prompts", "4", "--output-len", "16",
                                  inventory=secret_inventory)
        assert code == 0, err
        assert doc["hosts"][0]["completed"] == 4 if "hosts" in doc else doc["completed"] == 4, doc


def test_a_deploy_with_secrets_leaves_them_nowhere_another_user_can_read(secret_inventory: Path,
                                                                         sim_host: SimHost) -> None:
    """Deploy with secrets, then search every output (text and JSON, every command), every file under the state
    and log directories, and every command line seen during the deploys for the secret values."""
    outputs: list[str] = []

    def inv(*args: str) -> None:
        r = run_inv(*args, inventory=secret_inventory, timeout=180)
        outputs.append(f"$ inv {' '.join(args)} (exit {r.returncode})\n{r.stdout}\n{r.stderr}")

    for args in (["render"], ["render", "--json"], ["deploy", "--dry-run"], ["deploy", "--dry-run", "--json"]):
        inv(*args)
    poller = Poller(sim_host)
    try:
        inv("deploy", "--steps", "3", "--json")
        inv("deploy", "--steps", "2")            # a redeploy: reports what it stopped
        inv("deploy", "--steps", "3", "--json")  # and in JSON
    finally:
        seen = poller.stop()
    for args in (["status"], ["status", "--json"], ["check-env"], ["check-env", "--json"], ["logs"],
                 ["logs", "--lines", "500"], ["gpus"], ["gpus", "--json"], ["stop", "--dry-run"],
                 ["stop", "--dry-run", "--json"], ["bench", "--num-prompts", "4", "--output-len", "8"],
                 ["bench", "--num-prompts", "4", "--output-len", "8", "--json"], ["stop", "--json"]):
        inv(*args)
    # A server started by hand with its key on its command line: what the tool reports about it is masked too.
    sim_host.exec(f"cd /root; setsid {sim_host.python_in_host} -m sglang.launch_server --model-path "
                  f"/root/models/kimi-k2.5-int4 --port 8001 --api-key {API_KEY} >/dev/null 2>&1 < /dev/null &")
    for args in (["stop", "--dry-run"], ["stop", "--dry-run", "--json"], ["gpus", "--json"], ["status", "--json"],
                 ["stop", "--json"]):
        inv(*args)
    text = "\n".join(outputs)
    assert "deploy --steps 3 --json (exit 0)" in text and "$ inv stop --json (exit 0)" in text, text[-3000:]
    assert "--api-key=***" in text or "--api-key ***" in text  # the hand-started server was seen, masked
    assert _leaks(text) == [], "\n".join(_leaks(text))
    assert _leaks(seen) == []
    # Files: the secrets are on the host (SGLang needs them, and logs its arguments), but only the deploying user
    # can read any file that holds one, and nobody can read anything there at all.
    dirs = "/root/.specdeploy /root/sglang-logs"
    holders = sim_host.exec(f"grep -rl S3CRET {dirs}").stdout.split()
    assert holders, "expected the env file, the config file and the log to hold them"
    for path in holders:
        parts = path.split("/")
        for i in range(3, len(parts) + 1):
            mode = int(sim_host.exec(["stat", "-c", "%a", "/".join(parts[:i])]).stdout, 8)
            assert mode & 0o077 == 0, f"{'/'.join(parts[:i])} is {mode:o}"
    r = as_nobody(sim_host, f"find {dirs} -type f -exec cat {{}} + 2>&1; ls -R {dirs} 2>&1")
    assert "S3CRET" not in r.stdout and "Permission denied" in r.stdout


# ---------------------------------------------------------------------------------------------- 4. ssh_host


# ---------------------------------------------------------------------------------------------- 5. the rest


def test_trust_host_goes_through_proxyjump(fleet: Fleet, sim_host: SimHost, tmp_path: Path) -> None:
    """The key fetched is the one the host offers through the jump host, not whatever listens on the client."""
    if fleet.mode != "netns":
        pytest.skip("needs netns mode: the jump host must reach a host the client cannot")
    jump = fleet.host("sim2")
    known = tmp_path / "known_hosts"
    cfg = tmp_path / "ssh_config"
    cfg.write_text(fleet.ssh_config_path.read_text() + "\n".join([
        "", "Host viajump", "  HostName 127.0.0.1", "  Port 22", "  User root",
        f"  IdentityFile {fleet.client_key_path}", "  IdentitiesOnly yes", f"  UserKnownHostsFile {known}",
        "  ProxyJump sim2", ""]))
    inv = tmp_path / "inventory.yaml"
    inv.write_text(yaml.safe_dump({"ssh_config": str(cfg), "known_hosts": str(fleet.known_hosts_path),
                                   "hosts": {"viajump": {"python": "/p", "model": "/m"}}}))
    r = run_inv("trust-host", "--host", "viajump", inventory=inv)
    blob = base64.b64decode(Path(str(jump.host_key) + ".pub").read_text().split()[1])
    expected = "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")
    assert expected in r.stdout + r.stderr, r.stdout + r.stderr
    r = run_inv("trust-host", "--host", "viajump", "--fingerprint", expected, inventory=inv)
    assert r.returncode == 0, r.stderr
    assert known.read_text().startswith("127.0.0.1 ssh-ed25519 ")


def test_control_characters_in_log_lines_never_reach_the_terminal(inventory: Path, sim_host: SimHost) -> None:
    code, doc, err = inv_host_json("deploy", "--steps", "3", inventory=inventory)
    assert code == 0, err
    sim_host.exec(f"printf 'evil \\033]0;pwned\\007 \\033[2J line\\n' >> {doc['log_path']}")
    r = run_inv("logs", "--lines", "5", inventory=inventory)
    assert r.returncode == 0, r.stderr
    assert "\x1b" not in r.stdout and "\x07" not in r.stdout
    assert "evil \\x1b]0;pwned\\x07 \\x1b[2J line" in r.stdout
