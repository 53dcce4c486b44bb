"""Fixtures shared by the whole suite."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def examples_dir() -> Path:
    """The bundled workloads, ``examples/*.leir`` (see examples/README.md)."""
    return REPO_ROOT / "examples"
