"""leir_models.sol.attention, the attention keep fraction (Quest's KV page
selection, issue 16): the bound is an upper bound of every q . k of its
page, the pages kept are those of highest bound (against a brute-force
reference), the sinks and the recent tokens are always read, keep 1 is
dense attention, the query heads of a kv head share its pages, the page
extremes follow the cache as it grows and is cropped, and a smaller keep
really hands the attention kernel fewer keys (the shapes of the SDPA calls
that ran, seen by a dispatch mode); the decode loop counts the reads."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

from leir_models.sol import attention as at  # noqa: E402
from leir_models.sol import decode  # noqa: E402

torch.set_num_threads(1)

P, S, R = at.PAGE_SIZE, at.SINK_TOKENS, at.RECENT_TOKENS


def brute_page_bounds(query, keys, page=P, sinks=S):
    """Quest's bound per query head and complete page, elementwise as
    written: ``sum_c max(q_c min_c, q_c max_c)``; ``(H, n)`` for batch 0."""
    heads, kv_heads = query.shape[1], keys.shape[1]
    group = heads // kv_heads
    n = (keys.shape[2] - sinks) // page
    out = torch.empty(heads, n)
    for h in range(heads):
        q = query[0, h, 0]
        for j in range(n):
            block = keys[0, h // group, sinks + j * page: sinks + (j + 1) * page]
            lo, hi = block.min(0).values, block.max(0).values
            out[h, j] = torch.maximum(q * lo, q * hi).sum()
    return out


def random_case(length, heads=4, kv_heads=2, hd=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(1, heads, 1, hd, generator=g)
    k = torch.randn(1, kv_heads, length, hd, generator=g)
    v = torch.randn(1, kv_heads, length, hd, generator=g)
    return q, k, v


def test_bound_is_an_upper_bound_of_every_score_in_its_page():
    q, k, _ = random_case(S + 12 * P + 5)
    bounds = brute_page_bounds(q, k)
    group = q.shape[1] // k.shape[1]
    for h in range(q.shape[1]):
        scores = k[0, h // group] @ q[0, h, 0]  # (L,)
        for j in range(bounds.shape[1]):
            assert scores[S + j * P: S + (j + 1) * P].max() <= bounds[h, j] + 1e-5
    # the matrix form of the module is the same bound, the group combined by its maximum
    extremes = at.page_extremes(k, 0, bounds.shape[1], P, S)
    combined = at.page_scores(q, extremes)[0]  # (Hkv, n)
    want = bounds.view(k.shape[1], group, -1).amax(1)
    assert torch.allclose(combined, want, atol=1e-5)
    # with pages of one key, min = max = k and the bound is q . k itself
    one = at.page_scores(q, at.page_extremes(k, 0, k.shape[2] - S, 1, S))[0]
    exact = torch.stack([(k[0, kv, S:] @ q[0, kv * group: (kv + 1) * group, 0].T).amax(1) for kv in range(2)])
    assert torch.allclose(one, exact, atol=1e-5)


@pytest.mark.parametrize("keep", [0.5, 0.25, 0.1])
@pytest.mark.parametrize("length", [S + 3 * P + R, S + 10 * P + R + 5, S + 40 * P + 7])
def test_kept_pages_are_those_of_highest_bound(keep, length):
    q, k, _ = random_case(length, seed=length)
    pages = at.KVPages(at.AttentionKeep(keep))
    n = pages.setting.candidates(length)
    extremes = pages.layer(0).observe(k, length)
    chosen = at.select_pages(at.page_scores(q, extremes[:, :, :n]), keep)
    bounds = brute_page_bounds(q, k)[:, :n]
    group = q.shape[1] // k.shape[1]
    want_k = math.ceil(keep * n)
    for kv in range(k.shape[1]):
        per_page = [max(float(bounds[h, j]) for h in range(kv * group, (kv + 1) * group)) for j in range(n)]
        top = sorted(range(n), key=lambda j: -per_page[j])[:want_k]
        assert sorted(chosen[0, kv].tolist()) == sorted(top)


@pytest.mark.parametrize("keep", [0.5, 0.25])
def test_sinks_and_recent_tokens_are_always_read(keep):
    setting = at.AttentionKeep(keep)
    for length in range(S + P + R, S + 9 * P + R + 1):
        q, k, _ = random_case(length, seed=length)
        # make the sink and recent keys the least attractive: they are read anyway
        k[:, :, :S] = -10 * q[0, 0, 0]
        k[:, :, -R:] = -10 * q[0, 0, 0]
        pages = at.KVPages(setting)
        n = setting.candidates(length)
        chosen = at.select_pages(at.page_scores(q, pages.layer(0).observe(k, length)[:, :, :n]), keep)
        layout = pages.layout(k)
        positions = layout.positions(layout.rows(chosen))
        tail = length - S - n * P
        assert R <= tail < R + P
        assert positions.shape[-1] == S + math.ceil(keep * n) * P + tail
        for kv in range(k.shape[1]):
            got = positions[0, kv].tolist()
            assert len(set(got)) == len(got) and all(0 <= p < length for p in got)
            assert set(range(S)) <= set(got) and set(range(length - R, length)) <= set(got)
            want = set(range(S)) | set(range(S + n * P, length))
            want |= {S + j * P + i for j in chosen[0, kv].tolist() for i in range(P)}
            assert set(got) == want


def eager_reference(q, k, v):
    """Attention of one token, each query head h on kv head h // G (transformers' repeat_kv)."""
    group = q.shape[1] // k.shape[1]
    kk, vv = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    w = torch.softmax((q @ kk.transpose(-1, -2)) / math.sqrt(q.shape[-1]), dim=-1)
    return (w @ vv).transpose(1, 2)  # (B, 1, H, hd)


def test_gqa_heads_attend_with_their_own_kv_head():
    q, k, v = random_case(50, heads=6, kv_heads=2, hd=8)
    got = at.attend(q, k, v, 8 ** -0.5)
    assert torch.allclose(got, eager_reference(q, k, v), atol=1e-6)
    # a grouping by h % Hkv instead of h // G would not match
    wrong = eager_reference(q[:, [0, 2, 4, 1, 3, 5]], k, v)[:, :, [0, 3, 1, 4, 2, 5]]
    assert not torch.allclose(got, wrong, atol=1e-3)


def test_gathered_rows_are_the_cache_at_the_kept_positions():
    q, k, v = random_case(S + 20 * P + 3)
    pages = at.KVPages(0.25)
    n = pages.setting.candidates(k.shape[2])
    chosen = at.select_pages(at.page_scores(q, pages.layer(0).observe(k, k.shape[2])[:, :, :n]), 0.25)
    layout = pages.layout(k)
    rows = layout.rows(chosen)
    positions = layout.positions(rows)
    for scratch in (None, pages.scratch_for(rows.numel(), k)):
        gk, gv = at.gather_kv(k, v, rows, scratch)
        for kv in range(k.shape[1]):
            assert torch.equal(gk[0, kv], k[0, kv, positions[0, kv]])
            assert torch.equal(gv[0, kv], v[0, kv, positions[0, kv]])


def test_keep_one_through_the_gather_is_dense_attention():
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    q, k, v = random_case(S + 30 * P + 4)

    class Module:
        num_key_value_groups, is_causal, training = 2, True, False

    pages = at.KVPages(1.0)
    bounds = pages.layer(0)
    bounds.observe(k, k.shape[2])
    out, read, scored = at.paged_attention(q, k, v, bounds, pages, 16 ** -0.5)
    dense = sdpa_attention_forward(Module(), q, k, v, None, scaling=16 ** -0.5)[0]
    assert read == k.shape[2] and scored == 30
    assert torch.allclose(out, dense, atol=1e-6)
    assert torch.allclose(out, eager_reference(q, k, v), atol=1e-6)


def test_page_extremes_follow_growth_and_crops():
    _, k, _ = random_case(S + 9 * P + 3, seed=3)
    bounds = at.LayerBounds(P, S)
    for length in range(1, k.shape[2] + 1):  # one token at a time
        bounds.observe(k[:, :, :length], 1)
    full = at.page_extremes(k, 0, 9, P, S)
    assert torch.equal(bounds.extremes, full)
    # the cache cropped to 30 positions, then grown again with other keys: pages from position 30 on
    # are recomputed, whether the shorter cache was seen (token by token) or not (one pass of 49 tokens,
    # as replay_dense does after a rollout)
    other = k.clone()
    other[:, :, 30:] = torch.randn_like(other[:, :, 30:])
    want = at.page_extremes(other, 0, 9, P, S)
    assert not torch.equal(want, full)
    bounds.observe(other[:, :, :31], 1)
    bounds.observe(other, other.shape[2] - 31)
    assert torch.equal(bounds.extremes, want)
    unseen = at.LayerBounds(P, S)
    unseen.observe(k, k.shape[2])
    unseen.observe(other, other.shape[2] - 30)
    assert torch.equal(unseen.extremes, want)


# ------------------------------------------------------------ in the model


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, head_dim=16, vocab_size=64, max_position_embeddings=512,
                      eos_token_id=2, bos_token_id=1, pad_token_id=0, attn_implementation="sdpa")
    model = decode.prepare(LlamaForCausalLM(cfg).eval())
    prompt = torch.randint(3, 64, (140,), generator=torch.Generator().manual_seed(1)).tolist()
    return model, prompt


class SdpaKeys(TorchDispatchMode):
    """The key lengths of the scaled dot-product attention kernels that ran."""

    def __init__(self):
        super().__init__()
        self.keys = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if "scaled_dot_product" in func.__name__:
            self.keys.append(args[1].shape[-2])
        return func(*args, **(kwargs or {}))


def test_keep_one_installed_is_the_plain_model_bit_for_bit(tiny):
    model, prompt = tiny
    at.uninstall(model)
    want = decode.generate(model, prompt, 6, stop_ids=[])
    state = decode.prefill(model, prompt)
    plain = decode.teacher_forced(model, state, want.tokens, [0] * 5)
    at.install(model)
    got = decode.generate(model, prompt, 6, stop_ids=[], attention_keep=at.AttentionKeep(1.0))
    state = decode.prefill(model, prompt)
    pages = at.KVPages(1.0)
    _, logits, cache = decode.run_tokens(model, [want.tokens[0]], state.length, state.cache, 1.0, pages)
    assert got.tokens == want.tokens and got.keys_read == 1.0
    assert sorted(pages.reads.values()) == [len(prompt) + 1] * 2
    decode.restore(state)
    again = decode.teacher_forced(model, state, want.tokens, [0] * 5)
    assert torch.equal(again.token_logprobs, plain.token_logprobs)


def test_the_gathered_path_in_the_model_keeping_every_page_is_dense(tiny, monkeypatch):
    model, prompt = tiny
    at.install(model)
    state = decode.prefill(model, prompt)
    _, dense, _ = decode.run_tokens(model, [5], state.length, state.cache, 1.0)
    decode.restore(state)
    monkeypatch.setattr(at.AttentionKeep, "engages", lambda self, length: True)
    pages = at.KVPages(at.AttentionKeep(0.999999))  # ceil(0.999999 n) = n: every page, through the gather
    _, gathered, _ = decode.run_tokens(model, [5], state.length, state.cache, 1.0, pages)
    decode.restore(state)
    n = pages.setting.candidates(state.length + 1)
    assert pages.scored == {0: n, 1: n} and pages.reads == {0: state.length + 1, 1: state.length + 1}
    assert torch.allclose(gathered, dense, atol=1e-5)


@pytest.mark.parametrize("keep", [0.5, 0.25])
def test_a_smaller_keep_hands_the_kernel_fewer_keys(tiny, keep):
    model, prompt = tiny
    setting = at.AttentionKeep(keep, min_context=0)
    at.install(model)
    state = decode.prefill(model, prompt)
    pages = at.KVPages(setting)
    length = state.length + 1
    n = setting.candidates(length)
    m = S + math.ceil(keep * n) * P + (length - S - n * P)
    with SdpaKeys() as seen:
        decode.run_tokens(model, [5], state.length, state.cache, 1.0, pages)
    assert seen.keys == [m, m]  # one kernel per layer, over the kept positions only
    assert m < length * (keep + 0.1)
    assert pages.reads == {0: m, 1: m} and pages.scored == {0: n, 1: n}
    decode.restore(state)
    with SdpaKeys() as dense:
        decode.run_tokens(model, [5], state.length, state.cache, 1.0)
    assert dense.keys == [length, length]


def test_decode_counts_the_positions_read(tiny):
    model, prompt = tiny
    cfg = model.config
    setting = at.AttentionKeep(0.5, min_context=0)
    out = decode.generate(model, prompt, 9, "static", action=2, stop_ids=[], attention_keep=setting)
    flops = reads = readable = 0
    for i in range(len(out.actions)):
        length = len(prompt) + i + 1
        n = setting.candidates(length)
        m = S + math.ceil(0.5 * n) * P + (length - S - n * P)
        flops += decode.flops_per_token(cfg, length, 0.5, cfg.num_hidden_layers * m, cfg.num_hidden_layers * n)
        reads, readable = reads + m, readable + length
    assert out.flops_per_token == flops / len(out.actions)
    assert out.keys_read == pytest.approx(reads / readable)
    assert 0.5 < out.keys_read < 0.6 and out.attention_keep == 0.5
    static = decode.generate(model, prompt, 9, "static", action=2, stop_ids=[])
    saved = out.flops_dense - out.flops_per_token - (static.flops_dense - static.flops_per_token)
    assert saved > 0  # attention FLOPs saved beyond the MLP's, net of the bounds
    # at a context too short for a page to drop, the knob reads everything; so it does below
    # min_context (by default MIN_CONTEXT, 2,048: where it starts to pay)
    short = decode.generate(model, prompt[:S + P + R - 1], 3, stop_ids=[], attention_keep=setting)
    assert short.keys_read == 1.0
    default = decode.generate(model, prompt, 9, "static", action=2, stop_ids=[], attention_keep=at.AttentionKeep(0.5))
    assert len(prompt) + 9 < at.MIN_CONTEXT
    assert default.keys_read == 1.0 and default.flops_per_token == static.flops_per_token
    assert default.tokens == static.tokens


def test_teacher_forced_at_a_kept_fraction_reads_less_and_restores_the_cache(tiny):
    model, prompt = tiny
    state = decode.prefill(model, prompt[:-8])
    dense = decode.teacher_forced(model, state, prompt[-8:], [0] * 7)
    quarter = at.AttentionKeep(0.25, min_context=0)
    kept = decode.teacher_forced(model, state, prompt[-8:], [0] * 7, attention_keep=quarter)
    assert state.cache.get_seq_length() == state.length
    assert 0.25 < kept.extra["keys_read"] < 0.4 and dense.extra["keys_read"] == 1.0
    assert not torch.equal(kept.token_logprobs, dense.token_logprobs)
    again = decode.teacher_forced(model, state, prompt[-8:], [0] * 7, attention_keep=quarter)
    assert torch.equal(again.token_logprobs, kept.token_logprobs)


def test_settings_are_checked():
    with pytest.raises(ValueError):
        at.AttentionKeep(0.0)
    with pytest.raises(ValueError):
        at.AttentionKeep(0.5, page=0)
    with pytest.raises(ValueError):
        at.AttentionKeep(0.5, min_context=-1)
    model = LlamaForCausalLM(LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=2, vocab_size=16,
                                         attn_implementation="eager"))
    with pytest.raises(ValueError, match="SDPA"):
        at.install(model)
