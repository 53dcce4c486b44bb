"""Every bundled example runs: it lowers, builds for this CPU, and on random
inputs TVM's outputs match both the NumPy evaluator and the example's
hand-written reference in examples/references.py. Every GPU variant also
builds for CUDA (sm_90; building needs nvcc, not a GPU)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tvm")

from leir import ast as A  # noqa: E402
from leir.evaluate import evaluate  # noqa: E402
from leir.inputs import random_inputs  # noqa: E402
from leir.bridge.lower import lower  # noqa: E402
from leir.parser import parse  # noqa: E402
from leir.bridge.run import build, compare, run  # noqa: E402
from leir.semantics import analyze  # noqa: E402
from leir.bridge.targets import cuda_build_target  # noqa: E402

pytestmark = pytest.mark.slow

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
STEMS = sorted(p.stem for p in EXAMPLES.glob("*.leir"))


def _thread_bound(stem: str) -> bool:
    program = parse((EXAMPLES / f"{stem}.leir").read_text()).program
    return any(isinstance(n, A.Loop) and n.kind == "B" for n in A.walk(program))


GPU_STEMS = [s for s in STEMS if _thread_bound(s)]


def _references():
    # By path, as tests/test_examples_reference.py does: examples/ is data.
    spec = importlib.util.spec_from_file_location("examples_references", EXAMPLES / "references.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


REFERENCES = _references()


def _analysis(stem: str):
    result = parse((EXAMPLES / f"{stem}.leir").read_text())
    analysis = analyze(result.program)
    errors = [d.message for d in result.diagnostics + analysis.diagnostics if d.is_error]
    assert errors == [], errors
    return analysis


def _inputs(stem: str, analysis) -> dict[str, np.ndarray]:
    inputs = random_inputs(analysis, seed=0)
    for name in REFERENCES.NONNEGATIVE_INPUTS.get(stem, ()):
        inputs[name] = np.abs(inputs[name])
    return inputs


def test_there_are_examples_and_gpu_variants():
    assert len(STEMS) >= 24 and GPU_STEMS


@pytest.mark.parametrize("stem", STEMS)
def test_example_runs_and_matches_the_evaluator_and_its_reference(stem):
    analysis = _analysis(stem)
    inputs = _inputs(stem, analysis)
    actual = run(analysis, inputs, target="llvm").outputs
    evaluated = evaluate(analysis, inputs)
    reference = getattr(REFERENCES, stem)(**inputs)
    for t in analysis.outputs():
        for source, expected in (("evaluator", evaluated[t.name]), ("reference", reference[t.name])):
            result = compare(actual[t.name], expected, t.dtype)
            assert result.ok, f"{t.name} against the {source}: {result.describe()}"
            assert result.criterion in ("elementwise", "exact"), f"{t.name} against the {source}: {result.describe()}"


@pytest.mark.parametrize("stem", GPU_STEMS)
def test_gpu_variant_builds_for_cuda(stem):
    source = build(lower(_analysis(stem)), cuda_build_target("sm_90")).mod.imports[0].inspect_source()
    program = _analysis(stem).program
    axes = {A.THREAD_AXES[n.var] for n in A.walk(program) if isinstance(n, A.Loop) and n.kind == "B"}
    for axis in axes:
        assert axis in source, f"{axis} missing from the CUDA source"
