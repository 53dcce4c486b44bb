"""unroll, parallelize, vectorize, bind, rfactor and decompose_reduction on
every bundled example and on generated programs: a step is offered exactly
when its check passes, listing them is cheap, and every offered step
applies (TVM accepts it) and computes what the program computed (sampled
with a fixed seed). Thread-bound programs are verified with their threads
run serially on the CPU."""

from __future__ import annotations

import functools
import random
from pathlib import Path

import pytest

from leir import ast as A
from leir.bridge.document import load_leir
from leir.printer import print_program
from leir.semantics import analyze
from leir.transforms import NotApplicable, apply
from leir.transforms.steps import bind, decompose_reduction, parallelize, rfactor, unroll, vectorize
from leir.transforms import verify
from leir.transforms.base import Context
from leir.transforms.testing import check_offered_exactly_when_check_passes

EXAMPLES = sorted((Path(__file__).resolve().parent.parent / "examples").glob("*.leir"))
MODULES = (unroll, parallelize, vectorize, bind, rfactor, decompose_reduction)
#: Offered steps applied per module and program (TVM must accept each), and
#: verified per module over all the examples (each verification builds two
#: kernels and runs them): a fixed-seed sample keeps the file near a minute.
APPLIED = 1
VERIFIED = 6


def context(text: str) -> Context:
    doc = load_leir(text)
    assert doc.ok, [d.message for d in doc.diagnostics if d.is_error]
    return Context(doc.analysis)


@functools.lru_cache(maxsize=None)
def example(path: Path) -> Context:
    """The example's context, shared by the tests (it keeps its lowering)."""
    return context(path.read_text())


def universe(ctx: Context, module) -> list[dict]:
    """Every step of ``module`` one could ask for on this program, offered
    or not, with loops named as candidates name them."""
    loops = [ctx.loop_ref(s) for s in ctx.loop_sites]
    if module is bind:
        return [{**ref, "axis": a} for ref in loops for a in bind.AXES]
    if module is rfactor:
        out = []
        for site in ctx.loop_sites:
            for k in site.equations:
                rank = len(ctx.analysis.tensors[ctx.analysis.equations[k].equation.lhs.tensor].shape)
                out += [{"block": ctx.block_names[k], "loop": site.loop.var, "factor_axis": a} for a in sorted({0, 1, rank})]
        return out
    if module is decompose_reduction:
        return [{"block": ctx.block_names[k], "loop": s.loop.var} for s in ctx.loop_sites for k in s.equations]
    return loops


def check_every_module_offered_exactly_when_check_passes(ctx: Context) -> None:
    for module in MODULES:
        check_offered_exactly_when_check_passes(module, ctx, universe(ctx, module), NotApplicable)


def apply_offered(ctx: Context, module, rng: random.Random, applied: int = APPLIED):
    """A sample of the offered steps, applied (apply raises TvmRefused if
    TVM refuses one): (candidate, result) pairs."""
    offered = module.candidates(ctx, None)
    return [(c, apply(ctx.analysis, c.step)) for c in rng.sample(offered, min(applied, len(offered)))]


def check_verifies(ctx: Context, candidate, result) -> None:
    v = verify(ctx.analysis, analyze(result))
    assert v.ok, f"{candidate.step.id} {candidate.step.args} changed the result: {v.summary()}\n{print_program(result)}"


def test_steptp_names():
    # decompose_reduction has no Step-TP strategy: theirs keep the implied
    # initial value of a reduction.
    assert [m.STEPTP for m in MODULES] == ["loop_unrolling", "loop_parallelization", "loop_vectorization",
                                           "loop_binding", "reduction_factorization", None]


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_offered_exactly_when_check_passes(path):
    check_every_module_offered_exactly_when_check_passes(example(path))


def test_candidate_counts_on_a_few_examples():
    def counts(name: str) -> dict[str, int]:
        ctx = context((EXAMPLES[0].parent / f"{name}.leir").read_text())
        return {m.ID: len(m.candidates(ctx, None)) for m in MODULES}

    # matmul 128x96x256: i and j spatial, each on every axis but threadIdx.z
    # (at most 64); k the reduction, its partials first or last; no loop
    # short enough to unroll or vectorize
    assert counts("matmul") == {"unroll": 0, "parallelize": 2, "vectorize": 0, "bind": 10, "rfactor": 2,
                                "decompose_reduction": 3}
    # an already scheduled GPU kernel has nothing left to bind or parallelize
    gpu = counts("matmul_gpu")
    assert gpu["bind"] == gpu["parallelize"] == 0 and gpu["decompose_reduction"] == 5


@pytest.mark.slow
@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.ID)
def test_offered_steps_apply_and_sampled_ones_verify(module):
    rng = random.Random(module.ID)
    applied = []
    for path in EXAMPLES:
        ctx = example(path)
        applied += [(ctx, c, result) for c, result in apply_offered(ctx, module, rng)]
    assert applied, f"{module.ID} is offered on no example"
    for ctx, c, result in rng.sample(applied, min(VERIFIED, len(applied))):
        check_verifies(ctx, c, result)


# ------------------------------------------------------ generated programs


class _Programs:
    """Small random programs of the shapes these steps meet: nests of
    several equations, reductions of every combiner, updates of a value
    written before, guards, fused indices, serial, unrolled and
    thread-bound loops, reads of earlier results at shifted indices
    (dependences)."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.vars = 0
        self.readable: dict[str, list[int]] = {}  # tensor -> extents it is fully written over
        self.complete: dict[str, list[int]] = {}  # the same, for tensors of the unit being drawn
        self.this_unit: dict[str, tuple[str, ...]] = {}  # tensor written in this unit -> its index variables
        self.written: dict[str, int] = {}  # tensor -> rank

    def program(self) -> A.Program:
        units = []
        for _ in range(self.rng.choice([1, 2, 3])):
            units.append(self.nest((), 0, set()))
            # What a unit wrote is read only after it: inside it, an element
            # may be read before its first write, which has no defined value.
            self.readable.update(self.complete)
            self.this_unit = {}
        return A.Program((), tuple(units))

    def nest(self, outer: tuple[A.Loop, ...], depth: int, axes: set[str]) -> A.Nest:
        r = self.rng
        loops = []
        for _ in range(r.choice([1, 1, 2, 2, 3])):
            # No P or V loops: whether their lanes depend on each other
            # is what these steps decide, and the analysis does not check.
            kind = r.choices("LUB", [12, 1, 2 if depth == 0 else 0])[0]
            extent = r.choice([1, 2, 3, 4, 8, 8, 16])
            free = [a for a in ("bx", "tx", "ty") if a not in axes]
            if kind == "B" and free:
                var = r.choice(free)
                axes.add(var)
            else:
                kind = "L" if kind == "B" else kind
                self.vars += 1
                var = f"v{self.vars}"
            loops.append(A.Loop(kind, extent, var))
        enclosing = outer + tuple(loops)
        body = [self.nest(enclosing, depth + 1, set(axes)) if depth < 2 and r.random() < 0.3 else self.equation(enclosing)
                for _ in range(r.choice([1, 1, 2, 3]))]
        return A.Nest(tuple(loops), tuple(body))

    def read(self, loops: tuple[A.Loop, ...], exclude: str) -> A.Access:
        r = self.rng
        in_scope = {l.var for l in loops}
        # An element this unit wrote earlier in the same iteration of the
        # loops its index names (a value passed between equations).
        fresh = sorted(n for n, index in self.this_unit.items() if n != exclude and set(index) <= in_scope)
        if fresh and r.random() < 0.3:
            name = r.choice(fresh)
            return A.Access(name, tuple(A.Var(v) for v in self.this_unit[name]) or None)
        names = sorted(n for n in self.readable if n != exclude)
        if names and r.random() < 0.5:
            name = r.choice(names)
            indices = []
            for extent in self.readable[name]:
                fitting = [l for l in loops if l.extent <= extent]
                if fitting and r.random() < 0.7:
                    loop = r.choice(fitting)
                    shift = loop.extent < extent and r.random() < 0.3
                    indices.append(A.Binary("+", A.Var(loop.var), A.Num(1, "1")) if shift else A.Var(loop.var))
                else:
                    k = r.randrange(extent)
                    indices.append(A.Num(k, str(k)))
            return A.Access(name, tuple(indices) or None)
        return A.Access("X", tuple(self.index(loops) for _ in range(2)))

    def index(self, loops: tuple[A.Loop, ...]) -> A.Expr:
        r = self.rng
        terms: list[A.Expr] = [A.Var(l.var) if r.random() < 0.7 else A.Binary("*", A.Var(l.var), A.Num(2, "2"))
                               for l in loops if r.random() < 0.5]
        expr = terms[0] if terms else A.Num(0, "0")
        for t in terms[1:]:
            expr = A.Binary("+", expr, t)
        return A.Binary(r.choice(["//", "%"]), expr, A.Num(2, "2")) if r.random() < 0.1 else expr

    def value(self, loops: tuple[A.Loop, ...], exclude: str, depth: int = 2) -> A.Expr:
        r = self.rng
        c = r.random()
        if depth == 0 or c < 0.4:
            return self.read(loops, exclude)
        if c < 0.5:
            return A.Call("exp", (self.value(loops, exclude, depth - 1),))
        return A.Binary(r.choice("+-*"), self.value(loops, exclude, depth - 1), self.value(loops, exclude, depth - 1))

    def equation(self, loops: tuple[A.Loop, ...]) -> A.Equation:
        r = self.rng
        reduced = {l.var for l in loops if l.kind in "LU" and r.random() < 0.35}
        spatial = [l for l in loops if l.var not in reduced]
        reuse = [n for n, rank in self.written.items() if rank == len(spatial)]
        name = r.choice(reuse) if reuse and r.random() < 0.15 else f"T{len(self.written)}"
        lhs = A.Access(name, tuple(A.Var(l.var) for l in spatial) or None)
        operand = self.value(loops, name)
        rhs = operand
        if reduced or r.random() < 0.2:
            shape = r.choice(["+", "+", "*", "max", "min", "-"])
            rhs = A.Binary(shape, lhs, operand) if len(shape) == 1 else A.Call(shape, (lhs, operand))
        guard = None
        if r.random() < 0.15 and loops:
            loop = r.choice(loops)
            guard = A.Binary("<", A.Var(loop.var), A.Num(max(1, loop.extent - 1), str(max(1, loop.extent - 1))))
        self.written.setdefault(name, len(spatial))
        if name not in self.this_unit and name not in self.readable:
            self.this_unit[name] = tuple(l.var for l in spatial)
        if guard is None and name not in self.complete:
            extents = {l.var: l.extent for l in loops}
            self.complete[name] = [extents[l.var] for l in spatial]
        return A.Equation(lhs, rhs, guard)


def generated(seed: int) -> str | None:
    """A generated program that checks and that TVM runs as the evaluator
    does (reads of never-written temporaries are left out this way)."""
    from leir.bridge.run import check

    for attempt in range(20):
        text = print_program(_Programs(seed * 100 + attempt).program())
        doc = load_leir(text)
        if doc.ok and check(doc.analysis, seed=0).ok:
            return text
    return None


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(6))
def test_generated_programs(seed):
    text = generated(seed)
    assert text is not None, f"seed {seed}: none of 20 drawn programs checks and runs; the generator is broken"
    ctx = context(text)
    check_every_module_offered_exactly_when_check_passes(ctx)
    rng = random.Random(seed)
    for module in MODULES:
        applied = apply_offered(ctx, module, rng, applied=3)
        for c, result in applied[:1]:
            check_verifies(ctx, c, result)
