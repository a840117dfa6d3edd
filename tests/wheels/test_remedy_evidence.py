"""The tuner's ``log:`` evidence against what real SGLang prints: for each catalog remedy that says it engaged by a
log line, a line of the release where its knob first acts is built from that release's own log call (its format
literal, read with ``ast`` from the wheel), and the remedy's pattern must find it — and ``tune.engaged`` must call
the change engaged on it. A pattern that matches no line SGLang can print would revert every change it judges."""

from __future__ import annotations

import ast
import re
import zipfile

import pytest

from fabfile.commands.tune import Measurement, engaged
from fabfile.plan import remedies
from tests.support.wheels import wheel_path

# remedy id -> (the release read, the module printing the line, one line that release prints: each placeholder of
# its log call filled with a value it takes on a CUDA GPU under speculation).
REAL_LINES: dict[str, tuple[str, str, str]] = {
    "pcie-ipc": ("0.5.23", "sglang/srt/distributed/device_communicators/pcie_ipc_ar.py",
                 "FlashInfer PCIe-IPC all-reduce enabled (world=2, workspace sized on first reduction)"),
}
LOG_CALLS = {"info", "warning", "debug", "error", "log_info_on_rank0", "print_info_once", "print_warning_once"}


def _templates(source: str) -> list[re.Pattern[str]]:
    """Each log call's format literal as a regex: its text escaped, each ``{...}`` or ``%s``-style placeholder any
    text."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        if name not in LOG_CALLS:
            continue
        for arg in node.args:
            if isinstance(arg, ast.JoinedStr):
                parts = [re.escape(v.value) if isinstance(v, ast.Constant) else ".+?" for v in arg.values]
                out.append(re.compile("".join(parts)))
            elif isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                out.append(re.compile(re.sub(r"%[-+ #0]*\d*(?:\.\d+)?[sdfr]", ".+?", re.escape(arg.value)
                                             .replace(r"\%", "%"))))
    return out


def test_every_log_evidence_remedy_has_a_real_line() -> None:
    with_log = {r.id for r in remedies.CATALOG if r.engaged_by.startswith("log:")}
    assert with_log == set(REAL_LINES), with_log ^ set(REAL_LINES)


@pytest.mark.parametrize("remedy_id", sorted(REAL_LINES))
def test_the_log_pattern_finds_a_line_real_sglang_prints(remedy_id: str) -> None:
    version, module, line = REAL_LINES[remedy_id]
    remedy = remedies.by_id(remedy_id)
    assert remedies.knob_acts(remedy.knob_name(remedies.Context(version, 8, 2)), version), \
        f"{remedy.knob} does not act on {version}: read the release where it does"
    with zipfile.ZipFile(wheel_path(version)) as z:
        source = z.read(module).decode()
    # The line is one the release prints: a log call's literal in its module produces it whole.
    assert any(t.fullmatch(line) for t in _templates(source)), f"no log call in {module} prints {line!r}"
    ok, evidence = engaged(remedy, remedies.Config(), Measurement(tok_s=1.0, anatomy={},
                                                                   log=("unrelated line", line)))
    assert ok, evidence
    assert not engaged(remedy, remedies.Config(), Measurement(tok_s=1.0, anatomy={}, log=("unrelated line",)))[0]


@pytest.mark.parametrize("version", ["0.5.12", "0.5.16", "0.5.20"])
def test_the_graph_batch_size_evidence_is_a_field_the_servers_own_args_have(version: str) -> None:
    """graph-bs engages by the server's own args (its /get_server_info is its ServerArgs): the field behind the
    flag the release takes (``--cuda-graph-max-bs`` until 0.5.14, then ``--cuda-graph-max-bs-decode``, the old name
    its alias, one field) is one of the names the profile asks for, and a ServerArgs field of that release."""
    flag = remedies.graph_bs_flag(version)
    assert flag is not None
    field = remedies.server_arg(flag)
    assert field in remedies.SERVER_ARGS
    with zipfile.ZipFile(wheel_path(version)) as z:
        # ServerArgs' fields: in server_args.py, and from 0.5.20 in the field groups it is assembled from
        source = "".join(z.read(n).decode() for n in z.namelist()
                         if n == "sglang/srt/server_args.py" or n.startswith("sglang/srt/arg_groups/fields/"))
    assert re.search(rf"^    {field}\b\s*:", source, re.M), f"{field} is no ServerArgs field of {version}"
    cfg = remedies.Config(flags=((flag, "16"),))
    remedy = remedies.by_id("graph-bs")
    assert engaged(remedy, cfg, Measurement(tok_s=1.0, anatomy={}, server_args={field: 16}))[0]
    assert not engaged(remedy, cfg, Measurement(tok_s=1.0, anatomy={}, server_args={field: 8}))[0]
