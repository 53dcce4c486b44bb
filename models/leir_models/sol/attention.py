"""The attention keep fraction as a knob that really reads less: Quest's
query-aware selection of KV pages for single-token decoding (docs/sol.md,
"Attention: KV pages (Quest)").

SOL keeps the top pages of the KV cache by Quest's bound and masks the
rest, so its attention still reads every key. Here the kept positions are
gathered first and the attention product runs on them alone:

1. **Pages.** After ``SINK_TOKENS`` sink positions, the cache is cut into
   pages of ``PAGE_SIZE`` positions. Per page, kv head and channel, the
   minimum and maximum of the keys (after RoPE, as they sit in the cache) are
   kept in ``KVPages``, computed once when a page is complete and then
   reused for every later token (``LayerBounds.observe``).
2. **Bound.** For query ``q`` and a page with per-channel extremes ``m`` and
   ``M``, ``sum_c max(q_c m_c, q_c M_c)`` is at least ``q . k`` for every key
   ``k`` of the page (Quest). It equals ``relu(q) . M + min(q, 0) . m``, one
   matrix product against ``[M | m]`` (``page_scores``). Under grouped-query
   attention the query heads sharing a kv head share its gathered keys, so
   their bounds are combined by their maximum: a page that one head of the
   group may need is a candidate for all, and the maximum of upper bounds is
   an upper bound of every head's scores on the page.
3. **Selection.** The pages that end before the ``RECENT_TOKENS`` most recent
   positions are candidates; the top ``ceil(keep * n)`` of the ``n``
   candidates by bound are kept per kv head (``select_pages``), with the sink
   positions and the tail (every position after the last candidate page: the
   recent tokens and the incomplete page, ``RECENT_TOKENS`` to
   ``RECENT_TOKENS + PAGE_SIZE - 1`` positions) always kept.
4. **Gather and attend.** ``gather_kv`` copies the kept keys and values into
   ``(B, Hkv, m, hd)`` tensors (one ``index_select`` each) and ``attend`` runs
   scaled dot-product attention over those ``m`` positions only, each kv
   head with its group of query heads (no ``repeat_kv``).

The knob enters transformers' Llama through its attention interface:
``install`` registers ``kv_pages_attention`` under ``ATTENTION_NAME`` and
sets the model to it; a forward pass given ``kv_pages=KVPages(...)`` (any
extra keyword of the model's forward reaches the attention function) uses
the pages, any other pass runs transformers' own SDPA attention unchanged.
So does every multi-token pass (prefill, ranking), a pass with an attention
mask (padding), a keep of 1 and a context shorter than ``min_context``
candidate pages: there the result is the dense model's bit for bit.

Defaults are SOL's (``/work/shared/reference/sol.md``): pages of 8, 4 sink
tokens, the 2 most recent kept. ``ATTENTION_LEVELS`` are three levels, as in
SOL's small variants.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch.nn import functional as F

#: SOL's page size, sink tokens and recent tokens (Quest's selection).
PAGE_SIZE = 8
SINK_TOKENS = 4
RECENT_TOKENS = 2
#: Three levels of the attention keep fraction.
ATTENTION_LEVELS: tuple[float, ...] = (1.0, 0.5, 0.25)
#: Below this context a pass runs dense attention: selecting and gathering
#: pays only on long contexts. Measured on this project's 2-core machine
#: (``bench/sol_attention.py``, docs/sol.md): at SmolLM2-135M's attention
#: shape keep 0.25 is faster than dense from 2,048 tokens (attention alone;
#: a whole decode step from 4,096), keep 0.5 at none up to 4,096; at the
#: shipped model's shape neither up to 4,096 (its context is 1,024).
MIN_CONTEXT = 2048
#: The name ``install`` registers in transformers' attention interface.
ATTENTION_NAME = "leir_kv_pages"


def kept_pages(candidates: int, keep: float) -> int:
    """Pages kept of ``candidates`` at keep fraction ``keep`` (rounded up)."""
    if not 0.0 < keep <= 1.0:
        raise ValueError(f"attention keep fraction must be in (0, 1], got {keep}")
    return min(candidates, math.ceil(keep * candidates - 1e-9))


# ------------------------------------------------------------ page bounds


def page_extremes(keys: torch.Tensor, first: int, count: int, page: int, sinks: int) -> torch.Tensor:
    """``[max | min]`` of the keys of pages ``first .. first + count - 1``:
    ``keys`` ``(B, Hkv, L, hd)`` -> ``(B, Hkv, count, 2 hd)``."""
    start = sinks + first * page
    block = keys[:, :, start:start + count * page].unflatten(2, (count, page))  # (B, Hkv, count, P, hd)
    return torch.cat([block.amax(3), block.amin(3)], dim=-1)


@dataclass
class LayerBounds:
    """One layer's page extremes, ``(B, Hkv, n, 2 hd)``, for the first ``n``
    complete pages of its keys."""

    page: int
    sinks: int
    extremes: torch.Tensor | None = None

    @property
    def count(self) -> int:
        return 0 if self.extremes is None else self.extremes.shape[2]

    def observe(self, keys: torch.Tensor, new: int) -> torch.Tensor:
        """Bring the extremes up to date with ``keys`` ``(B, Hkv, L, hd)``,
        of which the last ``new`` positions are new since the previous call
        (the pass's own tokens; a cache cropped since then shows as pages
        beyond ``L - new``, which are dropped and recomputed). Returns them."""
        length = keys.shape[2]
        valid = max(0, (length - new - self.sinks) // self.page)
        complete = max(0, (length - self.sinks) // self.page)
        if self.count > valid:
            self.extremes = self.extremes[:, :, :valid] if valid else None
        if complete > self.count:
            added = page_extremes(keys, self.count, complete - self.count, self.page, self.sinks)
            self.extremes = added if self.extremes is None else torch.cat([self.extremes, added], dim=2)
        return self.extremes


@dataclass(frozen=True)
class AttentionKeep:
    """The knob's setting: keep ``keep`` of the candidate pages of
    ``page`` positions, with ``sinks`` first and ``recent`` last positions
    always read; dense below ``min_context`` positions (0: wherever a page
    can be dropped)."""

    keep: float = 1.0
    page: int = PAGE_SIZE
    sinks: int = SINK_TOKENS
    recent: int = RECENT_TOKENS
    min_context: int = MIN_CONTEXT

    def __post_init__(self):
        kept_pages(1, self.keep)
        if self.page < 1 or self.sinks < 0 or self.recent < 1 or self.min_context < 0:
            raise ValueError("page size and recent tokens must be at least 1, sinks and min context at least 0")

    def candidates(self, length: int) -> int:
        """Candidate pages of a context of ``length``: those that end before
        the ``recent`` most recent positions."""
        return max(0, (length - self.recent - self.sinks) // self.page)

    def engages(self, length: int) -> bool:
        """Whether a token at context ``length`` reads fewer positions than all."""
        n = self.candidates(length)
        return length >= self.min_context and n >= 1 and kept_pages(n, self.keep) < n


class KVPages:
    """The state of the knob on one key/value cache: its ``setting``, each
    layer's page extremes, and what the last pass read.

    One per cache, handed to every pass on that cache (``kv_pages=`` in the
    model's forward; ``decode.run_tokens(pages=)``): the extremes follow the
    cache's growth and crops by the rule of ``LayerBounds.observe``, which
    holds as long as no pass on the cache goes without it. ``reads`` and
    ``scored``: per layer of the last pass (``start_pass`` clears them), the
    positions whose keys and values the attention product read and the
    candidate pages whose bound was computed (0 for a dense pass)."""

    def __init__(self, setting: AttentionKeep | float = 1.0):
        self.setting = setting if isinstance(setting, AttentionKeep) else AttentionKeep(float(setting))
        self.layers: dict[int, LayerBounds] = {}
        self.reads: dict[int, int] = {}
        self.scored: dict[int, int] = {}
        self.scratch: tuple[torch.Tensor, torch.Tensor] | None = None
        self.last_layout: Layout | None = None

    def layer(self, index: int) -> LayerBounds:
        if index not in self.layers:
            self.layers[index] = LayerBounds(self.setting.page, self.setting.sinks)
        return self.layers[index]

    def scratch_for(self, rows: int, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Two ``(R, hd)`` buffers of at least ``rows`` rows for the gathered
        keys and values, shared by the layers (one runs at a time) and grown
        by doubling."""
        if self.scratch is None or self.scratch[0].shape[0] < rows or self.scratch[0].dtype != like.dtype \
                or self.scratch[0].device != like.device or self.scratch[0].shape[1] != like.shape[-1]:
            size = max(rows, 2 * (0 if self.scratch is None else self.scratch[0].shape[0]))
            self.scratch = (like.new_empty(size, like.shape[-1]), like.new_empty(size, like.shape[-1]))
        return self.scratch

    def layout(self, key: torch.Tensor) -> Layout:
        """The pass's ``Layout`` for a cache shaped as ``key``, kept while
        the shape is the same (every layer of a pass)."""
        b, kv_heads, length, _ = key.shape
        cached, s = self.last_layout, self.setting
        if cached is None or (cached.batch, cached.kv_heads, cached.length, cached.fixed.device) != \
                (b, kv_heads, length, key.device):
            cached = self.last_layout = Layout.of(b, kv_heads, length, s.candidates(length), s.sinks, s.page,
                                                  key.device)
        return cached

    def start_pass(self) -> None:
        self.reads.clear()
        self.scored.clear()


# ------------------------------------------------------------ selection, gather, attention


def page_scores(query: torch.Tensor, extremes: torch.Tensor) -> torch.Tensor:
    """Quest's bound per kv head and page: ``query`` ``(B, H, 1, hd)``,
    ``extremes`` ``(B, Hkv, n, 2 hd)`` -> ``(B, Hkv, n)``, the maximum over the
    group of query heads of ``sum_c max(q_c min_c, q_c max_c)``."""
    b, heads, _, hd = query.shape
    kv_heads, n = extremes.shape[1], extremes.shape[2]
    groups = heads // kv_heads
    q = query.reshape(b * kv_heads, groups, hd)  # head h = kv * G + g, as repeat_kv
    positive = q.clamp(min=0)
    signed = torch.cat([positive, q - positive], dim=-1)  # (B Hkv, G, 2 hd): pairs with [max | min]
    bounds = torch.bmm(signed, extremes.reshape(b * kv_heads, n, 2 * hd).transpose(1, 2))  # (B Hkv, G, n)
    bounds = bounds if groups == 1 else bounds.amax(dim=1, keepdim=True)
    return bounds.view(b, kv_heads, n)


def select_pages(scores: torch.Tensor, keep: float) -> torch.Tensor:
    """Indices ``(B, Hkv, k)`` of the ``k = kept_pages(n, keep)`` highest
    ``scores`` ``(B, Hkv, n)`` per kv head, in no particular order (the
    softmax does not care, and a sort is one more operation per layer)."""
    k = kept_pages(scores.shape[-1], keep)
    return torch.topk(scores, k, dim=-1, sorted=False).indices


@dataclass(frozen=True)
class Layout:
    """What every layer of one pass shares (the same batch, heads and
    context ``length``), computed once per pass: the cache is read as rows
    ``(B Hkv L, hd)``; ``fixed`` ``(B, Hkv, S + tail)`` are the rows of the
    sinks and the tail, ``page_rows`` ``(B, Hkv, 1, P)`` the rows of candidate
    page 0 of each kv head."""

    batch: int
    kv_heads: int
    length: int
    candidates: int
    sinks: int
    page: int
    fixed: torch.Tensor
    page_rows: torch.Tensor

    @classmethod
    def of(cls, batch: int, kv_heads: int, length: int, candidates: int, sinks: int, page: int,
           device=None) -> "Layout":
        heads = torch.arange(0, batch * kv_heads * length, length, device=device).view(batch, kv_heads, 1)
        kept = torch.cat([torch.arange(sinks, device=device),
                          torch.arange(sinks + candidates * page, length, device=device)])
        page_rows = (heads + torch.arange(sinks, sinks + page, device=device))[:, :, None, :]
        return cls(batch, kv_heads, length, candidates, sinks, page, heads + kept, page_rows)

    def rows(self, pages: torch.Tensor) -> torch.Tensor:
        """Cache rows ``(B, Hkv, m)`` read for the kept ``pages`` ``(B, Hkv, k)``:
        the sinks, the pages' positions and the tail, ``m = S + k P + tail``."""
        b, kv_heads, k = pages.shape
        in_pages = torch.add(self.page_rows, pages[..., None], alpha=self.page)  # (B, Hkv, k, P)
        tail = self.fixed.shape[-1] - self.sinks
        return torch.cat([self.fixed.narrow(-1, 0, self.sinks), in_pages.view(b, kv_heads, k * self.page),
                          self.fixed.narrow(-1, self.sinks, tail)], dim=-1)

    def positions(self, rows: torch.Tensor) -> torch.Tensor:
        """Cache positions ``(B, Hkv, m)`` of ``rows``."""
        return rows - self.page_rows[:, :, :, :1].view(self.batch, self.kv_heads, 1) + self.sinks


def gather_kv(key: torch.Tensor, value: torch.Tensor, rows: torch.Tensor,
              scratch: tuple[torch.Tensor, torch.Tensor] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The keys and values at ``rows`` ``(B, Hkv, m)`` (``Layout.rows``) of
    ``key`` and ``value`` ``(B, Hkv, L, hd)``: two ``(B, Hkv, m, hd)`` copies,
    one row ``index_select`` each on the cache seen as ``(B Hkv L, hd)``.
    Written into the first rows of ``scratch`` (two ``(R, hd)`` buffers) when
    given and large enough: a fresh tensor of a megabyte costs its page
    faults on every call, which at long contexts cost more than the copy
    itself (measured; docs/sol.md)."""
    hd = key.shape[-1]  # Llama: keys and values have the same head dim
    flat = rows.view(-1)
    flat_k, flat_v = key.reshape(-1, hd), value.reshape(-1, hd)
    if scratch is not None and scratch[0].shape[0] >= flat.numel():
        k = torch.index_select(flat_k, 0, flat, out=scratch[0].narrow(0, 0, flat.numel()))
        v = torch.index_select(flat_v, 0, flat, out=scratch[1].narrow(0, 0, flat.numel()))
    else:
        k, v = flat_k.index_select(0, flat), flat_v.index_select(0, flat)
    return k.view(*rows.shape, hd), v.view(*rows.shape, hd)


def attend(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, scaling: float | None) -> torch.Tensor:
    """One query token ``(B, H, 1, hd)`` over ``key``/``value`` ``(B, Hkv, m, hd)``:
    ``(B, 1, H, hd)``, the layout transformers' attention functions return.
    Each kv head attends with its ``G = H / Hkv`` query heads as ``G`` rows."""
    b, heads, _, hd = query.shape
    kv_heads = key.shape[1]
    q = query.reshape(b, kv_heads, heads // kv_heads, hd)  # (B, Hkv, G, hd)
    out = F.scaled_dot_product_attention(q, key, value, scale=scaling)  # (B, Hkv, G, hd)
    return out.reshape(b, 1, heads, value.shape[-1])


def paged_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, bounds: LayerBounds,
                    pages: KVPages, scaling: float | None) -> tuple[torch.Tensor, int, int]:
    """Steps 2-4 for one token whose cache holds ``key``/``value``
    ``(B, Hkv, L, hd)`` and whose ``bounds`` are up to date: (output
    ``(B, 1, H, hd)``, positions read per kv head, pages scored). Runs even
    where ``kv_pages_attention`` would go dense (at keep 1 it keeps every page)."""
    layout = pages.layout(key)
    n = layout.candidates
    chosen = select_pages(page_scores(query, bounds.extremes.narrow(2, 0, n)), pages.setting.keep)
    rows = layout.rows(chosen)
    k, v = gather_kv(key, value, rows, pages.scratch_for(rows.numel(), key))
    return attend(query, k, v, scaling), rows.shape[-1], n


def dense_attention(module, query, key, value, attention_mask, **kwargs):
    """What the model ran before ``install``: transformers' SDPA attention."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)


def kv_pages_attention(module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                       attention_mask: torch.Tensor | None, scaling: float | None = None, dropout: float = 0.0,
                       kv_pages: KVPages | None = None, **kwargs):
    """transformers' attention-function signature (``query`` ``(B, H, T,
    hd)``, ``key``/``value`` the whole cache ``(B, Hkv, L, hd)``); the module
    doc says when it gathers and when it runs dense."""
    if kv_pages is None:
        return dense_attention(module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, **kwargs)
    layer, length = module.layer_idx, key.shape[2]
    bounds = kv_pages.layer(layer)
    bounds.observe(key, query.shape[2])
    if query.shape[2] != 1 or attention_mask is not None or dropout or not kv_pages.setting.engages(length):
        kv_pages.reads[layer], kv_pages.scored[layer] = length, 0
        return dense_attention(module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, **kwargs)
    out, read, scored = paged_attention(query, key, value, bounds, kv_pages, scaling)
    kv_pages.reads[layer], kv_pages.scored[layer] = read, scored
    return out, None


# ------------------------------------------------------------ the model


def register() -> None:
    """Register ``kv_pages_attention`` (and SDPA's mask for it) with transformers."""
    from transformers import AttentionInterface, AttentionMaskInterface
    from transformers.masking_utils import sdpa_mask

    AttentionInterface.register(ATTENTION_NAME, kv_pages_attention)
    AttentionMaskInterface.register(ATTENTION_NAME, sdpa_mask)


def install(model):
    """Set ``model``'s attention to ``kv_pages_attention`` (idempotent): its
    passes are unchanged unless given ``kv_pages=``. Only a model on SDPA
    attention, whose dense fall-back is exactly that. Returns ``model``."""
    current = model.config._attn_implementation
    if current == ATTENTION_NAME:
        return model
    if current != "sdpa":
        raise ValueError(f"the attention keep knob replaces SDPA attention, and this model runs {current!r}")
    register()
    model.set_attn_implementation(ATTENTION_NAME)
    return model


def uninstall(model):
    """Back to SDPA attention."""
    if model.config._attn_implementation == ATTENTION_NAME:
        model.set_attn_implementation("sdpa")
    return model


__all__ = ["ATTENTION_LEVELS", "ATTENTION_NAME", "AttentionKeep", "KVPages", "LayerBounds", "Layout", "MIN_CONTEXT",
           "PAGE_SIZE", "RECENT_TOKENS", "SINK_TOKENS", "attend", "gather_kv", "install", "kept_pages",
           "kv_pages_attention", "page_extremes", "page_scores", "paged_attention", "register", "select_pages",
           "uninstall"]
