"""Facts read from the simulator (tests/simhost/sim) installed and set to one SGLang version.

Everything here is observed, not read from the simulator's source: the simulator is installed into a fresh
venv for the version, ``probe.py`` runs inside that venv (its parser, its ``_set_envs_and_config``, its
argument post-processing), and one real launch (``python -m sglang.launch_server`` with TP 2 and EAGLE-3)
gives the log lines, the process titles, the routes (HTTP status of each) and the ``load_plugins`` call
sites (a probe plugin installed as an entry point reports its caller).
"""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from tests.simhost.sim.install import create_venv, install_simulator
from tools.contract.real import ROUTES, SPEC_ARCHS

PY_VER = f"python{sys.version_info.major}.{sys.version_info.minor}"
PROBE = Path(__file__).with_name("probe.py")

# The environments _set_envs_and_config is run with, on both sides.
USER_NCCL = {"NCCL_CUMEM_ENABLE": "1", "NCCL_NVLS_ENABLE": "1", "NCCL_GRAPH_MIXING_SUPPORT": "1"}
ENV_SCENARIOS: list[dict[str, Any]] = [
    {"name": "defaults", "env": {}, "args": {}},
    {"name": "user NCCL values", "env": USER_NCCL, "args": {}},
    {"name": "user NCCL values + --enable-symm-mem", "env": USER_NCCL, "args": {"enable_symm_mem": True}},
    {"name": "--enable-nccl-nvls", "env": {}, "args": {"enable_nccl_nvls": True}},
    {"name": "--dcp-size 2", "env": {}, "args": {"dcp_size": 2}},
    {"name": "--tp-size 2 --nnodes 2", "env": {}, "args": {"tp_size": 2, "nnodes": 2}},
    {"name": "TRTLLM_ENABLE_PDL=0", "env": {"TRTLLM_ENABLE_PDL": "0"}, "args": {}},
]

PLUGIN = '''"""Contract probe plugin: reports where load_plugins() was called from (TEST EQUIPMENT)."""
import sys


def _site(frame):
    spec = frame.f_globals.get("__spec__")
    mod = spec.name if spec is not None else frame.f_globals.get("__name__")
    return f"{mod}:{frame.f_code.co_qualname}"


def _report(frame):
    sys.stderr.write(f"[contract] load_plugins from {_site(frame)}\\n")
    sys.stderr.flush()


def _profile(frame, event, arg):
    if event == "call" and frame.f_code.co_name == "load_plugins" and frame.f_back is not None:
        _report(frame.f_back)


def apply():
    frame = sys._getframe()
    while frame is not None and frame.f_code.co_name != "load_plugins":
        frame = frame.f_back
    if frame is not None and frame.f_back is not None:
        _report(frame.f_back)
    # later calls in this process return early (loaded once): see them as calls
    sys.setprofile(_profile)
'''


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _http(method: str, url: str, body: bytes | None = None) -> int:
    req = urllib.request.Request(url, data=body, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            r.read()
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)
    except (ConnectionError, http.client.HTTPException) as e:
        raise RuntimeError(f"{method} {url}: {e!r}") from e


def _children(pid: int) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            if int(stat[stat.rfind(")") + 2 :].split()[1]) == pid:
                out.append(int(d.name))
    return out


def _title(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    return raw.split(b"\0")[0].decode(errors="replace")


class _Killed(Exception):
    pass


class SimInstall:
    """A fresh venv with the simulator set to ``version`` and the probe plugin, under ``root``."""

    def __init__(self, root: Path, version: str) -> None:
        self.root = root
        self.version = version
        self.prefix = root / "venv"
        self.python = str(self.prefix / "bin" / "python3")
        create_venv(self.prefix)
        install_simulator(self.prefix, root / "bin", version, self.python,
                          {"gpus": 4, "load_seconds": 0.05, "hostname": "contract", "time_scale": 0.05})
        site = self.prefix / "lib" / PY_VER / "site-packages"
        (site / "contract_probe_plugin.py").write_text(PLUGIN)
        dist = site / "contract_probe_plugin-0.1.dist-info"
        dist.mkdir()
        (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: contract-probe-plugin\nVersion: 0.1\n")
        (dist / "entry_points.txt").write_text("[sglang.srt.plugins]\ncontract_probe = contract_probe_plugin:apply\n")
        self.model = root / "model"
        self.draft = root / "draft"
        for d, arch in ((self.model, "LlamaForCausalLM"), (self.draft, "LlamaForCausalLMEagle3")):
            d.mkdir()
            (d / "config.json").write_text(json.dumps({"architectures": [arch], "model_type": "llama"}))

    def env(self) -> dict[str, str]:
        return {k: v for k, v in os.environ.items() if not k.startswith(("NCCL_", "SPT_", "SGLANG_"))}

    def probe(self) -> dict[str, Any]:
        out = subprocess.run([self.python, str(PROBE), json.dumps(ENV_SCENARIOS), json.dumps(SPEC_ARCHS)],
                             capture_output=True,
                             text=True, timeout=120, env=self.env(), cwd=str(self.root))
        if out.returncode != 0:
            raise RuntimeError(f"probe failed on the simulator {self.version}:\n{out.stderr}")
        got = dict(json.loads(out.stdout.strip().splitlines()[-1]))
        helptext = subprocess.run([self.python, "-m", "sglang.bench_serving", "--help"], capture_output=True,
                                  text=True, timeout=60, env=self.env(), cwd=str(self.root)).stdout
        got["bench_flags"] = sorted(set(re.findall(r"(?<![\w-])(--[a-z][\w-]*)", helptext)) - {"--help"})
        ds = re.search(r"--dataset-name \{([^}]*)\}", helptext)
        got["bench_datasets"] = sorted(ds.group(1).split(",")) if ds else "any"
        return got

    def launch(self, extra: list[str], attempts: int = 3, full: bool = True) -> dict[str, Any]:
        """``_launch_once``, tried again when the launcher died before ready without an error of its own: on a
        shared test machine other tests' cleanups may signal it. A simulator that cannot start fails every try."""
        for i in range(attempts):
            try:
                return self._launch_once(extra, full)
            except _Killed as e:
                if i == attempts - 1:
                    raise RuntimeError(str(e)) from None
                print(f"contract: {str(e).splitlines()[0]}; starting it again", file=sys.stderr)
        raise AssertionError("unreachable")

    def _launch_once(self, extra: list[str], full: bool) -> dict[str, Any]:
        """Start the server (TP 2; ``full``: EAGLE-3 3/1/4 and metrics on, routes probed), read titles and the
        log; stop it."""
        port = _free_port()
        argv = [self.python, "-m", "sglang.launch_server", "--model-path", str(self.model), "--port", str(port),
                "--tp-size", "2", *extra]
        if full:
            argv += ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", str(self.draft),
                     "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
                     "--speculative-num-draft-tokens", "4", "--decode-log-interval", "4", "--enable-metrics"]
        log = self.root / "server.log"
        with open(log, "wb") as out:
            p = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                 env=self.env(), start_new_session=True, cwd=str(self.root))
        try:
            deadline = time.monotonic() + 60
            while "fired up and ready" not in log.read_text(errors="replace"):
                stopped = "Shutting down" in log.read_text(errors="replace")
                if p.poll() is not None and (p.returncode < 0 or stopped):
                    raise _Killed(f"simulator {self.version}: launcher stopped from outside (exit {p.returncode}) "
                                  f"before ready:\n{log.read_text()}")
                if p.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"simulator {self.version} did not start (exit {p.returncode}):\n"
                                       f"{log.read_text()}")
                time.sleep(0.05)
            try:
                return self._observe(p, log, port, full)
            except RuntimeError as e:
                # the launcher's SIGTERM path logs "Shutting down": something outside stopped it mid-probe
                if "Shutting down" in log.read_text(errors="replace") or p.poll() is not None:
                    raise _Killed(f"simulator {self.version}: stopped from outside during the probe ({e})") from e
                raise
        finally:
            for sig, wait in ((signal.SIGTERM, 15), (signal.SIGKILL, 5)):
                try:
                    os.killpg(p.pid, sig)
                except ProcessLookupError:
                    pass
                try:
                    p.wait(timeout=wait)
                    break
                except subprocess.TimeoutExpired:
                    continue

    def _observe(self, p: subprocess.Popen[bytes], log: Path, port: int, full: bool) -> dict[str, Any]:
        # The launcher is ready once its schedulers are; the detokenizer (a spawned child, not waited for, as in
        # SGLang) may still be importing on a loaded machine: give it time to set its title.
        deadline = time.monotonic() + 30
        titles = sorted({_title(c) for c in _children(p.pid)} - {""})
        while "sglang::detokenizer" not in titles and time.monotonic() < deadline and p.poll() is None:
            time.sleep(0.1)
            titles = sorted({_title(c) for c in _children(p.pid)} - {""})
        base = f"http://127.0.0.1:{port}"
        routes: dict[str, str | None] = {}
        # Does /health run a generate? Its one-token request leaves a "Prefill batch" line in the log.
        n0 = log.read_text(errors="replace").count("Prefill batch")
        health_code = _http("GET", base + "/health") if full else None
        health_runs_generate = log.read_text(errors="replace").count("Prefill batch") > n0
        for r in ROUTES if full else ():
            ok = []
            for method in ("GET", "POST", "PUT"):
                body = json.dumps({"input_ids": list(range(16)), "sampling_params": {"max_new_tokens": 24}})
                code = _http(method, base + r, body.encode() if method != "GET" else None)
                if code not in (404, 405, 501):
                    ok.append(method)
            routes[r] = ",".join(ok) or None
        text = log.read_text(errors="replace")
        if "Shutting down" in text:
            raise RuntimeError("the launcher was stopped while it was probed")
        lines = text.splitlines()
        return {
            "health_runs_generate": health_runs_generate if health_code == 200 else None,
            "titles": titles,
            "routes": routes,
            "ready_line": next((ln.split("] ", 1)[-1] for ln in lines if "fired up and ready" in ln), None),
            "server_args_line": next((ln.split("] ", 1)[-1] for ln in lines if "server_args=" in ln), None),
            "decode_lines": [ln for ln in lines if "Decode batch" in ln],
            "load_plugins": sorted({ln.split("load_plugins from ", 1)[1].strip()
                                    for ln in lines if "[contract] load_plugins from " in ln}),
        }


def facts(version: str, real_flags: dict[str, Any] | None = None) -> dict[str, Any]:
    """Every contract fact of the simulator set to ``version``."""
    with tempfile.TemporaryDirectory(prefix="contract-sim-") as d:
        inst = SimInstall(Path(d), version)
        probed = inst.probe()
        extra = ["--ep-size", "2"] if "--ep-size" in probed["flags"] else []
        run = inst.launch(extra)
        # no pipeline parallelism before 0.4.6.post2
        pp = inst.launch([*extra, "--pp-size", "2"], full=False) if "--pp-size" in probed["flags"] else None
    return {"version": version, **probed, **run, "ep": bool(extra), "pp_titles": pp["titles"] if pp else None}


def decode_template(line: str) -> str:
    """A logged ``Decode batch`` line with its values replaced by ``{}`` (the log prefix dropped)."""
    body = re.sub(r"^Decode batch \[\d+\]", "Decode batch [{}]", line[line.find("Decode batch"):])
    return re.sub(r": (?:\d{4}-\d\d-\d\dT[\d:.]+|[-+]?\d+(?:\.\d+)?|True|False)", ": {}", body)
