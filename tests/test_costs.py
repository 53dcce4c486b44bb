"""The cost-model seam (``leir.tools.costs``): program features computed from
the analysis alone, and ``load_cost_model``, which finds an installed model
through the ``leir.cost_models`` entry points and returns None without one."""

from __future__ import annotations

import importlib.metadata
import math
import time
from pathlib import Path

import pytest

from leir.bridge.document import load_leir
from leir.explain import Machine, access_strides, working_set
from leir.tools import costs
from leir.tools.costs import FEATURE_NAMES, CostModel, load_cost_model, program_features

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
#: A fixed machine, so that the figures do not depend on the CPU running the tests.
MACHINE = Machine(l1d=32 * 1024, l2=1024 * 1024, l3=32 * 1024 * 1024, vector_bytes=32, vector_isa="AVX2",
                  cores=2, line_bytes=64)

NAIVE = """\
L^{128}_{i}
  L^{96}_{j}
    L^{256}_{k} [
      C_{i,j} += X_{i,k}*W_{k,j};
    ];
"""

#: The same matmul, rows in parallel, k outside the columns, 8 columns per vector.
PARALLEL_VECTOR = """\
P^{128}_{i}
  L^{12}_{jo}
    L^{256}_{k}
      V^{8}_{ji} [
        C_{i,jo*8+ji} += X_{i,k}*W_{k,jo*8+ji};
      ];
"""

#: What the tiled-contraction plan makes of a 512^3 matmul: a local accumulator.
TILED_512 = """\
tmp C_local: f32[512,512] @l

P^{32}_{i_0_0}
  L^{8}_{j_0_0}
    L^{4}_{i_0_1}
      L^{4}_{j_0_1} [
        U^{4}_{i_1}
          V^{16}_{j_1} [
            C_local_{i_0_0*16+i_0_1*4+i_1,j_0_0*64+j_0_1*16+j_1} = 0.0;
          ];
        L^{512}_{k}
          U^{4}_{i_1}
            V^{16}_{j_1} [
              C_local_{i_0_0*16+i_0_1*4+i_1,j_0_0*64+j_0_1*16+j_1} += X_{(i_0_0*4+i_0_1)*4+i_1,k}*W_{k,(j_0_0*4+j_0_1)*16+j_1};
            ];
        L^{4}_{ax0}
          V^{16}_{ax1} [
            C_{i_0_0*16+i_0_1*4+ax0,j_0_0*64+j_0_1*16+ax1} = C_local_{i_0_0*16+i_0_1*4+ax0,j_0_0*64+j_0_1*16+ax1};
          ];
      ];
"""


def analysis_of(text: str):
    doc = load_leir(text)
    assert doc.analysis.ok, doc.diagnostics
    return doc.analysis


def features(text: str, machine: Machine = MACHINE, **kw) -> dict[str, float]:
    values = program_features(analysis_of(text), machine, **kw)
    assert len(values) == len(FEATURE_NAMES)
    return dict(zip(FEATURE_NAMES, values))


def example_texts() -> list[tuple[str, str]]:
    return [(p.name, p.read_text()) for p in sorted(EXAMPLES.glob("*.leir"))]


def test_feature_names_are_unique_and_every_example_gives_that_many_finite_floats():
    assert len(set(FEATURE_NAMES)) == len(FEATURE_NAMES) > 100
    for name, text in example_texts() + [("tiled", TILED_512)]:
        values = program_features(analysis_of(text), MACHINE)
        assert len(values) == len(FEATURE_NAMES), name
        assert all(isinstance(v, float) and math.isfinite(v) for v in values), name


def test_features_are_deterministic():
    for _, text in example_texts()[:12] + [("tiled", TILED_512)]:
        a = program_features(analysis_of(text), MACHINE)
        assert program_features(analysis_of(text), MACHINE) == a
        assert program_features(analysis_of(text), MACHINE) == a  # nothing memoised across calls changes it


def test_a_parallel_vectorized_matmul_differs_from_the_naive_one_where_it_should():
    naive, fast = features(NAIVE), features(PARALLEL_VECTOR)
    # The same computation: the same iterations and arithmetic.
    for name in ("prog.log2_iterations", "prog.log2_operations", "prog.log2_compulsory_bytes", "prog.log2_intensity"):
        assert naive[name] == pytest.approx(fast[name]), name
    assert naive["eq0.loops"] == 3 and fast["eq0.loops"] == 4
    # Threads: none, then the outermost loop's 128 rows over 2 cores.
    assert naive["eq0.parallel_depth"] == -1 and naive["eq0.log2_parallel_extent"] == 0
    assert fast["eq0.parallel_depth"] == 0 and fast["eq0.log2_parallel_extent"] == pytest.approx(math.log2(129))
    assert fast["eq0.parallel_per_core"] == 64 and fast["eq0.parallel_balance"] == 1
    assert fast["eq0.in3.kind_P"] == 1 and naive["eq0.in2.kind_L"] == 1
    # Vectors: 8 f32 lanes (32 bytes: the AVX2 register) on the innermost loop.
    assert naive["eq0.vector_lanes"] == 0 and fast["eq0.vector_lanes"] == 8
    assert fast["eq0.vector_innermost"] == 1 and fast["eq0.vector_fill"] == 1
    assert fast["eq0.in0.kind_V"] == 1 and naive["eq0.in0.kind_V"] == 0 and naive["eq0.in0.kind_L"] == 1
    assert naive["eq0.in0.log2_extent"] == 8 and fast["eq0.in0.log2_extent"] == 3
    assert naive["eq0.in0.reduction_axis"] == 1 and fast["eq0.in0.reduction_axis"] == 0
    # Innermost strides: along k, C 0, X 1, W 96 (a line per iteration);
    # along ji, C 1, X 0, W 1: both stride-1 accesses vectorize.
    assert (naive["eq0.in0_stride0"], naive["eq0.in0_stride1"], naive["eq0.in0_stride_other"]) == (1, 1, 1)
    assert (fast["eq0.in0_stride0"], fast["eq0.in0_stride1"], fast["eq0.in0_stride_other"]) == (1, 2, 0)
    assert fast["eq0.vector_stride1"] == 2 and fast["eq0.vector_stride_other"] == 0
    assert naive["eq0.write_stride0"] == 1 and fast["eq0.write_stride1"] == 1
    # One iteration of the second loop from the inside: naive (j), the
    # whole k loop, a row of X (16 lines) and a column of W (256 lines, one
    # per element); vectorized (k), 8 elements of C and W and one of X.
    assert naive["eq0.in1.log2_ws_bytes"] == pytest.approx(math.log2(1 + (1 + 16 + 256) * 64))
    assert fast["eq0.in1.log2_ws_bytes"] == pytest.approx(math.log2(1 + 3 * 64))
    # L1 fetches: in both, the innermost loop whose pass overflows 32 KiB is
    # the second (j; jo), over all 96 columns of W (1,558 lines); each of its
    # iterations fetches the k loop's 273 lines: 128 x 96 times naive, 128 x
    # 12 times vectorized. L3 holds everything: the footprint, once.
    assert naive["eq0.log2_traffic_l1"] == pytest.approx(math.log2(1 + 128 * 96 * 273 * 64))
    assert fast["eq0.log2_traffic_l1"] == pytest.approx(math.log2(1 + 128 * 12 * 273 * 64))
    assert naive["eq0.log2_traffic_l3"] == fast["eq0.log2_traffic_l3"] == naive["eq0.log2_nest_bytes"]
    assert naive["prog.log2_traffic_l1"] == naive["eq0.log2_traffic_l1"]
    # Over the whole program: every iteration parallel and vectorized, and
    # 8 lanes on each of 2 cores: a sixteenth of the operations each.
    assert (naive["prog.parallel_share"], naive["prog.vector_share"]) == (0, 0)
    assert (fast["prog.parallel_share"], fast["prog.vector_share"], fast["prog.contiguous_share"]) == (1, 1, 1)
    assert naive["prog.log2_ops_per_lane_core"] == pytest.approx(math.log2(1 + 128 * 96 * 256 * 2))
    assert fast["prog.log2_ops_per_lane_core"] == pytest.approx(math.log2(1 + 128 * 96 * 256 * 2 / 16))
    assert fast["prog.log2_parallel_starts"] == pytest.approx(1)  # log2(1 + 1): started once


def test_the_tiled_program_reads_as_tiled():
    f = features(TILED_512)
    assert f["prog.local_buffers"] == 1 and f["prog.shared_buffers"] == 0
    assert f["prog.log2_local_bytes"] == pytest.approx(math.log2(1 + 512 * 512 * 4))
    assert f["prog.nests"] == 1 and f["prog.equations"] == 3
    # The dominant equation is the accumulation, 512^3 iterations.
    assert f["eq0.log2_iterations"] == pytest.approx(math.log2(1 + 512 ** 3))
    assert f["eq0.share"] > 0.99 and f["eq0.reduction"] == 1
    assert f["eq0.loops"] == 7 and f["eq0.vector_lanes"] == 16 and f["eq0.log2_unrolled"] == pytest.approx(math.log2(5))
    assert f["eq0.in0.kind_V"] == 1 and f["eq0.in1.kind_U"] == 1 and f["eq0.in2.kind_L"] == 1
    assert f["eq0.in2.reduction_axis"] == 1 and f["eq0.in2.log2_extent"] == 9
    # One iteration of j_0_1 (the whole k loop): 512 x 4 of X and 512 x 16
    # of W, more than L1, less than L2. Each element loaded is used many times.
    ws = f["eq0.in3.log2_ws_bytes"]
    assert 32 * 1024 < 2 ** ws < 1024 * 1024
    assert f["eq0.in3.ws_over_l1"] > 1 > f["eq0.in3.ws_over_l2"]
    assert f["eq0.in2.log2_reuse"] > 2
    assert f["eq0.parallel_depth"] == 0 and f["eq0.parallel_per_core"] == 16
    # The second equation: the initialisation (ties with the write-back go by program order).
    assert f["eq1.present"] == 1 and f["eq1.reduction"] == 0 and f["eq1.loops"] == 6


def test_a_small_program_pads_the_missing_equation_and_loops():
    f = features("L^{16}_{i} [\n  Y_{i} = X_{i}*2.0;\n];\n")
    assert f["eq0.present"] == 1 and f["eq1.present"] == 0
    assert f["eq0.in1.log2_extent"] == -1 and f["eq0.in1.kind_L"] == 0
    assert all(f[n] == 0 for n in FEATURE_NAMES if n.startswith("eq1."))


def test_the_machine_and_the_target_are_read():
    small = Machine(l1d=16 * 1024, l2=256 * 1024, l3=8 * 1024 * 1024, vector_bytes=64, vector_isa="AVX-512",
                    cores=8, line_bytes=64)
    a, b = features(TILED_512), features(TILED_512, small)
    assert b["eq0.in3.ws_over_l1"] == pytest.approx(2 * a["eq0.in3.ws_over_l1"])
    assert b["prog.log2_cores"] == 3 and b["eq0.parallel_per_core"] == 4
    assert b["prog.vector_lanes_f32"] == 16 and b["eq0.vector_fill"] == pytest.approx(a["eq0.vector_fill"] / 2)
    assert a["prog.target_cuda"] == 0 and features(TILED_512, target="cuda")["prog.target_cuda"] == 1


def test_working_sets_and_strides_are_the_explain_facts():
    """The features compute working sets and strides with the indices
    linearized once per program; they must be ``leir.explain``'s."""
    for name, text in example_texts() + [("tiled", TILED_512)]:
        analysis = analysis_of(text)
        f = costs._Features(analysis, MACHINE)
        for info in analysis.equations:
            for loop in info.loops:
                ws = sum(working_set(analysis, loop, line_bytes=MACHINE.line_bytes).values())
                assert f.loop(loop)[0] == pytest.approx(ws), (name, loop.var)
                assert f.strides(info, loop.var) == access_strides(analysis, info, loop.var), (name, loop.var)


def test_features_are_fast():
    """The goal is thousands of programs a second; at least 200/s on the
    tiled 512^3 matmul. Timed loosely here (the machine is shared)."""
    analysis = analysis_of(TILED_512)
    program_features(analysis, MACHINE)
    n, t0 = 0, time.perf_counter()
    while n < 50:
        program_features(analysis, MACHINE)
        n += 1
    rate = n / (time.perf_counter() - t0)
    assert rate > 50, f"{rate:.0f} programs/s"


# ----------------------------------------------------------------- the seam


class FakeEntryPoint:
    def __init__(self, name, load):
        self.name = name
        self.value = f"fake:{name}"
        self._load = load

    def load(self):
        return self._load()


class ConstantModel:
    def __init__(self, name):
        self.name = name

    def predict(self, analyses, target):
        return [1.0] * len(analyses)

    def update(self, analyses, ms, target):
        pass


def _entry_points(monkeypatch, eps):
    def entry_points(**kw):
        assert kw == {"group": "leir.cost_models"}
        return list(eps)

    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)


def test_no_cost_model_installed_is_none(monkeypatch, caplog):
    _entry_points(monkeypatch, [])
    with caplog.at_level("DEBUG", logger="leir.tools.costs"):
        assert load_cost_model() is None
        assert load_cost_model("default") is None
    assert "nothing is installed" in caplog.text


def test_a_model_that_fails_to_load_is_none(monkeypatch, caplog):
    def broken():
        raise ImportError("No module named 'xgboost'")

    _entry_points(monkeypatch, [FakeEntryPoint("default", lambda: broken)])
    with caplog.at_level("DEBUG", logger="leir.tools.costs"):
        assert load_cost_model() is None
    assert "xgboost" in caplog.text
    _entry_points(monkeypatch, [FakeEntryPoint("default", lambda: (lambda: object()))])
    assert load_cost_model() is None  # not a CostModel


def test_the_default_then_the_first_by_name_then_by_its_name(monkeypatch):
    eps = [FakeEntryPoint("zeta", lambda: (lambda: ConstantModel("zeta"))),
           FakeEntryPoint("alpha", lambda: (lambda: ConstantModel("alpha")))]
    _entry_points(monkeypatch, eps)
    got = load_cost_model()
    assert isinstance(got, CostModel) and got.name == "alpha"
    assert load_cost_model("zeta").name == "zeta"
    assert load_cost_model("missing") is None
    _entry_points(monkeypatch, eps + [FakeEntryPoint("default", lambda: (lambda: ConstantModel("default")))])
    assert load_cost_model().name == "default"
