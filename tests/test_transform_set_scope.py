"""set_scope: a temporary's declaration moves it to global, shared or local memory."""

from __future__ import annotations

import pytest

from leir.bridge.document import load_leir
from leir.transforms import BadStep, StaleStep, apply
from leir.transforms.steps import set_scope
from leir.transforms.base import Context, Step
from leir.transforms.steps.set_scope import (
    NotOneKernel,
    NotPrivate,
    NotTemporary,
    SameScope,
    SharedWithoutThreads,
)
from leir.transforms.testing import check_action, check_not_applicable, offered_args

ROWS = """\
L^{16}_{i}
  L^{10}_{j} [
    M$0_{i} = max(M_{i}, X_{i,j});
  ];

L^{16}_{i}
  L^{10}_{j} [
    Y_{i,j} = X_{i,j} - M_{i};
  ];
"""

#: One kernel: each thread block writes an 8x8 tile of T and reads it back
#: transposed, so T can be shared but not local.
TILE = """\
B^{4}_{bx} [
  B^{8}_{tx}
    L^{8}_{j} [
      T$0_{bx*8+tx,j} = X_{bx*8+tx,j}*2.0;
    ];
  B^{8}_{tx}
    L^{8}_{j} [
      Y_{bx*8+tx,j} = T_{bx*8+j,tx};
    ];
];
"""

#: One kernel in which every thread reads back only what it wrote.
OWN = """\
B^{4}_{bx}
  B^{8}_{tx} [
    L^{4}_{j} [
      T$0_{bx*8+tx,j} = X_{bx*8+tx,j}*2.0;
    ];
    L^{4}_{j2} [
      Y_{bx*8+tx,j2} = T_{bx*8+tx,3-j2};
    ];
  ];
"""


def offered(text: str) -> list[dict]:
    return offered_args(set_scope, text)


def test_a_cpu_temporary_can_be_local_not_shared():
    assert offered(ROWS) == [{"tensor": "M", "scope": "l"}]


def test_ownership_decides_shared_and_local_on_a_gpu():
    assert offered(TILE) == [{"tensor": "T", "scope": "s"}]
    assert offered(OWN) == [{"tensor": "T", "scope": "s"}, {"tensor": "T", "scope": "l"}]


def test_the_cursor_on_a_declaration_selects_its_tensor():
    text = "tmp M: f32[16] @l$0\n\n" + ROWS.replace("$0", "")
    assert offered(text) == [{"tensor": "M", "scope": "g"}]


def test_inputs_and_outputs_are_not_offered():
    assert offered(ROWS.replace("M$0_{i} =", "M_{i} =").replace("Y_{i,j} = X_{i,j}", "Y_{i,j} = X$0_{i,j}")) == []


def test_a_declared_temporary_changes_its_declaration():
    check_action(set_scope, "tmp M: f16[16]\n\n" + ROWS, "tmp M: f16[16] @l\n\n" + ROWS.replace("$0", ""),
                 args={"tensor": "M", "scope": "l"})


def test_back_to_global():
    check_action(set_scope, "tmp M: f32[16] @l\n\n" + ROWS, "tmp M: f32[16]\n\n" + ROWS.replace("$0", ""),
                 args={"tensor": "M", "scope": "g"})


def test_superscripts_follow_the_scope():
    compact = ("L^{16}_{i=0}L^{10}_{j=0}[M^{f32,g}_{i}$0=max(M^{f32,g}_{i},X^{f32,g}_{i,j});];"
               "L^{16}_{i=0}L^{10}_{j=0}[Y^{f32,g}_{i,j}=X^{f32,g}_{i,j}-M^{f32,g}_{i};];")
    result = check_action(set_scope, compact, """\
L^{16}_{i}
  L^{10}_{j} [
    M^{f32,l}_{i} = max(M^{f32,l}_{i}, X^{f32,g}_{i,j});
  ];

L^{16}_{i}
  L^{10}_{j} [
    Y^{f32,g}_{i,j} = X^{f32,g}_{i,j} - M^{f32,l}_{i};
  ];
""", args={"tensor": "M", "scope": "l"})
    assert "tmp" not in result


def test_a_thread_keeps_its_elements_in_local_memory():
    check_action(set_scope, OWN, "tmp T: f32[32,4] @l\n\n" + OWN.replace("$0", ""), args={"tensor": "T", "scope": "l"})


def test_set_scope_fail_not_temporary():
    e = check_not_applicable(set_scope, ROWS, NotTemporary, {"tensor": "Y", "scope": "l"})
    assert "Y is an output" in e.detail and "global memory" in e.detail


def test_set_scope_fail_same_scope():
    e = check_not_applicable(set_scope, ROWS, SameScope, {"tensor": "M", "scope": "g"})
    assert "M is already in global memory" in e.detail


def test_set_scope_fail_shared_without_threads():
    e = check_not_applicable(set_scope, ROWS, SharedWithoutThreads, {"tensor": "M", "scope": "s"})
    assert "B loops" in e.detail


def test_set_scope_fail_not_one_kernel():
    two_kernels = """\
B^{4}_{bx}
  B^{16}_{tx}
    L^{32}_{k} [
      C$0_{bx,tx} += X_{bx,k}*W_{k,tx};
    ];

B^{4}_{bx}
  B^{16}_{tx} [
    Y_{bx,tx} = max(C_{bx,tx}, 0.0);
  ];
"""
    e = check_not_applicable(set_scope, two_kernels, NotOneKernel, {"tensor": "C", "scope": "l"})
    assert "another kernel" in e.detail
    host = """\
L^{4}_{i} [
  T$0_{i} = X_{i}*2.0;
];

B^{4}_{tx} [
  Y_{tx} = T_{tx};
];
"""
    e = check_not_applicable(set_scope, host, NotOneKernel, {"tensor": "T", "scope": "s"})
    assert "host" in e.detail


def test_set_scope_fail_not_private():
    e = check_not_applicable(set_scope, TILE, NotPrivate, {"tensor": "T", "scope": "l"})
    assert "which tx owns an element" in e.detail
    # A row of T written by block bx and read by block bx+1.
    shifted = """\
B^{4}_{bx} [
  B^{8}_{tx} [
    T$0_{bx*8+tx} = X_{bx*8+tx};
  ];
  B^{8}_{tx} [
    Y_{bx*8+tx} = T_{(bx*8+tx+8)%32};
  ];
];
"""
    e = check_not_applicable(set_scope, shifted, NotPrivate, {"tensor": "T", "scope": "s"})
    assert "which bx owns an element" in e.detail
    partial = """\
B^{4}_{bx} [
  T$0_{bx} = X_{bx};
  B^{8}_{tx} [
    Y_{bx*8+tx} = T_{bx}*2.0;
  ];
];
"""
    e = check_not_applicable(set_scope, partial, NotPrivate, {"tensor": "T", "scope": "l"})
    assert "different threads" in str(e)


def test_stale_and_malformed_steps():
    doc = load_leir(ROWS.replace("$0", ""))
    with pytest.raises(StaleStep):
        apply(doc.analysis, Step("set_scope", {"tensor": "Q", "scope": "l"}))
    with pytest.raises(BadStep):
        apply(doc.analysis, Step("set_scope", {"tensor": "M", "scope": "register"}))


@pytest.mark.slow
def test_the_result_is_tvm_set_scope_up_to_the_name():
    """TVM's set_scope renames the buffer (M -> M_local); otherwise it
    gives the program the rewrite gives."""
    import tvm

    from leir.printer import print_program
    from leir.bridge.raise_tir import raise_func
    from leir.semantics import analyze

    for text, name, scope in ((ROWS, "M", "l"), (TILE, "T", "s"), (OWN, "T", "l")):
        doc = load_leir(text.replace("$0", ""))
        ours = apply(doc.analysis, Step("set_scope", {"tensor": name, "scope": scope}))
        ctx = Context(doc.analysis)
        sch = tvm.s_tir.Schedule(ctx.func)
        sch.set_scope(name, name, {"l": "local", "s": "shared"}[scope])
        renamed = f"{name}_{'local' if scope == 'l' else 'shared'}"
        theirs = print_program(raise_func(sch.mod["main"])).replace(renamed, name)
        assert theirs == print_program(raise_func(Context(analyze(ours)).func))
