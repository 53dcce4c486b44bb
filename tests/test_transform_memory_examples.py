"""The memory steps (cache_read, cache_write, set_scope, transform_layout,
storage_align) on every bundled example: a step is offered exactly when its
check passes, listing them is cheap, and every offered step that is applied
computes what the program computed (sampled with a fixed seed)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from leir.bridge.document import load_leir
from leir.semantics import analyze
from leir.transforms import NotApplicable, apply
from leir.transforms.steps import cache_read, cache_write, set_scope, storage_align, transform_layout
from leir.transforms import verify
from leir.transforms.base import Context
from leir.transforms.testing import check_offered_exactly_when_check_passes

EXAMPLES = sorted((Path(__file__).resolve().parent.parent / "examples").glob("*.leir"))
MODULES = (cache_read, cache_write, set_scope, transform_layout, storage_align)
#: Programs on which one offered step per module is applied and verified:
#: each verification builds two kernels (about a second, more for attention).
SAMPLED = 12


def context(path: Path | str) -> Context:
    doc = load_leir(MORE[path] if isinstance(path, str) else path.read_text())
    assert doc.ok
    return Context(doc.analysis)


def universe(ctx: Context, module) -> list[dict]:
    """Every step of ``module`` one could ask for on this program, offered
    or not."""
    tensors = list(ctx.analysis.tensors)
    scopes = ("g", "s", "l")
    if module in (cache_read, cache_write):
        return [{"block": b, "tensor": t, "scope": s} for b in ctx.block_names for t in tensors for s in scopes]
    if module is set_scope:
        return [{"tensor": t, "scope": s} for t in tensors for s in scopes]
    if module is transform_layout:
        return ([{"tensor": t, "layout": "transpose"} for t in tensors]
                + [{"tensor": t, "layout": "tile", "tile": k} for t in tensors for k in (2, 3, 4, 8, 16, 32, 64)])
    return [{"tensor": t, "axis": a, "factor": 32, "offset": 1} for t in tensors for a in (0, 1)]


#: Programs the examples do not cover: one-kernel GPU temporaries, guards,
#: fused indices, a hoisted initialisation.
MORE = {
    "gpu_tile": """\
B^{4}_{bx} [
  B^{8}_{tx}
    L^{8}_{j} [
      T_{bx*8+tx,j} = X_{bx*8+tx,j}*2.0;
    ];
  B^{8}_{tx}
    L^{8}_{j} [
      Y_{bx*8+tx,j} = T_{bx*8+j,tx};
    ];
];
""",
    "gpu_fused_gemm_relu": """\
tmp C: f32[32,32] @l

B^{2}_{by}
  B^{2}_{bx}
    B^{16}_{ty}
      B^{16}_{tx} [
        L^{64}_{k} [
          C_{by*16+ty,bx*16+tx} += X_{by*16+ty,k}*W_{k,bx*16+tx};
        ];
        Y_{by*16+ty,bx*16+tx} = max(C_{by*16+ty,bx*16+tx}, 0.0);
      ];
""",
    "guards": """\
L^{4}_{io}
  L^{32}_{ii} [
    T_{io*32+ii} = X_{io*32+ii}*2.0 where io*32 + ii < 100;
  ];

L^{10}_{i}
  L^{3}_{r} [
    Y_{i} += T_{i*10+r} where i*10 + r < 95;
  ];
""",
    "fused_and_hoisted": """\
L^{32}_{f} [
  C_{f//8,f%8} = 0.0;
];

L^{32}_{f}
  L^{4}_{k} [
    C_{f//8,f%8} += X_{f//8,f%8,k};
  ];

L^{4}_{i}
  L^{8}_{j} [
    Y_{j,i} = C_{i,j}*2.0;
  ];
""",
}


def test_more_programs_are_valid():
    for name, text in MORE.items():
        assert load_leir(text).ok, name


@pytest.mark.parametrize("path", EXAMPLES + sorted(MORE), ids=lambda p: getattr(p, "stem", p))
def test_offered_exactly_when_check_passes(path):
    ctx = context(path)
    for module in MODULES:
        check_offered_exactly_when_check_passes(module, ctx, universe(ctx, module), NotApplicable)


@pytest.mark.slow
@pytest.mark.parametrize("module", MODULES[:-1], ids=lambda m: m.ID)
def test_sampled_offered_steps_verify(module):
    """One offered step on each of SAMPLED programs, chosen with a fixed
    seed (applying all of them, about 550, takes minutes; it was done once,
    with no failure)."""
    programs = [p for p in EXAMPLES + sorted(MORE) if module.candidates(context(p), None)]
    rng = random.Random(module.ID)
    for path in rng.sample(programs, min(SAMPLED, len(programs))):
        ctx = context(path)
        step = rng.choice(module.candidates(ctx, None)).step
        result = apply(ctx, step)
        v = verify(ctx.analysis, analyze(result))
        assert v.ok, f"{module.ID} {step.args} on {getattr(path, 'stem', path)}: {v.summary()}"


def test_a_step_offered_on_a_cursor_is_offered_everywhere():
    """A cursor narrows the list; it never offers a step the whole-program
    list does not."""
    for path in EXAMPLES:
        ctx = context(path)
        text = path.read_text()
        for module in MODULES:
            everywhere = {c.step for c in module.candidates(ctx, None)}
            for at in range(0, len(text), 7):
                assert {c.step for c in module.candidates(ctx, at)} <= everywhere, (module.ID, path.stem, at)
