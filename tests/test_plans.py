"""Plans (leir/tools/plans/): sequences of catalogue steps toward a known-good
shape, and the ``plans`` search that measures their end states (issue 14)."""

from __future__ import annotations

import random

import pytest

from leir import ast as A, transforms
from leir.bridge.document import load_leir
from leir.explain.machine import Machine
from leir.printer import print_program
from leir.tools.plans import PlanFailed, plans_for, realize
from leir.tools.plans.cpu import ContractionTiling, Rows, contraction_tilings, rows_plans

MATMUL = """\
L^{64}_{i}
  L^{64}_{j}
    L^{32}_{k} [
      C_{i,j} += X_{i,k}*W_{k,j};
    ];
"""

DENSE = """\
L^{32}_{i}
  L^{64}_{j}
    L^{32}_{k} [
      C_{i,j} += X_{i,k}*W_{k,j};
    ];

L^{32}_{i}
  L^{64}_{j} [
    Y_{i,j} = max(C_{i,j} + bias_{j}, 0.0);
  ];
"""

SOFTMAX = """\
L^{32}_{i}
  L^{64}_{j} [
    M_{i} = max(M_{i}, X_{i,j});
  ];

L^{32}_{i}
  L^{64}_{j} [
    Z_{i} += exp(X_{i,j} - M_{i});
  ];

L^{32}_{i}
  L^{64}_{j} [
    Y_{i,j} = exp(X_{i,j} - M_{i})/Z_{i};
  ];
"""

COLUMN_SUM = """\
L^{64}_{i}
  L^{32}_{j} [
    S_{j} += X_{i,j};
  ];
"""

ATTENTION = """\
L^{2}_{b}
  L^{32}_{i}
    L^{32}_{j}
      L^{16}_{d} [
        S_{b,i,j} += Q_{b,i,d}*K_{b,j,d};
      ];
"""

AVX2 = Machine(l1d=32 * 1024, l2=512 * 1024, l3=32 * 1024 * 1024, vector_bytes=32, vector_isa="AVX2", cores=2)


def analysis(text: str):
    a = load_leir(text).analysis
    assert a.ok
    return a


def kinds(program) -> str:
    return "".join(ch for line in print_program(program).splitlines() for ch in line.strip()[:1] if ch in "LPVU")


def test_tilings_of_a_matmul_vectorize_its_stride1_loop_and_fit_the_registers():
    tilings = contraction_tilings(analysis(MATMUL), AVX2, random.Random(0), limit=200)
    assert tilings and all(isinstance(t, ContractionTiling) for t in tilings)
    assert {t.vector for t in tilings} == {"j"}  # j indexes C's last dimension and W's, with stride 1
    assert {t.row for t in tilings} == {"i"}
    assert {t.reduce for t in tilings} == {"k"}
    for t in tilings:
        assert 64 % t.v_in == 0 and t.v_in % 8 == 0  # a whole number of 8-lane AVX2 vectors
        assert t.r_in * (t.v_in // 8) <= 12  # accumulators: 12 of AVX2's 16 registers, 4 left for operands
        assert t.k_in is None or 32 % t.k_in == 0


def test_a_realized_plan_is_catalogue_steps_that_replay_to_its_program_and_verify():
    a = analysis(MATMUL)
    spec = ContractionTiling("C", "j", 16, "i", 4, "k", k_in=8, v_mid=2)
    plan = realize(spec, a)
    assert all(transforms.get(s.id) for s in plan.steps)
    assert [s.id for s in plan.steps][:4] == ["split", "split", "split", "split"]
    ids = {s.id for s in plan.steps}
    assert {"cache_write", "reverse_compute_at", "parallelize", "vectorize", "unroll"} <= ids
    assert print_program(transforms.replay(a.program, plan.steps)) == print_program(plan.program)
    assert len(plan.programs) == len(plan.steps)  # the program after each step; the last is plan.program
    text = print_program(plan.program)
    assert "V^{16}" in text and "U^{4}" in text and text.lstrip().startswith(("tmp C_local", "P^"))
    assert "@l" in text  # the accumulator is a local buffer
    assert transforms.verify(a, load_leir(text).analysis).ok


def test_a_plan_whose_needed_step_is_refused_fails_with_the_steps_reason():
    a = analysis(MATMUL)
    with pytest.raises(PlanFailed, match="not a proper divisor"):
        realize(ContractionTiling("C", "j", 24, "i", 4, "k"), a)  # 24 does not divide 64
    with pytest.raises(PlanFailed):
        realize(ContractionTiling("C", "j", 16, "k", 4, "i"), a)  # k is a reduction axis: no parallel tile loop


def test_an_elementwise_epilogue_moves_under_the_contractions_tile_loop():
    a = analysis(DENSE)
    plan = realize(ContractionTiling("C", "j", 16, "i", 4, "k"), a)
    moved = [s for s in plan.steps if s.id == "reverse_compute_at" and s.args["block"] == "Y"]
    assert moved, [s.to_json() for s in plan.steps]
    text = print_program(plan.program)
    assert text.count("P^") == 1  # one parallel nest: the epilogue runs inside it
    assert transforms.verify(a, load_leir(text).analysis).ok


def test_rows_plan_makes_each_softmax_nest_parallel_and_vectorized():
    a = analysis(SOFTMAX)
    assert all(isinstance(s, Rows) for s in plans_for(a, machine=AVX2))
    plan = realize(Rows(16), a)
    text = print_program(plan.program)
    assert text.count("P^{32}") == 3
    assert "V^{16}" in text  # the element-wise nest's row, 16 lanes at a time
    assert transforms.verify(a, load_leir(text).analysis).ok


def test_rows_plan_factors_a_row_sum_into_lanes_and_leaves_a_float_max_alone():
    a = analysis(SOFTMAX)
    plan = realize(Rows(16, rfactor=True), a)
    factored = [s for s in plan.steps if s.id == "rfactor"]
    assert [s.args["block"] for s in factored] == ["Z"]  # M's float max: TVM's start value differs, not factored
    text = print_program(plan.program)
    # Z's 16 partial sums per row as one vector, then a short nest adds them up.
    assert "Z_rf_{i,j_1} += exp(X_{i,j_0*16+j_1} - M_{i});" in text
    vectorized = [s.args["block"] for s in plan.steps if s.id == "vectorize"]
    assert "Z_rf" in vectorized and "Y" in vectorized
    assert text.count("P^{32}") == 4  # M, Z_rf, Z and Y each over parallel rows
    assert transforms.verify(a, load_leir(text).analysis).ok
    # Without rfactor the sum stays one element after another.
    assert "rfactor" not in {s.id for s in realize(Rows(16), a).steps}


def _calls(program, func: str) -> int:
    return sum(1 for site in A.equation_sites(program) for n in A.walk(site.equation.rhs)
               if isinstance(n, A.Call) and n.func == func)


def test_rows_plan_shares_softmaxs_exp_between_its_sum_and_its_divide():
    a = analysis(SOFTMAX)
    assert _calls(a.program, "exp") == 2
    specs = plans_for(a, machine=AVX2)
    assert {s.share for s in specs} == {True, False}  # both offered: the search measures which pays
    plan = realize(Rows(16, share=True), a)
    assert plan.steps[0].id == "common_subexpression_elimination"
    assert plan.steps[0].args == {"block": "Z", "expr": "exp(X_{i,j} - M_{i})", "also": "Y"}
    assert plan.goal == "parallel rows"  # "step 1 of 7 toward parallel rows", no article on a plural
    assert _calls(plan.program, "exp") == 1  # one exp per element, written once and read by the divide
    text = print_program(plan.program)
    assert "Y_{i,j_0*16+j_1} = exp_X_{i,j_0*16+j_1}/Z_{i};" in text
    assert text.count("P^{32}") == 3 and "V^{16}" in text
    assert transforms.verify(a, load_leir(text).analysis).ok
    # rfactor takes a nest of one equation: Z shares its loop with the
    # temporary now, so it is left as it is rather than failing the plan.
    assert "rfactor" not in {s.id for s in realize(Rows(16, rfactor=True, share=True), a).steps}


def test_share_plans_of_one_program_list_its_sharing_steps_once(monkeypatch):
    from leir.tools.plans import cpu

    listed = []
    real = cpu._list_shared_calls
    monkeypatch.setattr(cpu, "_list_shared_calls", lambda an: listed.append(an) or real(an))
    a = analysis(SOFTMAX)
    first = realize(Rows(16, share=True), a)
    starts = sum(1 for an in listed if an is a)
    second = realize(Rows(32, fuse_outer=True, share=True), a)
    assert sum(1 for an in listed if an is a) == starts == 1  # the start program listed once for both plans
    assert first.steps[0] == second.steps[0]
    # A program that only looks the same is listed afresh (the memo is by identity).
    b = analysis(SOFTMAX)
    assert cpu._shared_calls(b) == cpu._list_shared_calls(b) and listed[-2] is b


def test_rows_plan_computes_a_call_an_inner_loop_does_not_change_once_per_row():
    a = analysis("""\
L^{32}_{i}
  L^{64}_{j} [
    S_{i} += X_{i,j}*X_{i,j};
  ];

L^{32}_{i}
  L^{64}_{j} [
    Y_{i,j} = X_{i,j}*rsqrt(S_{i} + 1e-05);
  ];
""")
    plan = realize(Rows(16, share=True), a)
    assert plan.steps[0].id == "precompute"
    assert plan.steps[0].args["expr"] == "rsqrt(S_{i} + 1e-05)"
    text = print_program(plan.program)
    # The rsqrt now sits in a nest (or an equation) with no j around it.
    rsqrt_site = next(site for site in A.equation_sites(plan.program) if _calls_in(site.equation, "rsqrt"))
    assert all(not loop.var.startswith("j") for loop in rsqrt_site.loops)
    assert transforms.verify(a, load_leir(text).analysis).ok


def _calls_in(equation, func: str) -> bool:
    return any(isinstance(n, A.Call) and n.func == func for n in A.walk(equation.rhs))


def test_rows_plans_offer_no_sharing_where_no_call_repeats():
    a = analysis(COLUMN_SUM)
    assert {s.share for s in rows_plans(a, AVX2)} == {False}
    with pytest.raises(PlanFailed, match="no function call"):
        realize(Rows(8, share=True), a)


def test_rows_plan_runs_a_column_sum_over_parallel_column_tiles_with_vectors_of_columns():
    a = analysis(COLUMN_SUM)
    plan = realize(Rows(8), a)
    # j's tiles outside, the reduction over i inside them, 8 columns a vector.
    assert [s.id for s in plan.steps] == ["split", "reorder", "parallelize", "vectorize"]
    assert kinds(plan.program) == "PLV"
    assert transforms.verify(a, load_leir(print_program(plan.program)).analysis).ok


# ------------------------------------------------------------ the plans search


class KindsMeasurer:
    """Latency read off the printed program: a parallel loop halves it, a
    vector loop thirds it, a local cache saves a fifth; every program asked
    for is counted."""

    def __init__(self):
        self.calls: list[str] = []

    def __call__(self, analyses):
        from leir.tools.measuring import Timing

        out = []
        for a in analyses:
            text = print_program(a.program)
            self.calls.append(text)
            ms = 100.0 / 2 ** text.count("P^") / 3 ** text.count("V^") * (0.8 if "@l" in text else 1.0)
            out.append(Timing(ms * (1 + len(text) % 7 / 1000)))
        return out


@pytest.mark.slow
def test_plans_search_keeps_a_whole_plan_as_atomic_steps_within_budget():
    from leir.tools.optimize import optimize

    a = analysis(MATMUL)
    measurer, kept = KindsMeasurer(), []
    result = optimize(a, steps=24, budget=16, strategy="plans", measurer=measurer, cost_model=None,
                      on_kept=lambda before, step, after, record: kept.append((step, record)))
    assert result.measurements <= 16 and len(set(measurer.calls)) + 2 * result.confirmations >= result.measurements
    planned = [s for s in result.steps if s.plan is not None]
    assert planned, result.stop_reason
    n = planned[0].plan["of"]
    assert [s.plan["step"] for s in planned] == list(range(1, n + 1))
    assert all(s.latency_after_ms is None and s.speedup is None for s in planned[:-1])  # not timed alone
    assert planned[-1].speedup > 1 and planned[-1].latency_after_ms < planned[-1].latency_before_ms
    assert "step 1 of" in planned[0].reasoning.lower() and "not timed" in planned[0].reasoning
    # The trace is catalogue steps that replay to the final program, which verifies.
    assert print_program(transforms.replay(a.program, result.trace)) == print_program(result.final)
    assert [s for s, _ in kept] == result.trace
    assert result.to_json()["steps"][0]["plan"]["goal"] == "a tiled contraction"


def test_plans_search_falls_back_to_greedy_when_no_plan_fits():
    from leir.tools.optimize import optimize

    # steps=2: every plan is longer, so none fits; greedy takes the steps.
    result = optimize(analysis(MATMUL), steps=2, budget=12, strategy="plans", measurer=KindsMeasurer(),
                      cost_model=None)
    assert result.steps and all(s.plan is None for s in result.steps)


# ------------------------------------------------------------ GPU plans


def test_gpu_plan_binds_blocks_and_threads_and_builds_for_sm90():
    from leir.bridge.lower import lower
    from leir.bridge.run import build
    from leir.bridge.targets import cuda_build_target
    from leir.tools.plans.gpu import GpuTiling

    a = analysis(MATMUL)
    assert all(isinstance(s, GpuTiling) for s in plans_for(a, "cuda"))
    plan = realize(GpuTiling("C", "i", "j", "k", 8, 2, 16, 2, 8), a)
    binds = [(s.args["loop"], s.args["axis"]) for s in plan.steps if s.id == "bind"]
    assert [axis for _, axis in binds] == ["by", "bx", "ty", "tx"]
    text = print_program(plan.program)
    assert "B^{4}_{by}" in text and "B^{2}_{bx}" in text and "B^{8}_{ty}" in text and "B^{16}_{tx}" in text
    assert "@l" in text  # each thread's 2x2 tile accumulates in registers
    assert transforms.verify(a, load_leir(text).analysis).ok  # thread loops run serially on the CPU
    # Not run on a GPU here (none on this machine): the CUDA source is inspected.
    source = build(lower(load_leir(text).analysis), cuda_build_target("sm_90")).mod.imports[0].inspect_source()
    assert "__launch_bounds__(128)" in source  # 8 x 16 threads a block
    assert "float C_local_ptr[4]" in source
    assert "threadIdx.x" in source and "blockIdx.y" in source
    assert "k_0 == 0" not in source  # the initial value is written before the loop, not tested in it


def test_gpu_plan_that_exceeds_the_thread_limit_is_not_offered():
    from leir.tools.plans.gpu import gpu_plans

    for t in gpu_plans(analysis(MATMUL), random.Random(0), limit=1000):
        assert 64 <= t.ty * t.tx <= 1024
        assert 64 % (t.ty * t.ti) == 0 and 64 % (t.tx * t.tj) == 0


def test_prior_prefers_register_tiles_and_cache_tiles_that_fit():
    from leir.tools.plans.cpu import prior

    extents = {"i": 512, "j": 512, "k": 512}
    good = ContractionTiling("C", "j", 32, "i", 2, "k", k_in=16, v_mid=4, r_mid=16, fuse_outer=True)
    tiny = ContractionTiling("C", "j", 8, "i", 1, "k")  # one vector register, no cache tile, no k chunk
    huge = ContractionTiling("C", "j", 64, "i", 2, "k", k_in=16, v_mid=4, r_mid=32)  # a 64x256 tile: 64 KB
    assert prior(good, extents, AVX2) > prior(tiny, extents, AVX2)
    assert prior(good, extents, AVX2) > prior(huge, extents, AVX2)


def test_attention_scores_tile_along_the_rows_of_k_with_gathered_lanes():
    # S_{b,i,j} += Q_{b,i,d}*K_{b,j,d}: K moves by 16 elements along j, so
    # the lanes gather; the output still moves by 1.
    a = analysis(ATTENTION)
    tilings = contraction_tilings(a, AVX2, random.Random(0), limit=20)
    assert tilings and {t.vector for t in tilings} == {"j"}
    plan = realize(next(t for t in tilings if t.row == "i" and t.pack is None), a)
    assert transforms.verify(a, load_leir(print_program(plan.program)).analysis).ok


def test_a_gathered_operand_is_packed_transposed_so_the_lanes_load_consecutive_elements():
    from leir.explain import access_strides
    from leir.tools.plans.cpu import prior

    a = analysis(ATTENTION)
    tilings = contraction_tilings(a, AVX2, random.Random(0), limit=40)
    packed = [t for t in tilings if t.pack == "K"]
    assert packed and all(t.pack in (None, "K") for t in tilings)
    # The prior puts a packed tiling before the same tiling unpacked.
    extents = {"b": 2, "i": 32, "j": 32, "d": 16}
    t = packed[0]
    unpacked = ContractionTiling(**{**t.__dict__, "pack": None})
    assert prior(t, extents, AVX2, gathered=True) > prior(unpacked, extents, AVX2, gathered=True)
    plan = realize(t, a)
    assert [s.id for s in plan.steps[:2]] == ["cache_read", "transform_layout"]
    after = load_leir(print_program(plan.program)).analysis
    assert transforms.verify(a, after).ok
    # The contraction now reads the copy, and along j every access moves by 1.
    info = next(e for e in after.equations if e.kind in ("reduce", "update"))
    reads = {x.tensor for x in A.walk(info.equation.rhs) if isinstance(x, A.Access)}
    assert "K" not in reads and "Q" in reads
    vector_loop = info.loops[-1].var
    assert set(access_strides(after, info, vector_loop).values()) <= {0, 1}


def test_a_matmul_has_nothing_to_pack():
    tilings = contraction_tilings(analysis(MATMUL), AVX2, random.Random(0), limit=64)
    assert tilings and all(t.pack is None for t in tilings)


@pytest.mark.slow
def test_plans_search_tells_on_plan_what_the_editor_needs_to_offer_the_plan(tmp_path):
    from leir.tools.measuring import StepOutcomes
    from leir.tools.optimize import optimize

    a = analysis(MATMUL)
    told = []
    result = optimize(a, steps=24, budget=16, strategy="plans", measurer=KindsMeasurer(), cost_model=None,
                      on_plan=lambda programs, steps, end, goal: told.append((programs, steps, end, goal)))
    assert len(told) == 1
    programs, steps, end, goal = told[0]
    planned = [s for s in result.steps if s.plan is not None]
    assert list(steps) == result.trace[:len(planned)] and goal == "a tiled contraction"
    assert print_program(programs[0].program) == print_program(a.program)
    outcomes = StepOutcomes(tmp_path)
    outcomes.record_plan(programs, steps, end, goal)
    ahead = outcomes.plan_ahead(programs[2])
    assert (ahead.index, ahead.of, ahead.next_step) == (3, len(steps), steps[2])
    assert outcomes.plan_ahead(analysis(DENSE)) is None


def test_neighbours_differ_in_one_parameter_and_the_search_tries_them():
    from dataclasses import asdict

    from leir.tools.optimize import optimize
    from leir.tools.plans import neighbours

    a = analysis(MATMUL)
    t = ContractionTiling("C", "j", 16, "i", 4, "k", k_in=8)  # a point of the grid
    near = neighbours(t, a, machine=AVX2)
    assert near and t not in near
    for n in near:
        changed = {k for k, v in asdict(n).items() if asdict(t)[k] != v}
        assert len(changed) == 1, changed
    assert any(n.k_in == 16 for n in near) and any(n.cache is False for n in near)
    said = []
    optimize(a, steps=30, budget=40, strategy="plans", measurer=KindsMeasurer(), cost_model=None, progress=said.append)
    assert any("one parameter away from the fastest" in line for line in said)


class ReversingCostModel:
    """Predicts the plans in the reverse of the order it is first asked
    about them (the opposite of the prior), and records what it was told."""

    def __init__(self):
        self.events: list[tuple[str, int]] = []
        self.order: dict[str, int] = {}

    def predict(self, analyses, target):
        self.events.append(("predict", len(analyses)))
        for a in analyses:
            self.order.setdefault(print_program(a.program), len(self.order))
        return [-float(self.order[print_program(a.program)]) for a in analyses]

    def update(self, analyses, ms, target):
        self.events.append(("update", len(analyses)))


def test_the_prior_orders_the_first_round_and_the_updated_cost_model_the_next():
    from leir.tools.optimize import optimize
    from leir.tools.optimize.planned import PLAN_ROUND

    a = analysis(MATMUL)
    model, measurer = ReversingCostModel(), KindsMeasurer()
    optimize(a, steps=30, budget=24, strategy="plans", measurer=measurer, cost_model=model)
    # Nothing is predicted before the first round is measured and learned from.
    assert model.events[0] == ("update", PLAN_ROUND) and model.events[1][0] == "predict"
    # The first round is the prior's: what the same search without a cost model measures first.
    without = KindsMeasurer()
    optimize(a, steps=30, budget=24, strategy="plans", measurer=without, cost_model=None)
    assert measurer.calls[:1 + PLAN_ROUND] == without.calls[:1 + PLAN_ROUND]
    # The second round follows the model: the plans it ranks first, which
    # are the ones the prior ranks last among those left.
    second_round = measurer.calls[1 + PLAN_ROUND:1 + 2 * PLAN_ROUND]
    ranks = [model.order[t] for t in second_round if t in model.order]
    assert ranks and ranks == sorted(ranks, reverse=True)


BATCH1_CONV = """\
L^{1}_{n}
  L^{16}_{k}
    L^{8}_{h}
      L^{32}_{w}
        L^{8}_{c}
          L^{3}_{r} [
            O_{n,k,h,w} += X_{n,c,h+r,w}*Wt_{k,c,r};
          ];
"""


def test_a_batch_of_one_is_not_the_parallel_loop_and_the_prior_counts_the_loop_realize_picks():
    a = analysis(BATCH1_CONV)
    for fuse in (False, True):
        plan = realize(ContractionTiling("O", "w", 8, "k", 4, "c", cache=False, fuse_outer=fuse), a)
        [par] = [s for s in plan.steps if s.id == "parallelize"]
        loop = par.args["loop"]
        assert loop != "n"  # one iteration: nothing to share among the cores
        assert loop == ("h_k_0" if fuse else "h"), loop  # h (8 iterations), fused with k's 4 tiles
        assert transforms.verify(a, analysis(print_program(plan.program))).ok
    from leir.tools.plans.cpu import prior

    extents = {"n": 1, "k": 16, "h": 8, "w": 32, "c": 8, "r": 3}
    spatial = ("n", "k", "h", "w")
    # Parallel over h: 8 iterations for 2 cores; with spatial unknown the
    # prior would count k's 4 tiles only and mark the tiling too serial.
    t = ContractionTiling("O", "w", 8, "k", 4, "c", cache=False)
    assert prior(t, extents, AVX2, spatial=spatial) - prior(t, extents, AVX2) == pytest.approx(1.0)


def test_a_convolution_tiles_registers_over_two_row_loops_that_each_reuse_a_read():
    a = analysis(BATCH1_CONV)
    tilings = contraction_tilings(a, AVX2, random.Random(0), limit=10**6)
    two = [t for t in tilings if t.row2 is not None]
    assert two and {(t.row, t.row2) for t in two} <= {("k", "h"), ("h", "k")}
    for t in tilings:  # r2_in x r_in x vectors within 16 registers
        assert t.r2_in * t.r_in * -(-t.v_in // 8) <= 16
    spec = ContractionTiling("O", "w", 8, "k", 4, "c", cache=False, row2="h", r2_in=2)
    plan = realize(spec, a)
    unrolled = [s.args["loop"] for s in plan.steps if s.id == "unroll"]
    assert len(unrolled) == 2, unrolled  # k's 4 and h's 2 register rows
    text = print_program(plan.program)
    assert "U^{4}" in text and "U^{2}" in text and "V^{8}" in text
    assert transforms.verify(a, analysis(text)).ok
    # A matmul has no third spatial loop.
    assert not any(t.row2 for t in contraction_tilings(analysis(MATMUL), AVX2, random.Random(0), limit=10**6))


def test_avx512s_32_registers_hold_bigger_register_tiles_than_avx2s_16():
    avx512 = Machine(l1d=48 * 1024, l2=2 * 1024 * 1024, l3=32 * 1024 * 1024, vector_bytes=64,
                     vector_isa="AVX-512", cores=2)
    big = analysis(MATMUL.replace("{64}_{i}", "{96}_{i}").replace("{64}_{j}", "{256}_{j}"))

    def accumulators(machine, lanes):
        return {t.r_in * -(-t.v_in // lanes) for t in contraction_tilings(big, machine, random.Random(0), 10**6)}

    assert max(accumulators(AVX2, 8)) == 12
    assert max(accumulators(avx512, 16)) > 12 and max(accumulators(avx512, 16)) <= 28


def test_the_prior_counts_row2s_outer_loop_and_the_row_tiles_of_the_row_loop_alone():
    from leir.tools.plans.cpu import prior

    a = analysis(BATCH1_CONV)
    spec = ContractionTiling("O", "w", 8, "k", 4, "c", cache=False, row2="h", r2_in=2)
    [par] = [s for s in realize(spec, a).steps if s.id == "parallelize"]
    # realize makes row2's outer loop (8 / 2 = 4 iterations) the parallel one.
    assert par.args["loop"].startswith("h"), par.args
    extents = {"n": 1, "k": 16, "h": 8, "w": 32, "c": 8, "r": 3}
    spatial = ("n", "k", "h", "w")
    fused = ContractionTiling("O", "w", 8, "k", 4, "c", cache=False, row2="h", r2_in=2, fuse_outer=True)
    # 4 parallel iterations for 2 cores is too few; fused with k's 16 / 4 = 4
    # row tiles they are 16. (Counting h whole, 8, and k's tiles as
    # 16 / (2 * 4) = 2 saw no difference.)
    assert prior(fused, extents, AVX2, spatial=spatial) - prior(spec, extents, AVX2, spatial=spatial) \
        == pytest.approx(1.0)
