"""Fixtures of the tests of ``leir_models.sol``'s ONNX paths
(``test_sol_ort_runtime``, ``test_sol_ort_step``), imported by name into
each module (module scope: each module gets its own): the training split's
sequences of the tiny model (``lm_model_dir``), channel orders measured on
four of them (as a policy's would be), and the tiny model prepared with
those orders."""

from __future__ import annotations

import pytest
import torch

from leir_models.lm.data import load_records
from leir_models.lm.store import load_model
from leir_models.sol import decode, knobs
from leir_models.sol.train import sequences


@pytest.fixture(scope="module")
def seqs(lm_model_dir, lm_data):
    model, tok = load_model(lm_model_dir)
    return sequences(load_records(lm_data)[0], tok, "train", model.config.max_position_embeddings)


@pytest.fixture(scope="module")
def orders(lm_model_dir, seqs):
    model, _ = load_model(lm_model_dir)
    return knobs.reorder_channels(model, knobs.channel_importance(model, [torch.tensor([s]) for s in seqs[:4]]))


def prepared(lm_model_dir, orders):
    """The tiny model, its channels in ``orders`` and its MLPs sliceable."""
    model, _ = load_model(lm_model_dir)
    return decode.prepare(model, orders)


@pytest.fixture(scope="module")
def torch_model(lm_model_dir, orders):
    return prepared(lm_model_dir, orders)
