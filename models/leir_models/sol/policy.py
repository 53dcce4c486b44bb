"""The SOL policy: a small network that picks, per decoded token, how much
of the frozen model's MLP compute that token gets (docs/sol.md).

The action space is ``ACTIONS``: one MLP keep fraction (``knobs.MLP_LEVELS``)
applied to every layer for that token. SOL's own policy is a one-layer
causal transformer of 6-9 M parameters over 1,560 actions; ours picks among
3 actions, and its cost counts against the savings, so it is a two-layer
MLP of width 64 (``PolicyConfig``), with no state of its own beyond the
features below.

Inputs per step (``features``), concatenated, shapes for one token:

- the frozen model's last hidden state from the previous step (the final
  norm's output that produced the current token's logits), ``(D,)``;
- the current token's input embedding, ``(D,)``;
- the budget target (the episode's net keep to reach, in [0.5, 1]), ``(1,)``;
- the running deviation: the realized net keep of the episode's steps so
  far minus the target (0 at the first step), ``(1,)``;
- the position in the episode, ``step / episode``, in [0, 1), ``(1,)``;
- the previous action, one-hot (all zeros at the first step), ``(A,)``.

The two ``D``-wide vectors are layer-normalised (no affine) before the
first layer: the hidden state's scale differs between models, the budget
scalars are on [0, 1].

Output: logits over ``ACTIONS`` plus SOL's budget-dependent bias, a learned
linear term in the target: ``logits += w * target + b`` (``w``, ``b`` of
shape ``(A,)``). Initialised by construction (``budget_bias_init``) with
``w_a = s * keep_a`` and ``b_a = -s * keep_a**2 / 2``, which is
``-s/2 * (target - keep_a)**2`` up to a term common to all actions: the
level nearest the target gets the largest bias, and with ``s = 32`` an
untrained policy's expected net keep is within ~0.07 of the target over
[0.5, 1] (0.57 at 0.5, 0.69 at 0.7, 0.84 at 0.85, 0.93 at 1). The network's
own output layer starts small (x 0.1), so it is the bias that does this
(tested); training then only has to learn where to spend. (A first run with
a weaker bias, a logit gap of 1 at the extremes, still missed the targets
after 300 updates: 0.67 sampled at 0.5.)

**Net keep** (``net_keep``) is the fraction of the MLP's FLOPs a token keeps:
``keep_width(I, keep) / I`` (the kept channels over all channels; exactly the
level for SmolLM2-135M's 1536 and our 704 at 0.5, within 1/I otherwise).
Attention FLOPs are *not* in the net keep: every action runs attention
densely, so the net keep is the MLP share only, as SOL's proxy is per knob;
``decode.flops_per_token`` counts attention (and the output head) in the
total FLOPs a token costs, which is what the measured figures report.

Saved as ``policy.safetensors`` (the weights, and the model's channel order
the policy was trained with, ``channel_order.<layer>``) and ``policy.json``
(the ``PolicyConfig``): no pickle, ``torch.load`` is never called.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from leir_models.sol.knobs import MLP_LEVELS, keep_width

#: The actions: one MLP keep fraction for every layer, for one token.
ACTIONS: tuple[float, ...] = MLP_LEVELS

POLICY_FILE = "policy.safetensors"
CONFIG_FILE = "policy.json"
#: The budget bias's sharpness at init (``s`` above): at a target equal to a
#: level, its neighbours 0.25 away are ``s / 32 = 1`` logit below it.
BIAS_SCALE = 32.0
#: Scalar inputs after the two D-wide vectors: target, deviation, position.
SCALARS = 3


def net_keep(action: int, intermediate: int | None = None) -> float:
    """The share of the MLP FLOPs action ``action`` keeps: its level, or
    with the model's ``intermediate`` size the exact share of channels kept
    (``keep_width(I, level) / I``). Attention is not counted (module doc)."""
    level = ACTIONS[action]
    return level if intermediate is None else keep_width(intermediate, level) / intermediate


@dataclass(frozen=True)
class PolicyConfig:
    #: The frozen model's hidden size D (the hidden state and embedding widths).
    hidden_size: int
    #: Width of the policy's two hidden layers: 64 keeps its cost under 1% of
    #: our 6-layer 256-wide model's FLOPs per token (``policy_flops``).
    width: int = 64
    #: The keep levels, in action order.
    actions: tuple[float, ...] = ACTIONS
    #: Tokens per episode (the position feature is ``step / episode``).
    episode: int = 16

    def to_json(self) -> dict:
        return {**asdict(self), "actions": list(self.actions), "format": "leir-sol-policy/1"}

    @classmethod
    def from_json(cls, d: dict) -> "PolicyConfig":
        return cls(hidden_size=int(d["hidden_size"]), width=int(d["width"]), actions=tuple(float(a) for a in d["actions"]),
                   episode=int(d["episode"]))


class SolPolicy(nn.Module):
    """Logits over ``config.actions`` for one or more steps' ``features``."""

    def __init__(self, config: PolicyConfig):
        super().__init__()
        self.config = config
        d, w, a = config.hidden_size, config.width, len(config.actions)
        self.in_features = 2 * d + SCALARS + a
        self.fc1 = nn.Linear(self.in_features, w)
        self.fc2 = nn.Linear(w, w)
        self.head = nn.Linear(w, a)
        #: The budget head: a bias per action, linear in the target.
        self.budget_w = nn.Parameter(torch.empty(a))
        self.budget_b = nn.Parameter(torch.empty(a))
        with torch.no_grad():
            self.head.weight.mul_(0.1)
            self.head.bias.zero_()
        self.budget_bias_init()

    @torch.no_grad()
    def budget_bias_init(self, scale: float = BIAS_SCALE) -> None:
        levels = torch.tensor(self.config.actions)
        self.budget_w.copy_(scale * levels)
        self.budget_b.copy_(-scale * levels ** 2 / 2)

    def budget_bias(self, target: torch.Tensor) -> torch.Tensor:
        """``(..., A)``: the budget-dependent bias at ``target`` ``(...)``."""
        return target[..., None] * self.budget_w + self.budget_b

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x``: ``(..., in_features)`` (``features``); returns ``(..., A)`` logits."""
        d = self.config.hidden_size
        hidden = F.layer_norm(x[..., :d], (d,))  # (..., D)
        embed = F.layer_norm(x[..., d:2 * d], (d,))  # (..., D)
        rest = x[..., 2 * d:]  # (..., 3 + A): target, deviation, position, previous action
        z = torch.cat([hidden, embed, rest], dim=-1)
        z = F.silu(self.fc2(F.silu(self.fc1(z))))  # (..., W)
        return self.head(z) + self.budget_bias(rest[..., 0])

    def features(self, hidden: torch.Tensor, embed: torch.Tensor, target: float, deviation: float, position: float,
                 previous: int | None) -> torch.Tensor:
        """One step's input vector ``(in_features,)`` from ``hidden`` and
        ``embed`` ``(D,)`` (module doc); ``previous``: the last action, None at
        an episode's first step."""
        return torch.cat([hidden.detach().float().reshape(-1), embed.detach().float().reshape(-1),
                          torch.from_numpy(self.state_features(target, deviation, position, previous))])

    def state_features(self, target: float, deviation: float, position: float, previous: int | None) -> np.ndarray:
        """The last ``SCALARS + A`` entries of ``features``: the scalars and
        the previous action's one-hot (zero at an episode's first step)."""
        state = np.zeros(SCALARS + len(self.config.actions), np.float32)
        state[:SCALARS] = (target, deviation, position)
        if previous is not None:
            state[SCALARS + previous] = 1.0
        return state

    def policy_flops(self) -> int:
        """FLOPs of one step: 2 x multiply-adds of the three layers, plus the
        budget bias's multiply-add per action; the layer norms and SiLU
        (elementwise, ~10 x (2D + W) operations) are not counted."""
        macs = sum(m.in_features * m.out_features for m in (self.fc1, self.fc2, self.head))
        return 2 * macs + 2 * len(self.config.actions)

    def parameter_count(self) -> int:
        return sum(p.numel() for p in self.parameters())

    # -------------------------------------------------------- saving

    def save(self, out: str | Path, channel_orders: list[torch.Tensor] | None = None) -> None:
        """``out/policy.safetensors`` and ``out/policy.json``; ``channel_orders``
        (``knobs.reorder_channels``' result) are stored with the weights: the
        policy was trained on the model with its channels in that order."""
        from safetensors.torch import save_file

        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        tensors = {f"policy.{k}": v.detach().contiguous() for k, v in self.state_dict().items()}
        for i, order in enumerate(channel_orders or []):
            tensors[f"channel_order.{i}"] = order.detach().to(torch.int64).contiguous()
        save_file(tensors, str(out / POLICY_FILE), metadata={"format": "leir-sol-policy/1"})
        (out / CONFIG_FILE).write_text(json.dumps(self.config.to_json(), indent=1) + "\n", encoding="utf-8")


def load_policy(path: str | Path) -> tuple[SolPolicy, list[torch.Tensor]]:
    """(policy, channel orders) from a directory ``SolPolicy.save`` wrote;
    raises FileNotFoundError naming a missing file."""
    from safetensors.torch import load_file

    path = Path(path)
    for name in (POLICY_FILE, CONFIG_FILE):
        if not (path / name).is_file():
            raise FileNotFoundError(f"{path / name} is missing (train one with `leir model train-sol --out {path}`)")
    config = PolicyConfig.from_json(json.loads((path / CONFIG_FILE).read_text(encoding="utf-8")))
    tensors = load_file(str(path / POLICY_FILE))
    policy = SolPolicy(config)
    policy.load_state_dict({k[len("policy."):]: v for k, v in tensors.items() if k.startswith("policy.")}, strict=True)
    orders = [tensors[f"channel_order.{i}"] for i in range(sum(k.startswith("channel_order.") for k in tensors))]
    return policy.eval(), orders
