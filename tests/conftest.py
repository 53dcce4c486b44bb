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
