"""The embedded default: the model's shape and its training, with the
reason for each figure.

Everything here is plain data (no torch import): ``MODEL`` holds the
``transformers.LlamaConfig`` keywords, ``TRAIN`` the training settings, and
``llama_config`` turns the first into a ``LlamaConfig`` (importing
transformers only then). A Llama, not a bespoke transformer: the same code
path loads SmolLM2-135M, which is a Llama too (the larger tier of issue 15).

Sizing. The default must train from scratch on a 2-core laptop-class CPU
within about an hour and answer fast there. A 7M-parameter Llama was
measured at about 1,500 tokens/s of training on this 2-core machine with
batches of 4 x 512 tokens, so an hour is about 5M tokens: roughly one
token per parameter, the scale at which a model this size still learns
something (Chinchilla's 20 tokens per parameter would need a day). With
the committed sample's few hundred states, a step of training sees the same
programs many times; the figures in docs/model.md say how far that goes.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

#: ``transformers.LlamaConfig`` keywords of the embedded default (5.1M
#: parameters with the committed sample's 1,064-token vocabulary, 5.9M
#: with a full 4,096; ``vocab_size`` is set from the trained tokenizer).
MODEL: dict[str, Any] = {
    # 256 wide, 6 deep: ~0.8M parameters per layer. Depth over width at this
    # size (MobileLLM's finding for sub-billion models), and 256 keeps each
    # matrix multiply large enough to use the CPU's vector units.
    "hidden_size": 256,
    "num_hidden_layers": 6,
    # 4 heads of 64: head dimension 64 as in Llama and SmolLM2 (RoPE works on
    # pairs of dimensions; fewer, wider heads are cheaper on a CPU).
    "num_attention_heads": 4,
    # No grouped-query attention: with 4 heads the key/value cache is tiny,
    # and GQA saves memory only at lengths we never reach.
    "num_key_value_heads": 4,
    # SwiGLU's 8/3 x width, rounded up to a multiple of 64 (704 = 11 x 64).
    "intermediate_size": 704,
    # A prompt is a program (up to ~400 tokens in the committed sample, ~2,000
    # for the largest convolution of the full build), the target and machine
    # facts (~60), then a step (~30) and its reasoning (~150). 1,024 covers
    # all but the largest programs; longer prompts lose their start (the
    # header), never the program's end.
    "max_position_embeddings": 1024,
    # Tied input and output embeddings: a 4,096 x 256 matrix is a sixth of
    # the model; untied, it would be two.
    "tie_word_embeddings": True,
    # Llama's defaults otherwise: RMSNorm, SiLU, RoPE with base 10,000.
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "hidden_act": "silu",
    # No dropout: a small model on a small data set is regularised by weight
    # decay and early stopping (the best validation step is kept); dropout
    # would also make training less reproducible across thread counts.
    "attention_dropout": 0.0,
    "initializer_range": 0.02,
}

#: Special tokens of the tokenizer, in id order (ids 0..4).
SPECIAL_TOKENS = ("<|pad|>", "<|bos|>", "<|eos|>", "<|step|>", "<|reason|>")


@dataclass(frozen=True)
class TrainConfig:
    """Training settings; ``TRAIN`` is the default, ``replace`` changes it."""

    #: Seed of everything random: the tokenizer's corpus order, the weights'
    #: initialisation and the batches. Same seed, same data, same thread
    #: count: the same weights, bit for bit (tested).
    seed: int = 0
    #: Optimizer steps. 400 steps of 4 states (~2,650 tokens a step: each
    #: state's prompt once, its ~10 measured candidates as branches) is about
    #: 19 minutes on one core of this machine (~950 tokens/s with the other
    #: core busy; docs/model.md has the run): about 3 passes over the shipped
    #: data's 520 training states, past which the validation ranking loss
    #: stopped improving.
    steps: int = 400
    #: States per step: 4 sequences of ~400 tokens (the prompt and every
    #: measured candidate as a branch after it), the batch size the 7M
    #: measurement used (4 x 512 tokens).
    batch_states: int = 4
    #: Peak learning rate. 1e-3 is nanoGPT's for its small (~10M)
    #: character-level model; the larger models' 6e-4 was slower to converge
    #: here.
    learning_rate: float = 1e-3
    #: Cosine decay to a tenth of the peak (Chinchilla's choice), after a
    #: linear warm-up of 5% of the steps (at least 1).
    min_lr_ratio: float = 0.1
    warmup_fraction: float = 0.05
    #: AdamW as in nanoGPT: beta2 0.99 for small batches (0.95 is for large
    #: ones), weight decay 0.1 on matrices only (not on norms or biases).
    beta1: float = 0.9
    beta2: float = 0.99
    weight_decay: float = 0.1
    #: Gradients clipped to norm 1: one long program cannot blow up a step.
    grad_clip: float = 1.0
    #: The ranking loss's weight against the language-model loss. The ranking
    #: loss is a pairwise logistic loss on the candidates' log-likelihoods
    #: (Bradley-Terry: the faster step should be more likely than the slower
    #: one); 1 weighs a pair like a token's cross-entropy.
    rank_weight: float = 1.0
    #: A pair counts only if the faster step is at least this much faster
    #: (latency ratio): 1.05, past the ~3% the dataset calls noise
    #: (docs/dataset.md: "within 3%").
    pair_margin: float = 1.05
    #: A state's best step is a target (the language-model loss learns to
    #: write it, then its reasoning) only if it made the program at least
    #: this much faster; states where every step was slower still give
    #: ranking pairs, never a target.
    min_speedup: float = 1.03
    #: Write the reasoning after the step in the target (the model learns to
    #: explain; ranking reads only the step's likelihood).
    reasoning: bool = True
    #: The reasoning targets as the dataset stores them, closing with the
    #: measured latency (and, for a slower step, the costs named because it
    #: measured slower); False: without those sentences
    #: (``leir.explain.unmeasured``), the reasoning the model is asked to
    #: write and is checked against (``reasoning.py``), where no latency is
    #: known yet: a latency sentence it learnt to write is always dropped.
    #: True is how the shipped model was trained (docs/model.md).
    reasoning_measured: bool = True
    #: Besides the positive's, the reasoning of this many other measured
    #: candidates of each state is a language-model target too, after their
    #: step (drawn once per state with a generator seeded by ``seed`` and the
    #: state's program). Their step stays no target (a slower step is never
    #: learnt as one to write: it only enters the ranking loss); the
    #: reasoning is the analysis of that step, true whatever its speed. The
    #: committed training split has 212 positives, so without these the
    #: model reads at most 212 reasoning texts an epoch. 0: the positive's only.
    reasoning_branches: int = 0
    #: Evaluation of the validation loss every this many steps (and at the
    #: last); the curve goes to val_loss.png.
    eval_every: int = 25
    #: Which validation figure picks the weights kept: "rank" (the ranking
    #: loss alone, the default) or "loss" (LM + ranking). With a few hundred
    #: training pairs the ranking loss is lowest long before the LM loss
    #: (docs/model.md: step 400 of 850), and a ranker is used for its ranking:
    #: the shipped model is kept on it.
    select: str = "rank"
    #: Tokens of one sequence at most (prompt + step + reasoning); longer
    #: prompts are cut from the left, as at inference.
    max_tokens: int = 1024
    #: Vocabulary of the byte-level BPE (``tokenizer.py``) at most: 4,096
    #: holds LEIR's keywords, loop headers and index patterns and the
    #: reasoning's words; digits stay single tokens, so sizes never seen
    #: still tokenize alike. The trainer stops when no pair of tokens occurs
    #: twice: on the committed sample's training split that is at 1,064.
    vocab_size: int = 4096
    #: torch threads; None: torch's default (the machine's cores).
    threads: int | None = None
    #: The model's shape (``MODEL`` overridden by these keys); from scratch only.
    model: dict[str, Any] = field(default_factory=dict)
    #: A model directory to start from (``store.load_model``: its tokenizer,
    #: config and weights) instead of a new tokenizer and random weights:
    #: the larger tier fine-tunes SmolLM2 as ``leir model import-smollm2``
    #: wrote it (``pretrained.py``). None: from scratch.
    init: str | None = None
    #: With ``init``: 0 trains every weight (a full fine-tune); r > 0 trains
    #: rank-r LoRA adapters (peft) on every attention and MLP projection
    #: (``LORA_TARGETS``), and the embedding rows of the five special tokens
    #: (SmolLM2's were other tokens: ``pretrained.RENAMED``), everything else
    #: frozen; the adapters are merged into the weights before saving, so the
    #: directory written is a plain model that ``load_model`` reads. LoRA's
    #: alpha is 2r: the adapters' output is scaled by alpha / r = 2 whatever
    #: r is, so changing r does not change the learning rate that suits it.
    lora_rank: int = 0
    #: Where the model trains: "cpu", or "cuda" ("cuda:N") where torch sees a
    #: GPU. The same seed gives the same weights bit for bit on the CPU
    #: (tested); on a GPU that is not promised (cuBLAS may reorder sums).
    device: str = "cpu"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def with_(self, **changes) -> "TrainConfig":
        return replace(self, **changes)


TRAIN = TrainConfig()

#: The projections LoRA adapts (``TrainConfig.lora_rank``): all seven
#: matrices of each Llama layer, as QLoRA found best (adapting attention
#: alone lost quality).
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")

#: Peak learning rates when fine-tuning (``init``; ``leir model train
#: --init`` uses them unless ``--lr`` is given), where ``TRAIN``'s 1e-3 is
#: for random weights. Full: a tenth of it, so that a few hundred steps on a
#: few hundred states do not wash out what SmolLM2 learned. LoRA: the
#: adapters start at zero and stay small, so a higher rate. Not tuned: no
#: fine-tuning run of SmolLM2 has been made yet (docs/model.md).
FINE_TUNE_LEARNING_RATE = {"full": 1e-4, "lora": 5e-4}

#: A tiny shape for tests: trains a few steps in about a second.
TINY_MODEL: dict[str, Any] = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
                              "num_key_value_heads": 2, "intermediate_size": 64, "max_position_embeddings": 1024}


def model_keywords(overrides: dict[str, Any] | None = None, vocab_size: int | None = None) -> dict[str, Any]:
    """``MODEL`` with ``overrides`` and the vocabulary's size and special ids."""
    kw = {**MODEL, **(overrides or {})}
    if vocab_size is not None:
        kw["vocab_size"] = vocab_size
    kw.update(pad_token_id=0, bos_token_id=1, eos_token_id=2)
    return kw


def llama_config(overrides: dict[str, Any] | None = None, vocab_size: int | None = None):
    """The ``transformers.LlamaConfig`` of the default with ``overrides``."""
    from transformers import LlamaConfig

    return LlamaConfig(**model_keywords(overrides, vocab_size))


def parameter_count(kw: dict[str, Any]) -> int:
    """Parameters of a Llama with these keywords, without building it."""
    d, n, ff, v = kw["hidden_size"], kw["num_hidden_layers"], kw["intermediate_size"], kw["vocab_size"]
    head = d // kw["num_attention_heads"]
    attn = d * d * 2 + d * head * kw["num_key_value_heads"] * 2
    layer = attn + 3 * d * ff + 2 * d
    return v * d * (1 if kw.get("tie_word_embeddings", True) else 2) + n * layer + d
