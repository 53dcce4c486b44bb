"""Reasoning the model generates (``leir_models.lm.reasoning``): greedy
decoding on the key/value cache stops at ``<|eos|>``, at the token limit or
at the context's end; what is returned checks against the step's facts,
and what does not is dropped and counted; tokens/s is reported; ``leir
suggest`` carries the checked reasoning of its first suggestions, as
predicted. The tiny fixture model writes junk: that is what gets dropped."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from leir.bridge.document import load_leir  # noqa: E402
from leir.explain import Machine, check, step_facts  # noqa: E402
from leir.tools.suggest import suggest  # noqa: E402
from leir.transforms import Step  # noqa: E402
from leir_models.lm import reasoning as lr  # noqa: E402
from leir_models.lm import tokenizer as tk  # noqa: E402
from leir_models.lm.data import load_records, state_of_analysis  # noqa: E402
from leir_models.lm.ranker import ModelRanker  # noqa: E402
from lm_fixtures import ROOT  # noqa: E402

MATMUL = (ROOT / "examples" / "matmul.leir").read_text()
PARALLEL = Step("parallelize", {"block": "C", "loop": "i"})
MACHINE = Machine(cores=8, vector_bytes=32, vector_isa="AVX2")


@pytest.fixture(scope="module")
def ranker(lm_model_dir) -> ModelRanker:
    r = ModelRanker.load(lm_model_dir)
    r.machine = MACHINE.to_json()
    return r


class Scripted:
    """A stand-in model that writes ``tokens`` one call at a time, then
    ``<|eos|>``, and records what each call was given."""

    def __init__(self, tokens, vocab: int, limit: int = 1024):
        self.config = SimpleNamespace(max_position_embeddings=limit)
        self.tokens, self.vocab, self.calls = list(tokens), vocab, []

    def __call__(self, input_ids, use_cache=False, cache=None, position_ids=None):
        k = len(self.calls)
        self.calls.append({"length": input_ids.shape[1], "cache": cache, "positions": position_ids})
        logits = torch.zeros(1, input_ids.shape[1], self.vocab)
        logits[0, -1, self.tokens[k] if k < len(self.tokens) else tk.EOS_ID] = 1.0
        return SimpleNamespace(logits=logits, cache=("cache", k))


def test_decoding_reads_the_prompt_once_then_one_token_at_a_time_on_the_cache():
    model = Scripted([7, 8, 9], vocab=16)
    ids, stopped, seconds, prompt_seconds = lr.decode_greedy(model, [1, 5, 6, 4], max_tokens=10)
    assert (ids, stopped) == ([7, 8, 9], "eos")
    assert [c["length"] for c in model.calls] == [4, 1, 1, 1]
    assert [c["cache"] for c in model.calls] == [None, ("cache", 0), ("cache", 1), ("cache", 2)]
    assert [int(c["positions"][0, 0]) for c in model.calls[1:]] == [4, 5, 6]
    assert seconds >= prompt_seconds >= 0


def test_decoding_stops_at_the_token_limit_and_at_the_context_end():
    ids, stopped, _, _ = lr.decode_greedy(Scripted([7] * 50, vocab=16), [1, 4], max_tokens=5)
    assert (len(ids), stopped) == (5, "max_tokens")
    ids, stopped, _, _ = lr.decode_greedy(Scripted([7] * 50, vocab=16, limit=6), [1, 2, 3, 4], max_tokens=50)
    assert (len(ids), stopped) == (2, "context")


def test_special_tokens_other_than_eos_are_never_written():
    ids, stopped, _, _ = lr.decode_greedy(Scripted([tk.REASON_ID, tk.STEP_ID], vocab=16), [1], max_tokens=2)
    assert not set(ids) & {tk.PAD_ID, tk.BOS_ID, tk.STEP_ID, tk.REASON_ID}


def test_what_does_not_check_is_dropped_and_counted(ranker):
    """A scripted generation of one true sentence and two false ones,
    through the real tokenizer and the grounding check."""
    analysis = load_leir(MATMUL).analysis
    facts = step_facts(analysis, None, PARALLEL, machine=MACHINE)
    true = facts.reference[0]
    text = f"Runs loop q in parallel. {true} Its 128 iterations run over 4 cores."
    tokens = tk.encode(ranker.tokenizer, text)
    model = Scripted(tokens, vocab=ranker.tokenizer.get_vocab_size())
    fields = state_of_analysis(analysis, "llvm", MACHINE.to_json())
    g = lr.generate(model, ranker.tokenizer, fields, PARALLEL.to_json(), facts)
    assert g.raw == text and g.stopped == "eos" and g.tokens == len(tokens)
    assert g.text == true
    assert (g.dropped, g.total) == (2, 3)
    assert [d.reason.split(":")[0] for d in g.grounding.dropped] == ["name", "claim"]
    assert g.tokens_per_s > 0


def test_the_tiny_model_s_reasoning_only_returns_what_checks(ranker):
    analysis = load_leir(MATMUL).analysis
    g = lr.explain(ranker.model, ranker.tokenizer, analysis, PARALLEL, "llvm", MACHINE.to_json(), max_tokens=48)
    assert g.tokens <= 48 and g.stopped in ("eos", "max_tokens")
    assert g.tokens_per_s > 0 and g.seconds > 0
    assert g.total == len(g.grounding.kept) + g.dropped
    facts = step_facts(analysis, None, PARALLEL, machine=MACHINE)
    again = check(g.grounding.kept, facts)
    assert not again.dropped and again.kept == g.grounding.kept
    if g.stopped == "max_tokens" and g.raw.strip():  # the cut-off last sentence never checks
        assert g.dropped >= 1


class Explaining:
    """A ranker that writes one sentence per step it is asked to explain."""

    name = "explaining"

    def __init__(self):
        self.asked = []

    def score(self, ctx, steps, target):
        return [(float(len(steps) - k), ()) for k in range(len(steps))]

    def explain(self, ctx, step, target):
        self.asked.append(step)
        return f"Reasoning for {step.id}."


def test_suggest_carries_checked_reasoning_for_its_first_suggestions_as_predicted(ranker):
    r = Explaining()
    found = suggest(MATMUL, "leir", None, ranker=r, limit=5, explain_top=2)
    assert [s.reasoning is not None for s in found] == [True, True, False, False, False]
    assert r.asked == [s.step for s in found[:2]]
    assert found[0].reasoning_status == "predicted"
    assert found[0].to_json()["generated_reasoning"] == {"text": found[0].reasoning, "status": "predicted"}
    assert "generated_reasoning" not in found[2].to_json()
    # The model: what it returns, when anything, checks against the step's facts.
    for s in suggest(MATMUL, "leir", None, ranker=ranker, limit=2, explain_top=2):
        if s.reasoning is not None:
            facts = step_facts(load_leir(MATMUL).analysis, None, s.step, machine=MACHINE)
            assert not check(s.reasoning, facts).dropped


def test_leir_suggest_prints_the_reasoning_as_predicted(tmp_path, monkeypatch, capsys):
    import json

    from leir.tools import cli

    program = tmp_path / "matmul.leir"
    program.write_text(MATMUL)
    monkeypatch.setattr(cli, "_load_ranker", lambda name, command: Explaining())
    assert cli.main(["suggest", str(program), "--top", "4", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    said = [r.get("generated_reasoning") for r in rows]
    assert said[:3] == [{"text": f"Reasoning for {r['id']}.", "status": "predicted"} for r in rows[:3]]
    assert said[3] is None
    assert cli.main(["suggest", str(program), "--top", "4"]) == 0
    out = capsys.readouterr().out
    assert out.count("explaining (predicted): Reasoning for ") == 3


def test_hover_shows_the_reasoning_as_predicted():
    from leir.explain.editor import step_text

    analysis = load_leir(MATMUL).analysis
    [first, second] = suggest(MATMUL, "leir", None, ranker=Explaining(), limit=2, explain_top=1)
    text = step_text(analysis, first, "leir", "llvm", None)
    assert f"reasoning (predicted; only its sentences that state this step's computed facts are kept):* " \
           f"Reasoning for {first.step.id}." in text
    assert "local model's reasoning" not in step_text(analysis, second, "leir", "llvm", None)


def test_the_evaluation_figure(ranker, lm_model_dir, lm_data, capsys):
    records, _ = load_records(lm_data)
    figures = lr.evaluate(ranker.model, ranker.tokenizer, records, "all", max_tokens=24).to_json()
    assert figures["states"] >= 3
    assert figures["tokens"] <= 24 * figures["states"] and figures["tokens_per_s"] > 0
    assert figures["checked"] + sum(figures["dropped_by"].values()) == figures["sentences"]
    assert sum(figures["stopped"].values()) == figures["states"]
    for example in figures["examples"]:
        assert example["total"] == len(example["grounding"]["kept"]) + example["dropped"]
    assert lr.main(["evaluate", "--model", str(lm_model_dir), "--data", str(lm_data), "--split", "heldout",
                    "--max-tokens", "8"]) == 0
    out = capsys.readouterr().out
    assert "tokens/s" in out and "share" in out

