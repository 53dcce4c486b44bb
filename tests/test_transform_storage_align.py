"""storage_align: refused, with the reason, because LEIR cannot carry a padded stride."""

from __future__ import annotations

import pytest

from leir.bridge.document import load_leir
from leir.transforms import BadStep, StaleStep, apply
from leir.transforms.steps import storage_align
from leir.transforms.base import Context, Step
from leir.transforms.steps.storage_align import BadAxis, NotExpressible, NotOnChip, NotTemporary
from leir.transforms.testing import check_not_applicable

TILE = """\
tmp S: f32[32,32] @s

B^{32}_{tx} [
  L^{32}_{j} [
    S$0_{tx,j} = X_{tx,j};
  ];
  L^{32}_{j2} [
    Y_{tx,j2} = S_{j2,tx};
  ];
];
"""

ALIGN = {"tensor": "S", "axis": 0, "factor": 32, "offset": 1}


def test_nothing_is_offered():
    doc = load_leir(TILE.replace("$0", ""))
    assert storage_align.candidates(Context(doc.analysis), None) == []


def test_storage_align_fail_not_expressible():
    e = check_not_applicable(storage_align, TILE, NotExpressible, ALIGN)
    assert "annotation" in e.detail and "compacted" in e.detail


def test_storage_align_fail_not_temporary():
    e = check_not_applicable(storage_align, TILE, NotTemporary, {**ALIGN, "tensor": "X"})
    assert "X is an input" in e.detail


def test_storage_align_fail_not_on_chip():
    e = check_not_applicable(storage_align, TILE.replace(" @s", ""), NotOnChip, ALIGN)
    assert "S is global" in e.detail


def test_storage_align_fail_bad_axis():
    e = check_not_applicable(storage_align, TILE, BadAxis, {**ALIGN, "axis": 1})
    assert "from 0 to 0" in e.detail


def test_stale_and_malformed_steps():
    doc = load_leir(TILE.replace("$0", ""))
    with pytest.raises(StaleStep):
        apply(doc.analysis, Step("storage_align", {**ALIGN, "tensor": "Q"}))
    for bad in ({**ALIGN, "offset": 32}, {**ALIGN, "factor": 0}, {"tensor": "S", "axis": 0}):
        with pytest.raises(BadStep):
            apply(doc.analysis, Step("storage_align", bad))


@pytest.mark.slow
def test_why_leir_cannot_carry_it():
    """The two ways LEIR could say it both lose it: raising drops TVM's
    annotation, and the lowering compacts a padded declaration."""
    import tvm

    from leir.printer import print_program
    from leir.bridge.raise_tir import raise_func

    doc = load_leir(TILE.replace("$0", ""))
    ctx = Context(doc.analysis)
    sch = tvm.s_tir.Schedule(ctx.func)
    storage_align.schedule(sch, ctx, ALIGN)
    assert "buffer_dim_align" in sch.mod["main"].script()
    assert print_program(raise_func(sch.mod["main"])) == print_program(raise_func(ctx.func))

    padded = Context(load_leir(TILE.replace("$0", "").replace("f32[32,32]", "f32[32,33]")).analysis)
    passes = tvm.s_tir.transform
    lowered = tvm.transform.Sequential([passes.LowerInitBlock(), passes.PlanAndUpdateBufferAllocationLocation(),
                                        passes.ConvertBlocksToOpaque(), passes.CompactBufferAllocation()])
    script = lowered(tvm.IRModule({"main": padded.func}))["main"].script()
    assert "(32, 32)" in script and "33" not in script
