"""The bundled workloads in examples/.

Every ``examples/<stem>.leir`` parses and analyses without a diagnostic, is
already in the minimal canonical form (declaring only what inference would
not say), is self-contained by inference, and has a NumPy reference
``<stem>`` in ``examples/references.py`` that returns its outputs for inputs
of the shapes and dtypes the analysis infers. The ``_cpu`` and ``_gpu``
variants have the same tensor table as their serial program and put
parallel, vector and thread loops only where TVM accepts them.
"""

from __future__ import annotations

import importlib.util
import inspect
from pathlib import Path

import numpy as np
import pytest

from leir import ast as A
from leir.format import canonical_program
from leir.parser import parse
from leir.printer import print_program
from leir.semantics import TensorInfo, analyze

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


def _tensors(stem: str) -> dict[str, TensorInfo]:
    """The analysis tensor table: what the file means, declared or inferred."""
    return analyze(_program(stem)).tensors


def _random_inputs(stem: str, rng: np.random.Generator) -> dict[str, np.ndarray]:
    nonnegative = REFERENCES.NONNEGATIVE_INPUTS.get(stem, ())
    inputs = {}
    for t in _tensors(stem).values():
        if t.role != "in":
            continue
        dtype = np.dtype(A.DTYPES[t.dtype])
        if dtype.kind in "iu":
            values = rng.integers(-100, 100, size=t.shape)
        else:
            values = rng.standard_normal(t.shape)
        if t.name in nonnegative:
            values = np.abs(values)
        inputs[t.name] = values.astype(dtype)
    return inputs


# ---------------------------------------------------------------- inventory


def test_there_are_at_least_24_examples():
    assert len(STEMS) >= 24, STEMS


def test_every_example_has_a_reference_and_every_reference_an_example():
    references = set(_reference_functions())
    assert sorted(set(STEMS) - references) == [], "examples without a reference"
    assert sorted(references - set(STEMS)) == [], "references without an example"


@pytest.mark.parametrize("stem", CPU_VARIANTS + GPU_VARIANTS)
def test_variant_has_the_same_tensor_table_as_its_serial_program(stem):
    serial = stem.rsplit("_", 1)[0]
    assert serial in STEMS, f"{stem} has no serial program {serial}.leir"

    def table(s: str) -> dict[str, tuple]:
        return {t.name: (t.dtype, t.shape, t.role) for t in _tensors(s).values()}

    assert table(stem) == table(serial)


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
def test_example_is_in_the_minimal_canonical_form(stem):
    # Only the declarations inference needs (non-f32 dtypes, non-global
    # scopes, shapes or roles inference would get wrong).
    text = _text(stem)
    analysis = analyze(parse(text).program)
    assert print_program(canonical_program(analysis, minimal=True)) == text


@pytest.mark.parametrize("stem", STEMS)
def test_example_is_self_contained_with_a_one_line_header(stem):
    # The header may be followed by the first unit's own comment, so only
    # the first line is checked.
    first_line = _text(stem).splitlines()[0]
    assert first_line.startswith("# ") and first_line[2:].strip(), "a one-line comment saying what it computes"
    # Self-contained by inference: every tensor has a dtype, a shape and a
    # role, with no diagnostic (checked above), and there are inputs and
    # outputs to run it on.
    tensors = _tensors(stem)
    assert [t.name for t in tensors.values() if t.role == "in"] != []
    assert [t.name for t in tensors.values() if t.role == "out"] != []
    for t in tensors.values():
        assert t.dtype in A.DTYPES and t.scope in A.SCOPES, t
        assert all(isinstance(d, int) and d > 0 for d in t.shape), t


# --------------------------------------------------------------- references


@pytest.mark.parametrize("stem", STEMS)
def test_reference_returns_the_outputs(stem):
    inputs = _random_inputs(stem, np.random.default_rng(0))
    outputs = getattr(REFERENCES, stem)(**inputs)
    expected = {t.name: t for t in _tensors(stem).values() if t.role == "out"}
    assert sorted(outputs) == sorted(expected)
    for name, t in expected.items():
        value = outputs[name]
        assert isinstance(value, np.ndarray), name
        assert value.shape == t.shape, name
        assert value.dtype == np.dtype(A.DTYPES[t.dtype]), name
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
