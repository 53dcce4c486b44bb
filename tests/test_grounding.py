"""leir.explain.grounding: the explain module's own reasoning checks in
full, on several examples and on the committed dataset sample; a sentence
with a changed number, a name not in the program, a contradicted claim or
a word the facts cannot stand behind is dropped, with the reason."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from leir import transforms
from leir.bridge.document import load_leir
from leir.explain import Machine, check, sentences, step_facts
from leir.printer import print_program
from leir.transforms import Step
from leir.transforms.base import Context

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
SAMPLES = ROOT / "tests" / "data" / "dataset" / "samples.jsonl"

#: Round, made-up figures: nothing depends on this computer's caches.
MACHINE = Machine(l1d=32 * 1024, l2=1024 * 1024, l3=32 * 1024 * 1024, vector_bytes=32, vector_isa="AVX2", cores=8)


def analysis(path: Path):
    doc = load_leir(path.read_text())
    assert doc.ok
    return doc.analysis


def facts(name: str, step: Step, **kw):
    return step_facts(analysis(EXAMPLES / name), None, step, machine=MACHINE, **kw)


@pytest.mark.parametrize("name", ["matmul.leir", "conv2d_cpu.leir", "softmax.leir", "layernorm_gpu.leir",
                                  "gqa_attention.leir", "batchnorm.leir"])
def test_the_explain_modules_reasoning_checks_in_full(name):
    before = analysis(EXAMPLES / name)
    target = "cuda" if "gpu" in name else "llvm"
    per_id: Counter = Counter()
    total = 0
    for c in transforms.candidates(Context.of(before), None):
        if per_id[c.step.id] >= 3:
            continue
        per_id[c.step.id] += 1
        try:
            after = load_leir(print_program(transforms.apply(before.program, c.step)))
        except transforms.TransformError:
            continue
        if not after.ok:
            continue
        for measured in (None, (0.0155, 0.00622), (1.0, 1.3)):
            f = step_facts(before, after.analysis, c.step, measured=measured, target=target, machine=MACHINE)
            result = check(list(f.reference), f)
            assert not result.dropped, (c.step, result.dropped)
            assert result.kept == list(f.reference)
            total += result.total
    assert len(per_id) >= 8 and total > 50


def test_the_dataset_samples_reasoning_checks_in_full():
    """The builder's reasoning of every committed sample, on the machine it
    was written for, with the latencies it states."""
    total = 0
    for line in SAMPLES.read_text().splitlines()[:240]:
        r = json.loads(line)
        if not r.get("verified") or r.get("latency_after_ms") is None:
            continue
        before, after = load_leir(r["before"]), load_leir(r["after"])
        f = step_facts(before.analysis, after.analysis, r["step"], target=r["target"],
                       measured=(r["latency_before_ms"], r["latency_after_ms"]),
                       machine=r["reasoning_facts"]["machine"])
        result = check(r["reasoning"], f)
        assert not result.dropped, result.dropped
        total += result.total
    assert total > 300


PARALLEL = Step("parallelize", {"block": "C", "loop": "i"})
TILE = Step("tile", {"block": "C", "loops": ["i", "j"], "sizes": [8, 8]})


def test_reference_sentences_used_below_are_what_explain_says():
    assert facts("matmul.leir", PARALLEL).reference[0] == (
        "Runs loop i in parallel: its 128 iterations over 8 cores (16 per core at most), each iteration doing "
        "24.6K inner iterations (j, k).")
    assert "which fits in the 32 KiB L1d." in facts("matmul.leir", TILE).reference[1]


@pytest.mark.parametrize("sentence, reason", [
    ("Runs loop i in parallel: its 129 iterations over 8 cores (16 per core at most).", "number: 129 "),
    ("Runs loop i in parallel: its 128 iterations, each doing 24.9K inner iterations.", "number: 24.9K "),
    ("Runs loop i in parallel: its 128 iterations over 8 cores (17 per core at most).", "number: 17 "),
    ("Runs loop q in parallel: its 128 iterations over 8 cores.", "name: loop q "),
    ("Loop i_7 runs 128 times.", "name: loop i_7 "),
    ("It touches i_7 once.", "name: i_7 "),
    ("Runs loop i in parallel, as D does.", "name: D "),
    ("Runs loop j in parallel: its 96 iterations.", "claim: loop j is said to be in parallel"),
    ("Its 128 iterations run over 4 cores.", "claim: 4 cores, the facts give 8"),
    ("Runs loop i in parallel: 128 = 8 x 15 + 7.", "arithmetic: 8 x 15 + 7 is not 128"),
    ("Latency measured on llvm: 2 ms → 1 ms, 2.00x faster.", "number: 2 ms "),
    ("Runs loop i in parallel: its 128 iterations over 8 cores", "incomplete"),
    ("Runs loop i in parallel, crocrocro.", "word: crocrocro "),
    ("i is a reduction axis of C.", "claim: i is said to be a reduction axis"),
])
def test_a_sentence_that_does_not_check_is_dropped_with_the_reason(sentence, reason):
    f = facts("matmul.leir", PARALLEL)
    result = check([f.reference[0], sentence], f)
    assert result.kept == [f.reference[0]]
    assert [d.sentence for d in result.dropped] == [sentence]
    assert result.dropped[0].reason.startswith(reason), result.dropped[0].reason
    assert (result.total, result.share) == (2, 0.5)


@pytest.mark.parametrize("sentence, reason", [
    ("One tile touches C 512 B, X 8 KiB, W 16 KiB: 24.5 KiB, which fits in the 1 MiB L2.",
     "claim: 24.5 KiB is said to fit in L2, a smaller level holds it"),
    ("One tile touches 97.4 KiB, which fits in the 32 KiB L1d.", "claim: 97.4 KiB is said to fit in L1d"),
    ("One tile touches 24.5 KiB, which fits in the 64 KiB L1d.", "number: 64 KiB "),
    ("W is reused across loop i_1 after 17.1 KiB, which exceeds every cache level.",
     "claim: 17.1 KiB is said to exceed every cache level"),
    ("W is reused across loop i_9 after 17.1 KiB of cache lines in between.", "name: loop i_9 "),
    ("C_{i,q} is written once per tile.", "name: loop q (in C_{i,q})"),
    ("C_{k,i} is written once per tile.", "name: C_{k,i} is not an access"),
    ("Tiles loops i, j of C by 8x9.", "number: 9 in 8x9 "),
])
def test_cache_and_name_claims_of_a_tile(sentence, reason):
    f = facts("matmul.leir", TILE)
    result = check(sentence, f)
    assert len(result.dropped) == 1 and not result.kept
    assert result.dropped[0].reason.startswith(reason), result.dropped[0].reason


#: A transpose with a short inner loop: vectorizing it reads X with stride 64.
TRANSPOSE = "L^{64}_{i}\n  L^{8}_{j} [\n    Y_{i,j} = X_{j,i};\n  ];\n"


def test_contiguity_and_lanes_against_the_strides_the_facts_list():
    doc = load_leir(TRANSPOSE)
    f = step_facts(doc.analysis, None, Step("vectorize", {"block": "Y", "loop": "j"}), machine=MACHINE)
    assert f.reference[1:] == ("Along j, Y_{i,j} is contiguous.",
                               "X_{j,i} (stride 64) is not contiguous along j: the lanes read elements that far apart.")
    assert check(list(f.reference), f).share == 1.0
    for sentence, reason in [
        ("Along j, X_{j,i} is contiguous.", "claim: X_{j,i} is said to be contiguous, the facts give stride 64"),
        ("Y_{i,j} is not contiguous along j.", "claim: Y_{i,j} is said to be not contiguous, the facts give stride 1"),
        ("X_{j,i} (stride 32) is not contiguous along j.", "claim: X_{j,i} has stride 32, the facts give 64"),
        ("Vectorizes loop j of Y: 16 lanes of f32.", "number: 16 "),
        ("Vectorizes loop j of Y: 64 lanes of f32.", "claim: 64 lanes, the facts give 8"),
        ("Vectorizes loop i of Y: 8 lanes of f32.", "claim: loop i is said to be vectorized"),
    ]:
        result = check(sentence, f)
        assert result.dropped and result.dropped[0].reason.startswith(reason), (sentence, result.dropped)


def test_no_machine_no_cache_claims():
    f = step_facts(analysis(EXAMPLES / "matmul.leir"), None, TILE, target="cuda")
    assert f.machine is None
    result = check("One tile touches 24.5 KiB, which fits in the L1d.", f)
    assert result.dropped[0].reason == "claim: a cache level is named, the facts have no machine"


def test_sentences_are_cut_robustly():
    text = ("W is 1.5 MiB. Along threadIdx.x, A is contiguous! Is it? (The analysis could not explain this step: "
            "KeyError.) Then\nnext<|eos|>")
    assert sentences(text) == ["W is 1.5 MiB.", "Along threadIdx.x, A is contiguous!", "Is it?",
                               "(The analysis could not explain this step: KeyError.)", "Then", "next"]
    assert check("", facts("matmul.leir", PARALLEL)).share is None
