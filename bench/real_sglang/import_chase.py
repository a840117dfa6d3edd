"""Which third-party packages a Llama + EAGLE-3 SGLang server imports, read statically from the unpacked wheels.

Walks the module-level imports (including those under module-level ``if``/``try``, which run on a CUDA host)
from the entry points a ``sglang.launch_server`` with a Llama or Qwen3-MoE target (the MoE shape: SGLang's Triton
fused-MoE runner), an EAGLE-3 draft, the Triton attention backend and the PyTorch sampler loads, following
SGLang's own modules and every package unpacked beside it. Imports inside functions are lazy and not followed.
Prints, for each distribution found in SITE, the first module that pulls it in. Needs no torch and no GPU, so it
runs on the CPU machine:

    python3 bench/real_sglang/import_chase.py SITE
"""

from __future__ import annotations

import ast
import sys
from collections import deque
from pathlib import Path

ENTRY = [
    "sglang.launch_server", "sglang.srt.entrypoints.http_server", "sglang.srt.entrypoints.engine",
    "sglang.srt.managers.scheduler", "sglang.srt.managers.tokenizer_manager",
    "sglang.srt.managers.detokenizer_manager", "sglang.srt.managers.tp_worker",
    "sglang.srt.model_executor.model_runner", "sglang.srt.models.llama", "sglang.srt.models.llama_eagle3",
    "sglang.srt.speculative.eagle_worker", "sglang.srt.speculative.eagle_worker_v2",
    "sglang.srt.layers.attention.triton_backend", "sglang.srt.layers.sampler",
    "sglang.srt.model_loader.loader", "sglang.srt.plugins",
    "sglang.srt.models.qwen3_moe", "sglang.srt.layers.moe.fused_moe_triton.layer", "sglang.srt.layers.moe.topk",
    "sglang.srt.layers.moe.moe_runner.triton", "sglang.srt.layers.moe.moe_runner.triton_utils.fused_moe",
]


def module_file(site: Path, name: str) -> Path | None:
    base = site.joinpath(*name.split("."))
    for cand in (base.with_suffix(".py"), base / "__init__.py"):
        if cand.is_file():
            return cand
    return None


def module_level_imports(path: Path, name: str, is_pkg: bool) -> list[str]:
    try:
        tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
    except SyntaxError:
        return []
    out: list[str] = []

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.Import):
                out.extend(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    parts = name.split(".")
                    base = parts if is_pkg else parts[:-1]
                    base = base[: len(base) - (node.level - 1)]
                    mod = ".".join(base + ([node.module] if node.module else []))
                else:
                    mod = node.module or ""
                out.append(mod)
                out.extend(f"{mod}.{a.name}" for a in node.names)  # submodules imported by name
            elif isinstance(node, (ast.If, ast.Try)):
                visit(node.body)
                visit(getattr(node, "orelse", []))
                for h in getattr(node, "handlers", []):
                    visit(h.body)
                visit(getattr(node, "finalbody", []))
            elif isinstance(node, (ast.With,)):
                visit(node.body)

    visit(tree.body)
    return out


def distributions(site: Path) -> dict[str, str]:
    """top-level import name → distribution name, from each dist-info's RECORD."""
    owner: dict[str, str] = {}
    for info in site.glob("*.dist-info"):
        dist = info.name.split("-")[0]
        record = info / "RECORD"
        if not record.is_file():
            continue
        for line in record.read_text().splitlines():
            top = line.split(",")[0].split("/")[0]
            if top.endswith(".dist-info") or top.endswith(".data"):
                continue
            owner.setdefault(top.removesuffix(".py").split(".")[0], dist)
    return owner


def main() -> int:
    site = Path(sys.argv[1])
    owner = distributions(site)
    seen: set[str] = set()
    first: dict[str, str] = {}
    missing: dict[str, str] = {}
    queue = deque((m, "<entry>") for m in ENTRY)
    while queue:
        name, by = queue.popleft()
        if name in seen or not name:
            continue
        seen.add(name)
        top = name.split(".")[0]
        dist = owner.get(top)
        path = module_file(site, name)
        if path is None:
            if dist is None and top not in sys.stdlib_module_names and "." not in name:
                missing.setdefault(top, by)
            # a parent package is imported too
            if "." in name:
                queue.append((name.rsplit(".", 1)[0], by))
            continue
        if dist is not None:
            first.setdefault(dist, f"{name} (from {by})")
        if "." in name:
            queue.append((name.rsplit(".", 1)[0], by))
        for imp in module_level_imports(path, name, path.name == "__init__.py"):
            queue.append((imp, name))
    print("distributions in SITE that the server imports at module level (first importer):")
    for dist, why in sorted(first.items()):
        print(f"  {dist:28} {why}")
    unused = sorted(set(owner.values()) - set(first))
    print("distributions in SITE not reached this way (lazy imports or not needed):")
    print("  " + " ".join(unused))
    print("top-level modules imported but not in SITE (the GPU image, the stdlib, or absent):")
    for top, by in sorted(missing.items()):
        print(f"  {top:28} {by}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
