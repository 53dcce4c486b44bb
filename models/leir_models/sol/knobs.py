"""The MLP keep fraction as a knob that really saves compute.

SOL keeps the largest-magnitude MLP activations per token and zeroes the
rest: a mask, so the matrix products stay full size and nothing is saved
(docs/sol.md). Here the saving is physical instead:

1. ``channel_importance`` measures, for every Llama MLP layer, the mean
   absolute value of each intermediate channel, ``act_fn(gate(x)) * up(x)``
   (the input of ``down_proj``), over calibration batches, with forward
   pre-hooks on ``down_proj``;
2. ``reorder_channels`` permutes, once and offline, each layer's
   ``gate_proj``/``up_proj`` rows and ``down_proj`` columns by decreasing
   importance. The MLP is a sum over channels, so this preserves the
   function (tested on the whole model's logits);
3. ``sliced_mlp_forward`` then runs keep fraction ``k`` as the first ``n``
   channels: ``weight[:n]`` and ``weight[:, :n]`` views, so every product has
   inner or outer dimension ``n`` (tested on the shapes of the ``aten.mm``
   calls actually run). ``truncated_mlp`` makes the same prefix a module of
   its own with contiguous, smaller weights, which is what ``onnx_blocks``
   exports.

Layers are found by shape, not by class: any module with ``gate_proj``,
``up_proj``, ``down_proj`` (``nn.Linear``) and ``act_fn``, which is
transformers' ``LlamaMLP`` in our own model (``leir_models.lm``) and in
SmolLM2-135M alike.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterable, Mapping

import torch
from torch import nn
from torch.nn import functional as F

#: The three levels of the MLP keep fraction (a small action space, as the
#: issue asks; SOL's smaller variants use three levels per knob too).
MLP_LEVELS: tuple[float, ...] = (1.0, 0.75, 0.5)


def is_gated_mlp(module: nn.Module) -> bool:
    """Whether ``module`` is a SwiGLU MLP this module can reorder and slice."""
    return all(isinstance(getattr(module, name, None), nn.Linear) for name in ("gate_proj", "up_proj", "down_proj")) \
        and callable(getattr(module, "act_fn", None))


def mlp_layers(model: nn.Module) -> list[nn.Module]:
    """The gated MLPs of ``model`` in module order (one per decoder layer)."""
    return [m for m in model.modules() if is_gated_mlp(m)]


def keep_width(intermediate: int, keep: float) -> int:
    """Channels kept at keep fraction ``keep`` (rounded up, at least one)."""
    if not 0.0 < keep <= 1.0:
        raise ValueError(f"keep fraction must be in (0, 1], got {keep}")
    return max(1, min(intermediate, math.ceil(keep * intermediate - 1e-9)))


@torch.no_grad()
def channel_importance(model: nn.Module, batches: Iterable[torch.Tensor | Mapping[str, torch.Tensor]]) -> list[torch.Tensor]:
    """Mean ``|act_fn(gate(x)) * up(x)|`` per channel of every MLP layer.

    ``batches``: token id tensors ``[B, T]``, or keyword dictionaries for the
    model (``input_ids`` and, optionally, ``attention_mask``: padded tokens
    are then left out of the mean). Returns one float32 tensor of length
    ``intermediate_size`` per layer, in ``mlp_layers`` order.
    """
    layers = mlp_layers(model)
    if not layers:
        raise ValueError("the model has no gated MLP layer (gate_proj/up_proj/down_proj)")
    sums = [torch.zeros(m.down_proj.in_features, dtype=torch.float64) for m in layers]
    counts = [0] * len(layers)
    mask: list[torch.Tensor | None] = [None]

    def hook(index: int):
        def pre(_module, args):
            act = args[0].detach().abs().to(torch.float64).reshape(-1, args[0].shape[-1])
            if mask[0] is not None:
                keep = mask[0].reshape(-1).to(torch.bool)
                act = act[keep]
            sums[index] += act.sum(dim=0)
            counts[index] += act.shape[0]
        return pre

    handles = [m.down_proj.register_forward_pre_hook(hook(i)) for i, m in enumerate(layers)]
    was_training = model.training
    model.eval()
    try:
        for batch in batches:
            kwargs = dict(batch) if isinstance(batch, Mapping) else {"input_ids": batch}
            mask[0] = kwargs.get("attention_mask")
            model(**kwargs)
    finally:
        for h in handles:
            h.remove()
        model.train(was_training)
    if not all(counts):
        raise ValueError("no calibration token reached the MLP layers")
    return [(s / c).to(torch.float32) for s, c in zip(sums, counts)]


@torch.no_grad()
def reorder_channels(model: nn.Module, importance: list[torch.Tensor]) -> list[torch.Tensor]:
    """Permute every MLP's channels by decreasing ``importance``, in place.

    ``gate_proj`` and ``up_proj`` rows (and biases) and ``down_proj``
    columns move together, so the model computes the same function. Ties
    keep their order (a stable sort), so a second call with the measured
    importance of the reordered model is the identity. Returns the
    permutation of each layer (new position -> old channel).
    """
    layers = mlp_layers(model)
    if len(importance) != len(layers):
        raise ValueError(f"{len(importance)} importance vectors for {len(layers)} MLP layers")
    orders = []
    for mlp, imp in zip(layers, importance):
        if imp.shape != (mlp.down_proj.in_features,):
            raise ValueError(f"importance of shape {tuple(imp.shape)} for {mlp.down_proj.in_features} channels")
        order = torch.sort(imp, descending=True, stable=True).indices.to(mlp.gate_proj.weight.device)
        for proj in (mlp.gate_proj, mlp.up_proj):
            proj.weight.copy_(proj.weight[order])
            if proj.bias is not None:
                proj.bias.copy_(proj.bias[order])
        mlp.down_proj.weight.copy_(mlp.down_proj.weight[:, order])
        orders.append(order)
    return orders


def sliced_mlp_forward(mlp: nn.Module, x: torch.Tensor, keep: float) -> torch.Tensor:
    """``mlp(x)`` on its first ``keep_width(I, keep)`` channels only.

    Views of the weights, no copy and no mask: the gate and up products
    produce ``n`` channels instead of ``I``, the down product sums ``n``
    instead of ``I``. At ``keep == 1`` the views are the whole weights and
    the result equals ``mlp(x)`` exactly (the same operations, tested).
    """
    n = keep_width(mlp.down_proj.in_features, keep)
    gate, up, down = mlp.gate_proj, mlp.up_proj, mlp.down_proj
    g = F.linear(x, gate.weight[:n], None if gate.bias is None else gate.bias[:n])
    u = F.linear(x, up.weight[:n], None if up.bias is None else up.bias[:n])
    return F.linear(mlp.act_fn(g) * u, down.weight[:, :n], down.bias)


class SlicedMLP(nn.Module):
    """A decoder layer's MLP run at a settable keep fraction (``keep``).

    Wraps the original module (its weights are shared, not copied), so
    ``install_sliced_mlps`` can put it in a model's place and a controller
    can change ``keep`` per layer between tokens.
    """

    def __init__(self, mlp: nn.Module, keep: float = 1.0):
        super().__init__()
        self.mlp = mlp
        self.keep = keep

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return sliced_mlp_forward(self.mlp, x, self.keep)


def install_sliced_mlps(model: nn.Module) -> list[SlicedMLP]:
    """Replace every gated MLP of ``model`` by a ``SlicedMLP`` (keep 1.0).

    Returns the wrappers in layer order; ``set_keep`` sets them all.
    """
    wrappers = []
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if is_gated_mlp(child):
                wrapper = SlicedMLP(child)
                setattr(parent, name, wrapper)
                wrappers.append(wrapper)
    return wrappers


def set_keep(model: nn.Module, keep: float) -> None:
    """Set the keep fraction of every ``SlicedMLP`` in ``model``."""
    keep_width(1, keep)
    for m in model.modules():
        if isinstance(m, SlicedMLP):
            m.keep = keep


@torch.no_grad()
def truncated_mlp(mlp: nn.Module, keep: float) -> nn.Module:
    """A copy of ``mlp`` with only its first ``n`` channels, as smaller
    contiguous ``nn.Linear`` layers (same class, same forward).

    What gets exported per keep level: the ONNX graph's initializers are
    then ``n`` wide, not the full matrices with a slice in front.
    """
    n = keep_width(mlp.down_proj.in_features, keep)
    out = copy.deepcopy(mlp)
    for name in ("gate_proj", "up_proj"):
        src = getattr(mlp, name)
        dst = nn.Linear(src.in_features, n, bias=src.bias is not None, dtype=src.weight.dtype, device=src.weight.device)
        dst.weight.copy_(src.weight[:n])
        if src.bias is not None:
            dst.bias.copy_(src.bias[:n])
        setattr(out, name, dst)
    src = mlp.down_proj
    dst = nn.Linear(n, src.out_features, bias=src.bias is not None, dtype=src.weight.dtype, device=src.weight.device)
    dst.weight.copy_(src.weight[:, :n])
    if src.bias is not None:
        dst.bias.copy_(src.bias)
    out.down_proj = dst
    if hasattr(out, "intermediate_size"):
        out.intermediate_size = n
    return out.eval()
