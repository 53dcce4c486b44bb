"""Programs and sweeps that the tests of compute_at, reverse_compute_at,
compute_inline and reverse_compute_inline share (their code shares
``leir/transforms/lib/producer_consumer.py``)."""

from __future__ import annotations

import random
from pathlib import Path

from leir.bridge.document import load_leir
from leir.semantics import analyze
from leir.transforms import apply, verify
from leir.transforms.base import Candidate, Context

EXAMPLES = sorted((Path(__file__).resolve().parent.parent / "examples").glob("*.leir"))

#: A 3x3 window over an elementwise producer (a halo of two rows and columns).
HALO = """\
L^{10}_{h}
  L^{10}_{w} [
    P_{h,w} = X_{h,w}*0.5;
  ];

L^{8}_{h}
  L^{8}_{w}
    L^{3}_{r}
      L^{3}_{s} [
        Y_{h,w} += P_{h+r,w+s}*K_{r,s};
      ];
"""

#: A producer written through a split index, read at one element per iteration.
SPLIT_PRODUCER = """\
L^{4}_{io}
  L^{8}_{ii} [
    T_{io*8+ii} = X_{io*8+ii}*3.0;
  ];

L^{32}_{k} [
  Y_{k} = T_{k} + 1.0;
];
"""

#: A consumer that reads its producer transposed.
TRANSPOSED_READ = """\
L^{16}_{i}
  L^{8}_{j} [
    T_{i,j} = X_{i,j}*2.0;
  ];

L^{8}_{a}
  L^{16}_{b} [
    Y_{a,b} = T_{b,a} + 1.0;
  ];
"""

#: An elementwise temporary in half precision.
F16 = """\
in  X: f16[16,8]
tmp T: f16[16,8]

L^{16}_{i}
  L^{8}_{j} [
    T_{i,j} = X_{i,j}*X_{i,j};
  ];

L^{16}_{i}
  L^{8}_{j} [
    Y_{i,j} = T_{i,j} + 1.0;
  ];
"""


def context(text: str) -> Context:
    doc = load_leir(text)
    assert doc.ok, [d.message for d in doc.diagnostics if d.is_error]
    return Context(doc.analysis)


def step(block: str, at_block: str, loop: str) -> dict:
    """The arguments of a ``*compute_at`` step: ``block`` under ``loop`` of ``at_block``."""
    return {"block": block, "at": {"block": at_block, "loop": loop}}


def programs(more: dict[str, str]) -> list[tuple[str, str]]:
    """The bundled examples, then a test module's own programs."""
    return [(p.stem, p.read_text()) for p in EXAMPLES] + sorted(more.items())


def every_block(ctx: Context) -> list[dict]:
    return [{"block": block} for block in ctx.block_names]


def every_block_and_loop(ctx: Context) -> list[dict]:
    return [{"block": block, "at": ctx.loop_ref(site)} for block in ctx.block_names for site in ctx.loop_sites]


def two_of(offered: list[Candidate], name: str) -> list[Candidate]:
    """At most two of the offered steps, chosen with a fixed seed per program."""
    return random.Random(name).sample(offered, min(2, len(offered)))


def check_steps_verify(ctx: Context, steps: list[Candidate]) -> None:
    """Each step builds, runs and computes what the program computed."""
    for candidate in steps:
        result = apply(ctx, candidate.step)
        v = verify(ctx.analysis, analyze(result))
        assert v.ok, f"{candidate.step.args}: {v.summary()}"
