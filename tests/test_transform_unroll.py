"""unroll: a short serial loop becomes ``U``; one typed error per
precondition."""

from __future__ import annotations

import pytest

from leir.transforms.steps import unroll
from leir.transforms.testing import check_action, check_not_applicable

WINDOW = """\
L^{30}_{h}
  L^{30}_{w}
    L^{3}_{r}
      L^{3}_{s}$0 [
        O_{h,w} += X_{h+r,w+s}*K_{r,s};
      ];
"""


@pytest.mark.slow
def test_unroll_inner_loop_of_a_split():
    check_action(unroll, """\
L^{64}_{i}
  L^{4}_{jo}
    L^{8}_{ji}$0 [
      Y_{i,jo*8+ji} = X_{i,jo*8+ji} + 1.0;
    ];
""", """\
L^{64}_{i}
  L^{4}_{jo}
    U^{8}_{ji} [
      Y_{i,jo*8+ji} = X_{i,jo*8+ji} + 1.0;
    ];
""")


@pytest.mark.slow
def test_unroll_keeps_other_units_and_comments():
    check_action(unroll, """\
# first
L^{8}_{i} [
  T_{i} = X_{i}*2.0;
];

# second
L^{8}_{i}$0 [
  Y_{i} = T_{i} + 1.0;  # add one
];
""", """\
# first
L^{8}_{i} [
  T_{i} = X_{i}*2.0;
];

# second
U^{8}_{i} [
  Y_{i} = T_{i} + 1.0;  # add one
];
""")


def test_unroll_counts_instances_of_every_equation_under_the_loop():
    from leir.bridge.document import load_leir
    from leir.transforms.base import Context

    doc = load_leir("""\
L^{4}_{i} [
  T_{i} = X_{i};
  L^{8}_{j} [
    Y_{i,j} = T_{i}*W_{j};
  ];
];
""")
    ctx = Context(doc.analysis)
    site = ctx.loop_site("T", "i")
    assert unroll.instances(ctx, site) == 4 + 4 * 8


def test_unroll_fail_loop_not_serial():
    e = check_not_applicable(unroll, WINDOW.replace("L^{30}_{h}", "P^{30}_{h}$0").replace("$0 [", " ["),
                             unroll.LoopNotSerial, {"block": "O", "loop": "h"})
    assert "loop h" in e.short and "parallel" in e.detail


def test_unroll_fail_loop_too_short():
    e = check_not_applicable(unroll, WINDOW.replace("L^{3}_{s}$0", "L^{1}_{s}$0"), unroll.LoopTooShort,
                             {"block": "O", "loop": "s"})
    assert "loop s" in e.short


def test_unroll_fail_too_many_instances():
    e = check_not_applicable(unroll, WINDOW.replace("L^{3}_{r}", "L^{3}_{r}$0").replace("L^{3}_{s}$0", "L^{30}_{s}"),
                             unroll.TooManyInstances, {"block": "O", "loop": "r"})
    assert "loop r" in e.short and "90" in e.detail and e.span is not None


def test_unroll_offers_every_short_loop_and_nothing_else():
    from leir.bridge.document import load_leir
    from leir.transforms.base import Context

    doc = load_leir(WINDOW.replace("$0", ""))
    offered = {c.step.args["loop"] for c in unroll.candidates(Context(doc.analysis), None)}
    assert offered == {"r", "s"}
