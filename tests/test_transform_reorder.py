"""reorder: swap two directly nested loops when no dependence is reversed
and TVM's reorder accepts them; one typed error per precondition, each
naming the loop, guard or access at fault."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from leir.bridge.document import load_leir
from leir.semantics import analyze
from leir.transforms import NotApplicable, Step, apply, verify
from leir.transforms.lib import loop_pairs
from leir.transforms.steps import reorder
from leir.transforms.base import Context
from leir.transforms.testing import check_action, check_not_applicable, check_offered_exactly_when_check_passes, offered_args

EXAMPLES = sorted((Path(__file__).resolve().parent.parent / "examples").glob("*.leir"))
#: Steps applied and verified per example; every one on programs offering
#: no more than this.
SAMPLE_PER_EXAMPLE = 3


def context(text: str) -> Context:
    doc = load_leir(text)
    assert doc.ok, [d.message for d in doc.diagnostics if d.is_error]
    return Context(doc.analysis)


def offered(text: str) -> list[tuple[str, ...]]:
    return [(a["block"], *a["loops"]) for a in offered_args(reorder, text)]


# ----------------------------------------------------------------- actions


@pytest.mark.slow
def test_reorder_transpose_makes_the_write_contiguous():
    check_action(reorder, """\
# Y = X.T
L^{128}_{j}$0
  L^{96}_{i} [
    Y_{i,j} = X_{j,i};
  ];
""", """\
# Y = X.T
L^{96}_{i}
  L^{128}_{j} [
    Y_{i,j} = X_{j,i};
  ];
""")


@pytest.mark.slow
def test_reorder_reduction_loop_outward_keeps_the_implied_init():
    # S_i starts from 0 at k = 0 whichever loop is outside.
    check_action(reorder, """\
L^{32}_{i}$0
  L^{24}_{k} [
    S_{i} = max(S_{i}, X_{i,k});
  ];
""", """\
L^{24}_{k}
  L^{32}_{i} [
    S_{i} = max(S_{i}, X_{i,k});
  ];
""")


@pytest.mark.slow
def test_reorder_two_reduction_loops_reassociate_the_sum():
    check_action(reorder, """\
L^{8}_{i}
  L^{16}_{k}$0
    L^{12}_{l} [
      S_{i} += X_{i,k,l};
    ];
""", """\
L^{8}_{i}
  L^{12}_{l}
    L^{16}_{k} [
      S_{i} += X_{i,k,l};
    ];
""", args={"block": "S", "loops": ["k", "l"]})


@pytest.mark.slow
def test_reorder_a_nest_written_as_nested_brackets():
    check_action(reorder, """\
L^{16}_{i}$0 [
  L^{12}_{j} [
    Y_{i,j} = X_{i,j}*2.0;
  ];
];
""", """\
L^{12}_{j}
  L^{16}_{i} [
    Y_{i,j} = X_{i,j}*2.0;
  ];
""", args={"block": "Y", "loops": ["i", "j"]})


@pytest.mark.slow
def test_reorder_several_equations_reading_what_they_write_in_the_same_iteration():
    check_action(reorder, """\
L^{16}_{i}$0
  L^{12}_{j} [
    T_{i,j} = X_{i,j}*2.0;
    Y_{i,j} = T_{i,j} + 1.0;
  ];
""", """\
L^{12}_{j}
  L^{16}_{i} [
    T_{i,j} = X_{i,j}*2.0;
    Y_{i,j} = T_{i,j} + 1.0;
  ];
""", args={"block": "T", "loops": ["i", "j"]})


@pytest.mark.slow
def test_reorder_a_partial_reduction_read_in_the_same_row():
    # Y reads the running maximum of row i: swapping keeps each row's order.
    check_action(reorder, """\
L^{8}_{i}$0
  L^{10}_{j} [
    M_{i} = max(M_{i}, X_{i,j});
    Y_{i,j} = M_{i};
  ];
""", """\
L^{10}_{j}
  L^{8}_{i} [
    M_{i} = max(M_{i}, X_{i,j});
    Y_{i,j} = M_{i};
  ];
""", args={"block": "M", "loops": ["i", "j"]})


@pytest.mark.slow
def test_reorder_repeated_writes_in_the_same_direction():
    # Y_{i-j+7} is written by (i, j) and (i+1, j+1): both loops advance
    # together, so the last write stays last (found by enumeration).
    check_action(reorder, """\
L^{8}_{i}$0
  L^{8}_{j} [
    Y_{i-j+7} = X_{i,j};
  ];
""", """\
L^{8}_{j}
  L^{8}_{i} [
    Y_{i-j+7} = X_{i,j};
  ];
""")


@pytest.mark.slow
def test_reorder_keeps_a_guard_that_bounds_one_loop():
    check_action(reorder, """\
L^{4}_{b}
  L^{16}_{i}$0
    L^{16}_{j} [
      Y_{b,i,j} = X_{i,j} where j <= b*4;
    ];
""", """\
L^{4}_{b}
  L^{16}_{j}
    L^{16}_{i} [
      Y_{b,i,j} = X_{i,j} where j <= b*4;
    ];
""", args={"block": "Y", "loops": ["i", "j"]})


@pytest.mark.slow
def test_reorder_serial_loop_into_a_parallel_one():
    check_action(reorder, """\
P^{32}_{i}$0
  L^{24}_{j} [
    Y_{i,j} = X_{i,j} + 1.0;
  ];
""", """\
L^{24}_{j}
  P^{32}_{i} [
    Y_{i,j} = X_{i,j} + 1.0;
  ];
""")


def test_reorder_cursor_on_a_loop_offers_its_pairs():
    text = """\
L^{4}_{i}
  L^{8}_{j}$0
    L^{16}_{k} [
      S_{i,j} += X_{i,j,k};
    ];
"""
    at = text.index("$0")
    ctx = context(text.replace("$0", ""))
    found = {tuple(c.step.args["loops"]) for c in reorder.candidates(ctx, at)}
    assert found == {("i", "j"), ("j", "k")}
    titles = {c.title for c in reorder.candidates(ctx, at)}
    assert titles == {"Swap loops i and j", "Swap loops j and k"}


# ------------------------------------------------------------- refusals


def test_reorder_fail_loops_not_nested():
    text = """\
L^{4}_{i}$0
  L^{8}_{j}
    L^{16}_{k} [
      S_{i,j} += X_{i,j,k};
    ];
"""
    e = check_not_applicable(reorder, text, reorder.LoopsNotNested, {"block": "S", "loops": ["i", "k"]})
    assert "k is not the loop directly inside i" in e.detail
    e = check_not_applicable(reorder, text, reorder.LoopsNotNested, {"block": "S", "loops": ["j", "i"]})
    assert 'name the outer loop first (["i", "j"])' in e.detail


def test_reorder_fail_not_only_child():
    e = check_not_applicable(reorder, """\
L^{8}_{i}$0 [
  T_{i} = X_{i,0};
  L^{8}_{j} [
    Y_{i,j} = X_{i,j} - T_{i};
  ];
];
""", reorder.NotOnlyChild, {"block": "Y", "loops": ["i", "j"]})
    assert "loop i holds more than loop j" in str(e)


def test_reorder_fail_thread_bound():
    text = """\
B^{8}_{bx}
  B^{16}_{tx}$0
    L^{32}_{k} [
      S_{bx*16+tx} += X_{bx*16+tx,k};
    ];
"""
    for loops in (["tx", "k"], ["bx", "tx"]):
        e = check_not_applicable(reorder, text, reorder.ThreadBound, {"block": "S", "loops": loops})
        assert f"loop {loops[0]} is bound to a GPU thread" == str(e)


def test_reorder_fail_vector_outward():
    e = check_not_applicable(reorder, """\
L^{16}_{i}$0
  V^{8}_{j} [
    Y_{i,j} = X_{i,j};
  ];
""", reorder.VectorOutward, {"block": "Y", "loops": ["i", "j"]})
    assert "loop j is vectorized" == str(e)


def test_reorder_fail_guard():
    e = check_not_applicable(reorder, """\
L^{16}_{i}$0
  L^{16}_{j} [
    Y_{i,j} = X_{i,j} where j <= i;
  ];
""", reorder.GuardNotBound, {"block": "Y", "loops": ["i", "j"]})
    assert "j <= i" in str(e) and "of Y" in e.detail


def test_reorder_fail_guard_that_scales_the_loop():
    check_not_applicable(reorder, """\
L^{16}_{i}$0
  L^{16}_{j} [
    Y_{i,j} = X_{i,j} where 2*i < 7;
  ];
""", reorder.GuardNotBound, {"block": "Y", "loops": ["i", "j"]})


def test_reorder_fail_parallel_race():
    e = check_not_applicable(reorder, """\
L^{8}_{j}$0
  P^{8}_{i} [
    Y_{(i+j)%8} = X_{i,j};
  ];
""", reorder.ParallelRace, {"block": "Y", "loops": ["j", "i"]})
    assert "parallel loop i" in str(e) and "of Y" in e.detail


def test_reorder_fail_parallel_loop_outward_over_a_carried_dependence():
    # Row a+1 reads what column b-1 wrote in row a: fine while the serial
    # a loop is outside, a race once the parallel b loop is.
    e = check_not_applicable(reorder, """\
L^{16}_{q} [
  Y_{0,q} = X_{0,q};
];

L^{15}_{a}$0
  P^{15}_{b} [
    Y_{a+1,b+1} = Y_{a,b}*0.5 + X_{a,b};
  ];
""", reorder.ParallelRace, {"block": "Y_1", "loops": ["a", "b"]})
    assert "the read of Y_{a,b}" in e.detail


def test_reorder_fail_dependence_recurrence():
    e = check_not_applicable(reorder, """\
L^{16}_{j} [
  Y_{0,j} = X_{0,j};
];

L^{15}_{i}$0
  L^{15}_{j} [
    Y_{i+1,j} = Y_{i,j+1} + X_{i+1,j};
  ];
""", reorder.DependenceReversed, {"block": "Y_1", "loops": ["i", "j"]})
    assert str(e) == "swapping i and j reverses a dependence on Y"
    assert "the read of Y_{i,j+1}" in e.detail and "i=0, j=1" in e.detail and "i=1, j=0" in e.detail


def test_reorder_fail_dependence_anti_diagonal_writes():
    e = check_not_applicable(reorder, """\
L^{8}_{i}$0
  L^{8}_{j} [
    Y_{i+j} = X_{i,j};
  ];
""", reorder.DependenceReversed, {"block": "Y", "loops": ["i", "j"]})
    assert "the write Y_{i+j} = X_{i,j}" in e.detail


def test_reorder_fail_dependence_through_a_scalar():
    e = check_not_applicable(reorder, """\
L^{8}_{a}$0
  L^{8}_{b} [
    t = X_{a,b};
    Y_{a,b} = t*2.0;
  ];
""", reorder.DependenceReversed, {"block": "Y", "loops": ["a", "b"]})
    assert "the scalar of t" in e.detail


def test_reorder_fail_dependence_it_cannot_decide():
    # Two different indices over too many iterations to enumerate: refused
    # rather than guessed.
    e = check_not_applicable(reorder, """\
L^{16}_{p}
  L^{512}_{q} [
    Y_{p,q} = X_{p,q};
  ];

L^{512}_{i}$0
  L^{255}_{j} [
    Y_{i,j+1} = Y_{i,j*2} + X_{i,j};
  ];
""", reorder.DependenceReversed, {"block": "Y_1", "loops": ["i", "j"]})
    assert "could not prove" in e.detail


def test_reorder_bad_and_stale_steps():
    text = "L^{8}_{i}\n  L^{8}_{j} [\n    Y_{i,j} = X_{i,j};\n  ];\n"
    ctx = context(text)
    for args in ({"block": "Y", "loops": ["i"]}, {"block": "Y", "loops": ["i", "i"]}, {"block": "Y", "loops": "ij"}):
        with pytest.raises(Exception) as e:
            apply(ctx, Step("reorder", args))
        assert e.value.code == "bad-step"
    with pytest.raises(Exception) as e:
        apply(ctx, Step("reorder", {"block": "Y", "loops": ["i", "q"]}))
    assert e.value.code == "stale-step"


# ------------------------------------------- a run of loops in a new order

TILED = """\
L^{4}_{i_0}
  L^{16}_{i_1}
    L^{8}_{j_0}
      L^{8}_{j_1}
        L^{32}_{k} [
          C_{i_0*16+i_1,j_0*8+j_1} += X_{i_0*16+i_1,k}*W_{k,j_0*8+j_1};
        ];
"""


def test_swaps_are_the_fewest_adjacent_exchanges():
    assert reorder.swaps(["a", "b", "c"], ["a", "b", "c"]) == []
    assert reorder.swaps(["a", "b"], ["b", "a"]) == [("a", "b")]
    # i_1 past j_0, then k outward past j_1 and i_1: one swap per inverted pair (3).
    assert reorder.swaps(["i_1", "j_0", "j_1", "k"], ["j_0", "k", "i_1", "j_1"]) == [
        ("i_1", "j_0"), ("j_1", "k"), ("i_1", "k")]
    # Reversing n loops inverts every pair: n(n-1)/2 swaps.
    assert len(reorder.swaps(list("abcde"), list("edcba"))) == 10


@pytest.mark.slow
def test_a_run_in_a_new_order_is_one_step_equal_to_its_swaps():
    ctx = context(TILED)
    order = ["i_0", "j_0", "k", "i_1", "j_1"]
    one = apply(ctx, Step("reorder", {"block": "C", "order": order}))
    program = ctx.analysis
    for a, b in reorder.swaps(["i_0", "i_1", "j_0", "j_1", "k"], order):
        program = apply(program, Step("reorder", {"block": "C", "loops": [a, b]}))
    from leir.printer import print_program

    assert print_program(one) == print_program(program)
    assert [l.var for l in analyze(one).equations[0].loops] == order
    assert verify(ctx.analysis, analyze(one)).ok
    # Only the loops that move need naming: the run i_1..k, i_0 left out.
    partial = apply(ctx, Step("reorder", {"block": "C", "order": ["j_0", "k", "i_1", "j_1"]}))
    assert print_program(partial) == print_program(one)


def test_a_run_in_a_new_order_is_refused_where_a_swap_on_the_way_is():
    text = """\
L^{16}_{j}
  L^{4}_{c} [
    Y_{0,j,c} = X_{0,j,c};
  ];

L^{15}_{i}
  L^{15}_{j}
    L^{4}_{c} [
      Y_{i+1,j,c} = Y_{i,j+1,c} + X_{i+1,j,c};
    ];
"""
    ctx = context(text)
    # c to the outside is fine; i inside j is what the recurrence forbids.
    apply(ctx, Step("reorder", {"block": "Y_1", "order": ["c", "i", "j"]}))
    with pytest.raises(reorder.DependenceReversed) as e:
        apply(ctx, Step("reorder", {"block": "Y_1", "order": ["j", "c", "i"]}))
    assert "reverses a dependence on Y" in str(e.value) and "on the way to the order j, c, i" in str(e.value)
    # The refusal points at the document's loop, not at a program in between.
    assert e.value.span is not None and text[e.value.span.start:].startswith("L^{15}_{j}")


def test_a_run_in_a_new_order_needs_a_run_a_new_order_and_good_arguments():
    ctx = context(TILED)
    with pytest.raises(reorder.NotARun) as e:  # j_0 between i_1 and j_1 is not named
        apply(ctx, Step("reorder", {"block": "C", "order": ["j_1", "i_1"]}))
    assert "loops between i_1 and j_1 are not named" in e.value.detail
    side = context("L^{8}_{i} [\n  L^{8}_{j} [\n    Y_{i,j} = X_{i,j};\n  ];\n  L^{8}_{k} [\n"
                   "    Z_{i,k} = X_{i,k};\n  ];\n];\n")
    with pytest.raises(reorder.NotARun) as e:
        apply(side, Step("reorder", {"block": "Y", "order": ["j", "i"]}))
    assert "is not all that i's body holds" in e.value.detail
    with pytest.raises(reorder.SameOrder):
        apply(ctx, Step("reorder", {"block": "C", "order": ["i_0", "i_1", "j_0"]}))
    for args in ({"block": "C", "order": ["k"]}, {"block": "C", "order": ["k", "k"]},
                 {"block": "C", "order": "ij"}, {"block": "C", "order": ["k", "j_1"], "loops": ["j_1", "k"]}):
        with pytest.raises(Exception) as e:
            apply(ctx, Step("reorder", args))
        assert e.value.code == "bad-step", args
    with pytest.raises(Exception) as e:
        apply(ctx, Step("reorder", {"block": "C", "order": ["k", "q"]}))
    assert e.value.code == "stale-step"


@pytest.mark.slow
def test_the_reasoning_of_a_run_in_a_new_order_says_so_and_checks_against_the_facts():
    from leir.explain.grounding import check, step_facts
    from leir.explain.reasoning import step_reasoning

    before = context(TILED).analysis
    step = Step("reorder", {"block": "C", "order": ["j_0", "k", "i_1", "j_1"]})
    after = analyze(apply(before, step))
    text = step_reasoning(before, after, step).text
    assert text.startswith("Puts loops i_1, j_0, j_1, k around C in the order j_0, k, i_1, j_1.")
    result = check(text, step_facts(before, after, step))
    assert result.dropped == [] and len(result.kept) >= 3


def test_the_listing_offers_swaps_only():
    assert all(len(args["loops"]) == 2 and "order" not in args for args in offered_args(reorder, TILED))


# ------------------------------------------------- offered iff it checks


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_reorder_offered_exactly_when_check_passes(path):
    ctx = context(path.read_text())
    every = [{"block": ctx.block_names[child.equations[0]], "loops": [site.loop.var, child.loop.var]}
             for site in ctx.loop_sites for child in loop_pairs.child_loops(ctx, site)]
    check_offered_exactly_when_check_passes(reorder, ctx, every, NotApplicable)


@pytest.mark.slow
@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_reorder_every_sampled_step_verifies_on_the_examples(path):
    doc = load_leir(path.read_text())
    found = reorder.candidates(Context(doc.analysis), None)
    steps = found if len(found) <= SAMPLE_PER_EXAMPLE else random.Random(f"reorder {path.stem}").sample(found, SAMPLE_PER_EXAMPLE)
    for c in steps:
        after = apply(doc.analysis, c.step)
        result = verify(doc.analysis, analyze(after))
        assert result.ok, f"{path.stem} {c.step.args}: {result.summary()}"
