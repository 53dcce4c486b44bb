"""Time the LEIR front end (parse + analyze) on a 2,000-line file.

The file repeats a mix of realistic units (matmul, row softmax, layer norm
statistics, a 3x3 convolution, a transpose with a guard, a GPU-bound
reduction), each copy with its own tensor names, in canonical layout. The
budget is 100 ms per parse + analyze: an editor re-checks the whole document
on every keystroke.

    python bench/parse_check.py [--lines 2000] [--repeat 20] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import time

from leir.parser import parse
from leir.printer import print_program
from leir.semantics import analyze

# One copy of each unit; ``{n}`` makes every tensor name unique per copy.
UNITS = (
    """\
L^{{64}}_{{i=0}}L^{{32}}_{{j=0}}L^{{128}}_{{k=0}}[C{n}^{{f32,g}}_{{i,j}}=C{n}^{{f32,g}}_{{i,j}}+X{n}^{{f32,g}}_{{i,k}}*W{n}^{{f32,g}}_{{k,j}};];""",
    """\
P^{{128}}_{{i=0}}L^{{100}}_{{j=0}}[M{n}^{{f32,g}}_{{i}}=max(M{n}^{{f32,g}}_{{i}},S{n}^{{f32,g}}_{{i,j}});];\
P^{{128}}_{{i=0}}L^{{100}}_{{j=0}}[Z{n}^{{f32,g}}_{{i}}=Z{n}^{{f32,g}}_{{i}}+exp(S{n}^{{f32,g}}_{{i,j}}-M{n}^{{f32,g}}_{{i}});];\
P^{{128}}_{{i=0}}L^{{25}}_{{jo=0}}V^{{4}}_{{ji=0}}[Y{n}^{{f32,g}}_{{i,jo*4+ji}}=exp(S{n}^{{f32,g}}_{{i,jo*4+ji}}-M{n}^{{f32,g}}_{{i}})/Z{n}^{{f32,g}}_{{i}};];""",
    """\
B^{{96}}_{{tx=0}}L^{{94}}_{{a=0}}L^{{30}}_{{c=0}}L^{{89}}_{{d=0}}[F{n}^{{f16,g}}_{{tx,a}}=F{n}^{{f16,g}}_{{tx,a}}+A{n}^{{f16,g}}_{{tx,a,c,d}};];\
B^{{96}}_{{tx=0}}L^{{94}}_{{a=0}}[G{n}^{{f16,g}}_{{tx,a}}=F{n}^{{f16,g}}_{{tx,a}}/2670;];\
B^{{96}}_{{tx=0}}L^{{94}}_{{a=0}}L^{{30}}_{{c=0}}L^{{89}}_{{d=0}}[H{n}^{{f16,g}}_{{tx,a}}=H{n}^{{f16,g}}_{{tx,a}}+(A{n}^{{f16,g}}_{{tx,a,c,d}}-G{n}^{{f16,g}}_{{tx,a}})**2;];""",
    """\
B^{{32}}_{{bx=0}}B^{{32}}_{{ty=0}}B^{{32}}_{{tx=0}}L^{{16}}_{{c=0}}L^{{3}}_{{r=0}}L^{{3}}_{{s=0}}[O{n}^{{f32,g}}_{{bx,ty,tx}}=O{n}^{{f32,g}}_{{bx,ty,tx}}+I{n}^{{f32,g}}_{{c,ty+r,tx+s}}*K{n}^{{f32,g}}_{{bx,c,r,s}};];""",
    """\
L^{{4}}_{{io=0}}L^{{32}}_{{ii=0}}L^{{50}}_{{j=0}}[T{n}^{{f32,g}}_{{j,io*32+ii}}=R{n}^{{f32,g}}_{{io*32+ii,j}} where io*32+ii<100;];""",
)


def build_source(lines: int) -> str:
    """Canonical LEIR of at least ``lines`` lines (comments included)."""
    chunks: list[str] = []
    total = 0
    n = 0
    while total < lines:
        compact = UNITS[n % len(UNITS)].format(n=n)
        text = f"# copy {n}\n" + print_program(analyze(parse(compact).program).complete_program())
        chunks.append(text)
        total += text.count("\n") + 1
        n += 1
    return "\n".join(chunks)


def check(text: str) -> None:
    result = parse(text)
    analyze(result.program)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--profile", action="store_true", help="print the top of a cProfile of one run")
    args = ap.parse_args()

    text = build_source(args.lines)
    n_lines = text.count("\n") + 1
    parsed = parse(text)
    analysis = analyze(parsed.program)
    errors = [d for d in parsed.diagnostics + analysis.diagnostics if d.is_error]
    assert not errors, errors[:3]

    if args.profile:
        profiler = cProfile.Profile()
        profiler.enable()
        check(text)
        profiler.disable()
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(25)

    check(text)  # warm up
    times = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        check(text)
        times.append((time.perf_counter() - t0) * 1000)
    median = statistics.median(times)
    print(f"{n_lines} lines, {len(text)} chars, {len(analysis.equations)} equations, {len(analysis.tensors)} tensors")
    print(f"parse+analyze: median {median:.1f} ms, min {min(times):.1f} ms, max {max(times):.1f} ms, "
          f"{n_lines / (median / 1000):,.0f} lines/s")


if __name__ == "__main__":
    main()
