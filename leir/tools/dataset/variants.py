"""Shape variants of a workload: the same computation at other sizes.

A variant maps each *free* extent value of the program to a new value, the
same new value everywhere the old one occurs (the loops of every unit and
the declared shapes), so that dimensions that must agree (softmax's row
length in its three units, a matmul's ``k`` in ``X`` and ``W``) still agree.
Shapes of undeclared tensors are inferred again from the new extents (a
convolution's padded input grows with its output).

An extent value is *frozen* (kept) when:

- it is small (below ``MIN_SCALED``: kernel sizes, batch, heads; a 3x3
  convolution stays 3x3);
- a loop with that extent has a variable that appears in an index with a
  coefficient other than 1, or under ``//`` or ``%`` (``jo*8+ji``,
  ``nk//32``): the loops of a split or fused axis are tied to each other and
  to the shape, and scaling one alone would leave holes or overrun;
- it belongs to a ``B`` (thread-bound) or ``V`` (vectorized) loop, whose
  extents the target constrains.

Every variant is checked before use (``check_variant``): it must analyse
without diagnostics, build and run with TVM and match the NumPy evaluation
(``leir.bridge.run.check``), and, when the workload directory has a
``references.py`` with a function of the workload's name, the NumPy
evaluation must match that independent reference too. A variant that fails
is dropped with its reason, never used.
"""

from __future__ import annotations

import hashlib
import importlib.util
import math
import random
from dataclasses import dataclass, field, replace
from pathlib import Path

from leir import affine
from leir import ast as A
from leir.errors import LeirError
from leir.semantics import Analysis, analyze

#: Extent values below this are kept (kernel windows, batch, heads).
MIN_SCALED = 8
#: Scale factors a variant draws from for each free extent value; most give
#: sizes that are not powers of two.
FACTORS = (0.5, 0.625, 0.75, 0.875, 1.25, 1.375, 1.5)
#: A variant's loop iterations stay within this factor of the original's,
#: so that measuring it costs about what measuring the original does.
MAX_WORK_RATIO = 2.0
#: Draws tried per requested variant before giving up on finding new sizes.
DRAWS_PER_VARIANT = 12


@dataclass(frozen=True)
class Variant:
    """One start program of the dataset."""

    workload: str  # file name, e.g. "matmul.leir"
    #: "orig" for the file as written, else "v1", "v2", ...
    name: str
    analysis: Analysis
    #: old extent value -> new extent value (empty for "orig").
    sizes: dict[int, int] = field(default_factory=dict)

    @property
    def stem(self) -> str:
        return Path(self.workload).stem


def strip_comments(analysis: Analysis) -> Analysis:
    """The same program without comments (a header comment that says "128
    rows" would be wrong for a variant), in canonical form."""
    from leir.bridge.document import load_leir
    from leir.format import canonical_program
    from leir.printer import print_program

    compact = print_program(analysis.complete_program(), "compact")
    stripped = load_leir(compact).analysis
    return analyze(canonical_program(stripped))


def frozen_extents(analysis: Analysis) -> set[int]:
    """Extent values a variant must keep (see the module docstring)."""
    program = analysis.program
    tied: set[str] = set()
    for node in A.walk(program):
        if isinstance(node, A.Access) and node.indices:
            for index in node.indices:
                form = affine.linearize(index)
                names = {n.name for n in A.walk(index) if isinstance(n, A.Var)}
                if form is None or any(form.coeff(v) not in (0, 1) for v in names):
                    tied |= names
    frozen: set[int] = set()
    for node in A.walk(program):
        if isinstance(node, A.Loop):
            if node.extent < MIN_SCALED or node.var in tied or node.kind in ("B", "V") or node.start != 0:
                frozen.add(node.extent)
    return frozen


def free_extents(analysis: Analysis) -> list[int]:
    """Extent values a variant may change, ascending."""
    extents = {n.extent for n in A.walk(analysis.program) if isinstance(n, A.Loop)}
    return sorted(extents - frozen_extents(analysis))


def rescale(program: A.Program, sizes: dict[int, int]) -> A.Program:
    """``program`` with every loop extent and declared dimension equal to a
    key of ``sizes`` replaced by its value."""

    def nest(n: A.Nest) -> A.Nest:
        loops = tuple(replace(l, extent=sizes.get(l.extent, l.extent)) for l in n.loops)
        body = tuple(nest(item) if isinstance(item, A.Nest) else item for item in n.body)
        return replace(n, loops=loops, body=body)

    decls = tuple(replace(d, shape=tuple(sizes.get(s, s) for s in d.shape)) for d in program.decls)
    return replace(program, decls=decls, units=tuple(nest(u) for u in program.units))


def _iterations(program: A.Program) -> int:
    return sum(math.prod(l.extent for l in site.loops) for site in A.equation_sites(program))


def _rng(seed: int, workload: str) -> random.Random:
    digest = hashlib.sha256(f"{seed}:{workload}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def draw_sizes(analysis: Analysis, count: int, seed: int, workload: str) -> list[dict[int, int]]:
    """Up to ``count`` distinct size maps for ``analysis``, reproducible for
    (``seed``, ``workload``)."""
    free = free_extents(analysis)
    if not free or count <= 0:
        return []
    rng = _rng(seed, workload)
    base = _iterations(analysis.program)
    found: list[dict[int, int]] = []
    seen: set[tuple] = set()
    for _ in range(count * DRAWS_PER_VARIANT):
        if len(found) == count:
            break
        sizes = {}
        for value in free:
            new = max(MIN_SCALED, round(value * rng.choice(FACTORS)))
            if new != value:
                sizes[value] = new
        # Two old values mapped to one new value would merge dimensions that
        # were distinct; harmless for shapes, but keep variants one-to-one.
        if not sizes or len(set(sizes.values())) != len(sizes):
            continue
        if any(new in free and new not in sizes for new in sizes.values()):
            continue
        key = tuple(sorted(sizes.items()))
        if key in seen:
            continue
        work = _iterations(rescale(analysis.program, sizes))
        if work > base * MAX_WORK_RATIO:
            continue
        seen.add(key)
        found.append(sizes)
    return found


class VariantError(LeirError):
    """A variant that does not check, build, run, or match its reference."""


def load_references(workloads_dir: Path):
    """The ``references.py`` module of a workload directory, or None."""
    path = Path(workloads_dir) / "references.py"
    if not path.is_file():
        return None
    spec = importlib.util.spec_from_file_location(f"leir_dataset_references_{abs(hash(str(path)))}", path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as e:  # a user's file: report, do not crash
        raise LeirError(f"{path}: cannot be imported ({type(e).__name__}: {e})") from None
    return module


def check_variant(analysis: Analysis, stem: str, references=None, target: str = "llvm") -> None:
    """Raise ``VariantError`` unless the program checks, runs with TVM and
    matches the NumPy evaluation, and (when ``references`` has a function
    named ``stem``) the NumPy evaluation matches that reference."""
    import numpy as np

    from leir.evaluate import evaluate
    from leir.bridge.run import check, compare, random_inputs

    if not analysis.ok:
        first = next(d for d in analysis.diagnostics if d.is_error)
        raise VariantError(f"does not check: {first.message}")
    try:
        result = check(analysis, seed=0, target=target)
    except LeirError as e:
        raise VariantError(f"does not run: {e}") from None
    if not result.ok:
        raise VariantError(f"TVM and the NumPy evaluation differ: {result.summary()}")
    reference = getattr(references, stem, None) if references is not None else None
    if reference is None:
        return
    inputs = random_inputs(analysis, 0)
    nonnegative = getattr(references, "NONNEGATIVE_INPUTS", {}).get(stem, ())
    inputs = {k: (np.abs(v) if k in nonnegative else v) for k, v in inputs.items()}
    try:
        expected = reference(**inputs)
    except Exception as e:  # a size the reference does not take (a constant tied to a shape)
        raise VariantError(f"the reference {stem}() fails at these shapes: {type(e).__name__}: {e}") from None
    got = evaluate(analysis, inputs)
    for t in analysis.outputs():
        if t.name not in expected:
            raise VariantError(f"the reference {stem}() returns no {t.name}")
        c = compare(got[t.name], np.asarray(expected[t.name]), t.dtype)
        # Element-wise only: a constant tied to a size (1/sqrt(32) in
        # attention, 1/96 in a mean) can stay under the MSE bound while
        # computing something else.
        if not c.ok or c.criterion == "mse":
            raise VariantError(f"{t.name} differs from the reference {stem}(): {c.describe()}")


def workload_variants(path: Path, count: int, seed: int, references=None, target: str = "llvm",
                      log=None) -> list[Variant]:
    """The workload at ``path`` and up to ``count`` checked shape variants.
    A workload that itself fails ``check_variant`` gives no variants (the
    reason goes to ``log``)."""
    from leir.bridge.document import load_leir, read_text

    path = Path(path)
    analysis = load_leir(read_text(path)).analysis
    try:
        if not analysis.ok:
            first = next(d for d in analysis.diagnostics if d.is_error)
            raise VariantError(f"does not check: {first.message}")
        base = strip_comments(analysis)
        check_variant(base, path.stem, references, target)
    except VariantError as e:
        if log:
            log(f"{path.name}: skipped ({e})")
        return []
    out = [Variant(path.name, "orig", base, {})]
    for sizes in draw_sizes(base, count, seed, path.name):
        candidate = analyze(rescale(base.program, sizes))
        try:
            check_variant(candidate, path.stem, references, target)
        except VariantError as e:
            if log:
                log(f"{path.name}: variant {_sizes_text(sizes)} dropped ({e})")
            continue
        out.append(Variant(path.name, f"v{len(out)}", strip_comments(candidate), sizes))
    return out


def _sizes_text(sizes: dict[int, int]) -> str:
    return ", ".join(f"{a}->{b}" for a, b in sorted(sizes.items()))
