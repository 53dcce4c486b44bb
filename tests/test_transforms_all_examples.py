"""Every transformation on every bundled example.

Fast: listing candidates never raises, and every candidate is a step an
editor can carry (JSON arguments, a range inside the file).

Slow: the loop and memory transformations (the groups the registry's
comments mark, as Step-TP groups them) apply and verify a deterministic
sample of the steps they offer on every example — at most
``SAMPLE_PER_TRANSFORM`` per transformation and ``SAMPLE_PER_EXAMPLE`` per
example (taken round robin, so every transformation that offers a step is
tried), drawn with a fixed seed, and every offered step on the smallest
example. A step that is offered and then refused, or that does not
verify, is a bug in that transformation's check. (``bench/transforms.py``
does the same for every group and writes docs/transforms.md.)
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest

from leir import transforms as T
from leir.bridge.document import load_leir
from leir.semantics import analyze
from leir.transforms.base import Context

EXAMPLES = sorted((Path(__file__).resolve().parent.parent / "examples").glob("*.leir"))
#: The slow test's sample: at most this many steps per transformation per
#: example, and per example in all (the attention examples offer the most
#: steps and are the slowest to build). 2 and 20 keep the whole file under
#: three minutes of CPU on the 2-core development machine (about 620
#: steps; 2 per transformation with no cap was 708 steps, 3.4 minutes).
SAMPLE_PER_TRANSFORM = 2
SAMPLE_PER_EXAMPLE = 20
#: Small enough to try every offered loop and memory step.
EXHAUSTIVE = ("matmul_gpu",)
SCHEDULE_GROUPS = T.SCHEDULE_GROUPS


def registry_groups() -> dict[str, str]:
    """Transformation id -> group, as each step module declares it."""
    return {t.ID: t.GROUP for t in T.ALL}


def test_the_catalogue_is_ordered_by_group_as_its_comments_say():
    """``ALL`` lists the groups in ``GROUPS`` order, and each ``# --- group``
    comment of the tuple heads the steps of that group."""
    assert [T.GROUPS.index(t.GROUP) for t in T.ALL] == sorted(T.GROUPS.index(t.GROUP) for t in T.ALL)
    text = Path(T.__file__).read_text()
    body = text[text.index("ALL:"):]
    body = body[: body.index("\n)\n")]
    by_name = {m.__name__.rsplit(".", 1)[1]: m for m in T.ALL}
    group = None
    commented = {}
    for line in body.splitlines():
        marker = re.match(r"\s*# --- (\w+)", line)
        if marker:
            group = marker.group(1)
        elif line.strip().rstrip(",") in by_name:
            commented[by_name[line.strip().rstrip(",")].ID] = group
    assert commented == registry_groups()


def schedule_transforms() -> list:
    groups = registry_groups()
    return [t for t in T.ALL if groups.get(t.ID) in SCHEDULE_GROUPS]


def test_registry_groups_cover_every_transformation():
    groups = registry_groups()
    assert set(groups) == {t.ID for t in T.ALL}
    assert {"split", "reorder"} <= {t.ID for t in schedule_transforms()}


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_candidates_never_raise_and_are_portable(path):
    text = path.read_text()
    doc = load_leir(text)
    ctx = Context(doc.analysis)
    for t in T.ALL:
        try:
            found = t.candidates(ctx, None)
        except Exception as e:  # noqa: BLE001 - any exception is the bug this test is for
            pytest.fail(f"{t.ID}.candidates raised on {path.stem}: {type(e).__name__}: {e}")
        for c in found:
            assert c.step.id == t.ID
            assert json.loads(json.dumps(c.step.args)) == c.step.args, (t.ID, c.step.args)
            assert c.span is not None, (t.ID, c.step.args)
            assert 0 <= c.span.start <= c.span.end <= len(text), (t.ID, c.step.args, c.span)
            assert isinstance(c.title, str) and c.title, (t.ID, c.step.args)


def sampled(example: str, ctx: Context) -> list:
    """The steps the slow test tries on one example (see the module docstring)."""
    offered = [(t.ID, t.candidates(ctx, None)) for t in schedule_transforms()]
    if example in EXHAUSTIVE:
        return [c for _, found in offered for c in found]
    per_transform = [random.Random(f"{example}/{tid}").sample(found, min(SAMPLE_PER_TRANSFORM, len(found)))
                     for tid, found in offered]
    round_robin = [found[k] for k in range(SAMPLE_PER_TRANSFORM) for found in per_transform if k < len(found)]
    return round_robin[:SAMPLE_PER_EXAMPLE]


@pytest.mark.slow
@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_loop_and_memory_steps_apply_and_verify(path):
    before = load_leir(path.read_text()).analysis
    ctx = Context(before)
    failures = []
    tried = 0
    for c in sampled(path.stem, ctx):
        tried += 1
        step = json.dumps(c.step.to_json())
        try:
            after = T.apply(before, c.step, path.stem)
        except Exception as e:  # noqa: BLE001 - an offered step must apply
            failures.append(f"{step}: apply raised {type(e).__name__}: {e}")
            continue
        result = T.verify(before, analyze(after))
        if not result.ok:
            failures.append(f"{step}: verification failed: {result.summary()}")
    assert tried, f"no loop or memory step is offered on {path.stem}"
    assert not failures, f"{len(failures)} of {tried} steps on {path.stem} failed:\n" + "\n".join(failures)
