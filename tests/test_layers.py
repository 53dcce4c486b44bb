"""The layers as a contract (``[tool.importlinter]`` in pyproject.toml):
``leir`` imports neither the server nor the models, the models do not import
the server, the language core (the modules at the top of ``leir/``) imports
none of leir's sub-packages, the sub-packages are layers (tools, explain,
measure, transforms, bridge: each imports only those below it), the steps'
shared library and machinery import no step, and no step of the catalogue
imports another; and no import cycle anywhere, imports inside functions
included (they are cycles all the same, only hidden)."""

from __future__ import annotations

import sys
from pathlib import Path

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

import grimp
import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("leir", "leir_server", "leir_models")


def _contracts() -> dict[str, dict]:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
    return {c["id"]: c for c in config["contracts"]}


def cycles(*packages: str) -> list[list[str]]:
    """The import cycles among the modules of ``packages`` (the strongly
    connected components of more than one module; a module importing
    itself is not one), each sorted."""
    graph = grimp.build_graph(*packages, include_external_packages=False, cache_dir=None,
                              exclude_type_checking_imports=True)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    # Tarjan's algorithm, iterative (the graph is deep enough to matter).
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.find_modules_directly_imported_by(child)))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def test_the_layer_contracts_hold(capsys):
    import logging

    from importlinter.cli import lint_imports

    # lint_imports configures logging with disable_existing_loggers: every
    # logger already created (leir's among them) would stay disabled for
    # the tests after this one.
    loggers = [lg for lg in logging.root.manager.loggerDict.values() if isinstance(lg, logging.Logger)]
    enabled = [lg for lg in loggers if not lg.disabled]
    try:
        status = lint_imports(config_filename=str(REPO / "pyproject.toml"), no_cache=True, no_logo=True)
    finally:
        for lg in enabled:
            lg.disabled = False
    report = capsys.readouterr().out
    assert status == 0, report
    assert report.count(" KEPT") == len(_contracts())


def test_no_import_cycle_in_the_project():
    assert cycles(*PACKAGES) == []


def test_the_cycle_check_sees_a_cycle_hidden_in_a_function(tmp_path, monkeypatch):
    package = tmp_path / "looped"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "first.py").write_text("from looped import second, third\n")
    (package / "second.py").write_text("def late():\n    from looped import first\n    return first\n")
    # Never executed: not a cycle.
    (package / "third.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from looped import first\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert cycles("looped") == [["looped.first", "looped.second"]]
    sys.modules.pop("looped", None)


def test_the_steps_contract_names_every_step_of_the_catalogue():
    from leir import transforms

    assert sorted(_contracts()["steps"]["modules"]) == sorted(t.__name__ for t in transforms.ALL)


def test_the_steps_folder_holds_the_catalogue_and_nothing_else():
    from leir import transforms

    folder = REPO / "leir" / "transforms" / "steps"
    modules = {p.stem for p in folder.glob("*.py")} - {"__init__"}
    assert modules == {t.__name__.rsplit(".", 1)[1] for t in transforms.ALL}
    assert all(t.__name__.startswith("leir.transforms.steps.") for t in transforms.ALL)


@pytest.mark.parametrize("contract", ["library", "models", "core", "lib"])
def test_each_forbidden_contract_names_packages_that_exist(contract):
    import importlib

    c = _contracts()[contract]
    for name in [*c["source_modules"], *c["forbidden_modules"]]:
        importlib.import_module(name)


def test_every_module_of_leir_is_in_the_core_or_a_layer():
    leir = REPO / "leir"
    tops = {f"leir.{p.stem}" for p in leir.glob("*.py")} - {"leir.__init__"}
    packages = {f"leir.{p.name}" for p in leir.iterdir() if (p / "__init__.py").exists()}
    core, layers = set(_contracts()["core"]["source_modules"]), set(_contracts()["layers"]["layers"])
    assert core | layers == tops | packages and not core & layers
    assert tops <= core, "a module at the top of leir/ is part of the core"
    assert set(_contracts()["core"]["forbidden_modules"]) == layers
