"""Every Python package in the tree is found by pyproject.toml's package
discovery, so that a non-editable install (a wheel) carries all of it, and
each import name is a folder name."""

from __future__ import annotations

import tomllib
from pathlib import Path

from setuptools import find_packages

ROOT = Path(__file__).resolve().parent.parent


def test_every_package_directory_is_found():
    find = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    found = set()
    for where in find["where"]:
        found.update(find_packages(str(ROOT / where), include=find["include"]))
    on_disk = set()
    for top, base in (("leir", ROOT), ("leir_server", ROOT / "server"), ("leir_models", ROOT / "models")):
        for init in (base / top).rglob("__init__.py"):
            on_disk.add(".".join(init.parent.relative_to(base).parts))
    assert found == on_disk, f"not found: {sorted(on_disk - found)}; extra: {sorted(found - on_disk)}"
    assert {"leir.transforms.steps", "leir.transforms.lib", "leir_server.api.commands", "leir_models"} <= found
