"""Hover's time budget: past ``EXPLAIN_BUDGET_S`` the steps after the first
are named, not explained (a hover on a loop of a large file must answer
quickly; the code-action menu still lists every step)."""

from __future__ import annotations

import pytest

from leir_server.api.requests import text_document_hover
from leir_server.server import build_server
from leir_server.session.snapshot import DocumentSnapshot

MATMUL = """\
# C = X @ W
L^{64}_{i}
  L^{48}_{j}
    L^{32}_{k} [
      C_{i,j} += X_{i,k}*W_{k,j};
    ];
"""


@pytest.fixture
def hover(tmp_path, monkeypatch):
    monkeypatch.setenv("LEIR_CACHE_DIR", str(tmp_path / "cache"))
    server = build_server()
    snapshot = DocumentSnapshot("file:///budget/matmul.leir", 1, MATMUL, "leir")
    at = MATMUL.index("L^{48}_{j}") + 1  # on loop j's header

    def run() -> str:
        return text_document_hover.hover_markdown(server, snapshot, at)

    return run


def test_with_time_to_spare_every_step_at_the_cursor_is_explained(hover, monkeypatch):
    monkeypatch.setattr(text_document_hover, "EXPLAIN_BUDGET_S", 60.0)
    text = hover()
    assert text.count("\n### ") == text_document_hover.MAX_STEPS
    assert "Also offered here" not in text


def test_past_the_budget_the_first_step_is_explained_and_the_rest_named(hover, monkeypatch):
    monkeypatch.setattr(text_document_hover, "EXPLAIN_BUDGET_S", 60.0)
    full = hover()
    monkeypatch.setattr(text_document_hover, "EXPLAIN_BUDGET_S", 0.0)

    text = hover()

    assert text.count("\n### ") == 1
    titles = [line[4:] for line in full.splitlines() if line.startswith("### ")]
    assert text.split("\n### ")[1].startswith(titles[0])
    named = text.split("Also offered here: ")[1]
    assert all(f"**{title}**" in named for title in titles[1:])
