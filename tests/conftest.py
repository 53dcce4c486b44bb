"""Fixtures shared by the whole suite."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

# The real leir-lsp over stdio (pytest-lsp): the ``leir_lsp`` and ``bare_lsp``
# fixtures; helpers (LeirClient, marked, pos, rng) are imported from lsp_fixtures.
from lsp_fixtures import bare_lsp, leir_lsp  # noqa: F401
from lm_fixtures import lm_data, lm_model_dir  # noqa: F401

REPO_ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def _no_model_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("no-model")


@pytest.fixture(autouse=True)
def no_shipped_model(_no_model_dir, monkeypatch):
    """Every test (and every server or CLI process it starts) sees no local
    model (``LEIR_MODEL_DIR``: an empty directory), so that what a test
    checks does not depend on whether a model ships, and no server loads
    torch for one; a test of the model sets its own directory (or removes
    the variable, for the shipped one). The same holds for the larger tier
    (``LEIR_SMOLLM2_DIR``, ``LEIR_SMOLLM2_MODEL_DIR``): a user's imported or
    fine-tuned SmolLM2 in ~/.cache/leir is never seen, nor a user's
    ``LEIR_MODEL_SHORTLIST``."""
    monkeypatch.delenv("LEIR_MODEL_SHORTLIST", raising=False)
    monkeypatch.setenv("LEIR_MODEL_DIR", str(_no_model_dir))
    monkeypatch.setenv("LEIR_SMOLLM2_DIR", str(_no_model_dir))
    monkeypatch.setenv("LEIR_SMOLLM2_MODEL_DIR", str(_no_model_dir))


@pytest.fixture
def examples_dir() -> Path:
    """The bundled workloads, ``examples/*.leir`` (see examples/README.md)."""
    return REPO_ROOT / "examples"


@pytest.fixture
def workers(tmp_path, monkeypatch):
    """A server's job pool and measurement engine (``leir_server.workers``)
    with the default settings, its cache in a temporary directory; closed
    after the test."""
    from leir_server.session.settings import Settings
    from leir_server.workers import Workers

    monkeypatch.setenv("LEIR_CACHE_DIR", str(tmp_path))
    found = Workers(SimpleNamespace(session=SimpleNamespace(settings=Settings())))
    yield found
    found.close()
