"""An installed specdeploy (``pip install .``, not only ``-e``) has every room of the library and the templates:
``pyproject.toml`` lists packages explicitly, so a sub-package added to ``fabfile/`` and not listed there would be
missing from a wheel while every test run from the checkout still passes."""

from __future__ import annotations

from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[3]


def _setuptools() -> dict[str, object]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]  # type: ignore[no-any-return]


def test_every_fabfile_package_is_listed_for_the_wheel() -> None:
    on_disk = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "fabfile").rglob("__init__.py")
               if "__pycache__" not in p.parts}
    listed = set(_setuptools()["packages"])  # type: ignore[call-overload]
    assert on_disk <= listed, f"add to pyproject.toml's packages: {sorted(on_disk - listed)}"


def test_the_templates_travel_inside_the_package() -> None:
    cfg = _setuptools()
    assert cfg["package-dir"] == {"fabfile.templates": "templates"}  # type: ignore[index]
    data: dict[str, list[str]] = cfg["package-data"]  # type: ignore[assignment]
    shipped = set()
    for pkg, patterns in data.items():
        assert pkg in cfg["packages"], f"{pkg} has package-data but is not a listed package"  # type: ignore[operator]
        folder = ROOT / "templates" / Path(*pkg.split(".")[2:])
        shipped |= {f for pattern in patterns for f in folder.glob(pattern)}
    every = {f for f in (ROOT / "templates").rglob("*") if f.is_file()}
    assert every == shipped, f"templates not shipped: {sorted(str(f.relative_to(ROOT)) for f in every - shipped)}"
