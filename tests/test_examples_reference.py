"""The bundled workloads in examples/.

Every ``examples/<stem>.leir`` parses and analyses without a diagnostic, is
already in canonical layout, declares every tensor it uses, and has a NumPy
reference ``<stem>`` in ``examples/references.py`` that returns its declared
outputs for inputs of its declared shapes. The ``_cpu`` and ``_gpu`` variants
declare the same tensors as their serial program and put parallel, vector and
thread loops only where TVM accepts them.
"""

from __future__ import annotations

import importlib.util
import inspect
from pathlib import Path

import numpy as np
import pytest

from leir import ast as A
from leir.parser import parse
from leir.printer import print_program
from leir.semantics import analyze

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
STEMS = sorted(p.stem for p in EXAMPLES.glob("*.leir"))
CPU_VARIANTS = [s for s in STEMS if s.endswith("_cpu")]
GPU_VARIANTS = [s for s in STEMS if s.endswith("_gpu")]
THREAD_AXES = ("tx", "ty", "tz")
# CUDA's limit on threads per block, for every GPU the project targets.
MAX_THREADS_PER_BLOCK = 1024


def _load_references():
    # By path, as the verifier does: examples/ is data, not a package.
    spec = importlib.util.spec_from_file_location("examples_references", EXAMPLES / "references.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


REFERENCES = _load_references()


def _reference_functions() -> dict[str, object]:
    return {
        name: obj
        for name, obj in vars(REFERENCES).items()
        if inspect.isfunction(obj) and obj.__module__ == REFERENCES.__name__ and not name.startswith("_")
    }


def _text(stem: str) -> str:
    return (EXAMPLES / f"{stem}.leir").read_text()


def _program(stem: str) -> A.Program:
    return parse(_text(stem)).program


def _random_inputs(stem: str, program: A.Program, rng: np.random.Generator) -> dict[str, np.ndarray]:
    nonnegative = REFERENCES.NONNEGATIVE_INPUTS.get(stem, ())
    inputs = {}
    for decl in program.decls:
        if decl.role != "in":
            continue
        dtype = np.dtype(A.DTYPES[decl.dtype])
        if dtype.kind in "iu":
            values = rng.integers(-100, 100, size=decl.shape)
        else:
            values = rng.standard_normal(decl.shape)
        if decl.name in nonnegative:
            values = np.abs(values)
        inputs[decl.name] = values.astype(dtype)
    return inputs


# ---------------------------------------------------------------- inventory


def test_there_are_at_least_24_examples():
    assert len(STEMS) >= 24, STEMS


def test_every_example_has_a_reference_and_every_reference_an_example():
    references = set(_reference_functions())
    assert sorted(set(STEMS) - references) == [], "examples without a reference"
    assert sorted(references - set(STEMS)) == [], "references without an example"


@pytest.mark.parametrize("stem", CPU_VARIANTS + GPU_VARIANTS)
def test_variant_declares_the_same_tensors_as_its_serial_program(stem):
    serial = stem.rsplit("_", 1)[0]
    assert serial in STEMS, f"{stem} has no serial program {serial}.leir"
    # Decl equality ignores spans and comments.
    assert _program(stem).decls == _program(serial).decls


# -------------------------------------------------------------------- text


@pytest.mark.parametrize("stem", STEMS)
def test_example_parses_and_analyses_without_diagnostics(stem):
    result = parse(_text(stem))
    assert result.diagnostics == []
    assert analyze(result.program).diagnostics == []


@pytest.mark.parametrize("stem", STEMS)
def test_example_is_in_canonical_layout(stem):
    text = _text(stem)
    assert print_program(parse(text).program) == text


@pytest.mark.parametrize("stem", STEMS)
def test_example_is_self_contained_with_a_one_line_header(stem):
    program = _program(stem)
    assert len(program.decls[0].comments.before) == 1, "a one-line comment saying what it computes"
    undeclared = [t.name for t in analyze(program).tensors.values() if not t.declared]
    assert undeclared == []


# --------------------------------------------------------------- references


@pytest.mark.parametrize("stem", STEMS)
def test_reference_returns_the_declared_outputs(stem):
    program = _program(stem)
    inputs = _random_inputs(stem, program, np.random.default_rng(0))
    outputs = getattr(REFERENCES, stem)(**inputs)
    declared = {d.name: d for d in program.decls if d.role == "out"}
    assert sorted(outputs) == sorted(declared)
    for name, decl in declared.items():
        value = outputs[name]
        assert isinstance(value, np.ndarray), name
        assert value.shape == decl.shape, name
        assert value.dtype == np.dtype(A.DTYPES[decl.dtype]), name
        assert np.isfinite(value).all(), name


# ------------------------------------------------------------ loop kinds


@pytest.mark.parametrize("stem", GPU_VARIANTS)
def test_gpu_variant_binds_spatial_axes_within_one_thread_block(stem):
    for eq in analyze(_program(stem)).equations:
        written, loops = eq.equation.lhs.tensor, eq.loops
        bound = [l for l in loops if l.kind == "B"]
        threads = [l for l in bound if l.var in THREAD_AXES]
        assert threads, f"{written}: every kernel needs thread loops"
        # Thread-bound loops outermost: each unit is one kernel launch.
        assert loops[: len(bound)] == tuple(bound), f"{written}: a loop encloses a B loop"
        assert np.prod([l.extent for l in threads]) <= MAX_THREADS_PER_BLOCK, f"{written}: threads per block"
        # TVM binds a thread axis only to a data-parallel block iterator.
        assert [l.var for l in bound if l.var not in eq.spatial] == [], f"{written}: B loop on a reduction axis"


@pytest.mark.parametrize("stem", CPU_VARIANTS)
def test_cpu_variant_parallelises_and_vectorises_spatial_axes_only(stem):
    for eq in analyze(_program(stem)).equations:
        written, loops = eq.equation.lhs.tensor, eq.loops
        assert loops[0].kind == "P", f"{written}: the outermost loop runs in parallel"
        # TVM parallelises and vectorises only data-parallel block iterators.
        reduction = [l.var for l in loops if l.kind in "PV" and l.var not in eq.spatial]
        assert reduction == [], f"{written}: P or V loop on a reduction axis"
        vector = [l for l in loops if l.kind == "V"]
        if vector:
            (v,) = vector
            assert v is loops[-1], f"{written}: the vector loop is innermost"
            last_index = eq.equation.lhs.indices[-1]
            last_vars = {n.name for n in A.walk(last_index) if isinstance(n, A.Var)}
            assert v.var in last_vars, f"{written}: the vector loop runs along the output's last axis"
