"""``leir model generate`` (leir_models.sol.generate) on the tiny trained model
(``lm_model_dir``) with an untrained policy saved beside it: the step is the
model-ranked suggestion's first (legal by construction), the reasoning is
decoded by the SOL loop and only what checks is kept, ``--json`` has the
issue's keys, the ONNX runtime reports its providers, and every user mistake
is one line on stderr with exit code 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from leir.bridge.document import load_leir  # noqa: E402
from leir.explain.grounding import step_facts  # noqa: E402
from leir.explain.machine import Machine  # noqa: E402
from leir.tools.suggest import suggest  # noqa: E402
from leir_models.lm.cli import main as cli_main  # noqa: E402
from leir_models.lm.ranker import ModelRanker  # noqa: E402
from leir_models.lm.store import load_model  # noqa: E402
from leir_models.sol import generate as sg  # noqa: E402
from leir_models.sol import knobs  # noqa: E402
from leir_models.sol.policy import PolicyConfig, SolPolicy  # noqa: E402

torch.set_num_threads(1)

ROOT = Path(__file__).resolve().parent.parent
MATMUL = ROOT / "examples" / "matmul.leir"
KEYS = {"id", "args", "reasoning", "tokens_per_s", "flops_per_token", "net_keep", "runtime", "providers"}


@pytest.fixture(scope="module")
def policy_dir(lm_model_dir, tmp_path_factory):
    model, _ = load_model(lm_model_dir)
    generator = torch.Generator().manual_seed(0)
    orders = knobs.reorder_channels(model, [torch.rand(m.down_proj.in_features, generator=generator)
                                            for m in knobs.mlp_layers(model)])
    torch.manual_seed(0)
    out = tmp_path_factory.mktemp("sol-policy")
    SolPolicy(PolicyConfig(hidden_size=model.config.hidden_size)).save(out, orders)
    return out


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("sol-generate-cache")


def generate_json(capsys, *args):
    capsys.readouterr()
    assert cli_main(["generate", *map(str, args), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def top_suggestion(model_dir, at=None):
    text = MATMUL.read_text()
    doc = load_leir(text)
    return suggest(text, "leir", at, document=doc, ranker=ModelRanker.load(model_dir), explain_top=0)[0]


def test_json_is_the_rankers_first_step_and_the_sol_decoding(lm_model_dir, policy_dir, capsys):
    out = generate_json(capsys, MATMUL, "--model", lm_model_dir, "--policy", policy_dir, "--budget", 0.5,
                        "--max-tokens", 12)
    assert KEYS <= set(out)
    top = top_suggestion(lm_model_dir)
    assert (out["id"], out["args"]) == (top.step.id, top.step.args)
    assert out["runtime"] == "torch" and out["providers"] == ["torch (cpu)"] and out["budget"] == 0.5
    assert 1 <= out["tokens"] <= 12 and out["tokens_per_s"] > 0 and out["flops_per_token"] > 0
    assert 0.5 <= out["net_keep"] < 1.0  # an untrained policy at 0.5: its budget bias alone
    assert isinstance(out["reasoning"], str) and out["total"] >= out["dropped"] >= 0


def test_at_a_position_proposes_a_step_there(lm_model_dir, capsys):
    doc = load_leir(MATMUL.read_text())
    at = "3:3"  # the j loop
    offset = sg.position(doc, at)
    out = generate_json(capsys, MATMUL, "--at", at, "--model", lm_model_dir, "--dense", "--max-tokens", 4)
    top = top_suggestion(lm_model_dir, offset)
    assert (out["id"], out["args"]) == (top.step.id, top.step.args)


def test_dense_needs_no_policy_and_keeps_everything(lm_model_dir, capsys):
    assert not (Path(lm_model_dir) / sg.POLICY_SUBDIR).exists()
    out = generate_json(capsys, MATMUL, "--model", lm_model_dir, "--dense", "--max-tokens", 8)
    assert out["net_keep"] == 1.0 and out["budget"] is None


def test_onnx_fp32_decodes_what_torch_decodes_and_reports_its_providers(lm_model_dir, policy_dir, cache):
    kw = {"model_dir": lm_model_dir, "policy_dir": policy_dir, "max_tokens": 16, "cache_dir": cache}
    dense_torch = sg.propose(MATMUL, budget=None, **kw)
    dense_onnx = sg.propose(MATMUL, budget=None, runtime="onnx", **kw)
    assert dense_onnx.raw == dense_torch.raw and dense_onnx.tokens == dense_torch.tokens
    assert dense_onnx.runtime == "onnx" and "CPUExecutionProvider" in dense_onnx.providers
    sol_torch = sg.propose(MATMUL, budget=0.7, **kw)
    sol_onnx = sg.propose(MATMUL, budget=0.7, runtime="onnx", **kw)
    assert sol_onnx.net_keep == sol_torch.net_keep < 1.0  # the same seeded actions
    int8 = sg.propose(MATMUL, budget=0.7, runtime="onnx", precision="int8", **kw)
    assert int8.precision == "int8" and int8.tokens >= 1 and int8.providers == dense_onnx.providers


def test_only_what_checks_is_kept(lm_model_dir, monkeypatch):
    """The decoded text replaced by one true sentence and one false one,
    through the real grounding check."""
    from leir_models.lm import tokenizer as tk

    top = top_suggestion(lm_model_dir)
    analysis = load_leir(MATMUL.read_text()).analysis
    true = step_facts(analysis, None, top.step, target="llvm", machine=Machine.detect().to_json()).reference[0]
    monkeypatch.setattr(tk, "decode", lambda _tok, _ids: f"{true} It makes the loop 17 times slower.")
    p = sg.propose(MATMUL, model_dir=lm_model_dir, budget=None, max_tokens=4)
    assert p.reasoning == true and (p.dropped, p.total) == (1, 2)


def test_text_report(lm_model_dir, policy_dir, capsys):
    assert cli_main(["generate", str(MATMUL), "--model", str(lm_model_dir), "--policy", str(policy_dir),
                     "--max-tokens", "6"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("step: ") and "tokens/s" in text and "MFLOPs/token" in text
    assert "SOL at budget 0.7" in text and "net keep" in text and "runtime: torch on torch (cpu)" in text


def bad_leir(tmp_path):
    path = tmp_path / "bad.leir"
    path.write_text("L^{4}_{i} [\n  C_{i} = X_{q};\n];\n")
    return path


@pytest.mark.parametrize("case, expect", [
    ("no-model", "no such model directory"),
    ("no-policy", "no such policy directory"),
    ("no-file", "no such file"),
    ("not-leir", "not a .leir file"),
    ("errors", "error:"),
    ("at-syntax", "expected LINE:COL"),
    ("at-range", "--at 99:1: the file has"),
    ("int8-torch", "needs --runtime onnx"),
    ("budget", "expected a net keep"),
])
def test_mistakes_are_one_line_and_exit_2(case, expect, lm_model_dir, policy_dir, tmp_path, capsys):
    model = ["--model", str(lm_model_dir)]
    args = {
        "no-model": [str(MATMUL), "--model", str(tmp_path / "none"), "--dense"],
        "no-policy": [str(MATMUL), *model, "--policy", str(tmp_path / "none")],
        "no-file": [str(tmp_path / "none.leir"), *model, "--dense"],
        "not-leir": [str(ROOT / "examples" / "references.py"), *model, "--dense"],
        "errors": [str(bad_leir(tmp_path)), *model, "--dense"],
        "at-syntax": [str(MATMUL), "--at", "three", *model, "--dense"],
        "at-range": [str(MATMUL), "--at", "99:1", *model, "--dense"],
        "int8-torch": [str(MATMUL), *model, "--dense", "--precision", "int8"],
        "budget": [str(MATMUL), *model, "--policy", str(policy_dir), "--budget", "1.5"],
    }[case]
    capsys.readouterr()
    assert cli_main(["generate", *args]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("leir model generate: ") and expect in lines[0], captured.err
    assert "Traceback" not in captured.err and captured.out == ""
