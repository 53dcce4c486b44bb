"""What one decoded token's pass costs on ONNX Runtime, against the length
of its past (``leir_models.sol.ort_step``), and what the SOL policy's choice
costs on torch and on ONNX Runtime.

For each past length P of ``--pasts``: a prompt of P tokens is read
(dense, torch), then the token at position P is run ``--repeats`` times
through ``OrtPasses.step`` (the position put back to P before each run, so
every run sees the same past), median of 5 batches, at each keep level and
precision. With ``--against COMMIT`` the ``ort_step`` module of that commit
(read from git history into a temporary file) is timed the same way in the
same process, turn about with the current one; its graphs go to their own
cache directory (another ``CACHE_FORMAT``).

Then one policy step of the decode loop (``decode.Chooser``: features,
forward, sampling) with the forward on torch and on ``ort_step.OrtPolicy``.

    python bench/sol_step.py --model models/leir_models/lm/data --policy models/leir_models/lm/data/sol
                             [--pasts 128,384,768] [--precisions fp32,int8] [--keeps 1,0.5]
                             [--against 0360a9e] [--repeats 200] [--threads 1] [--cache-dir DIR]

Prints one JSON object: per (version, precision, keep, past) the median
milliseconds of one pass, with the load average read before each.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]


def old_module(commit: str, directory: Path):
    """``ort_step`` as it was at ``commit``, imported from a temporary file."""
    source = subprocess.run(["git", "show", f"{commit}:models/leir_models/sol/ort_step.py"], cwd=ROOT, check=True,
                            capture_output=True, text=True).stdout
    path = directory / f"ort_step_{commit}.py"
    path.write_text(source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(f"ort_step_{commit}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def time_step(passes, past: int, token: int, keep: float, repeats: int) -> float:
    """Median ms of one ``passes.step`` at position ``past`` (5 batches)."""
    batches = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(repeats):
            passes.length = past
            passes.step(token, keep)
        batches.append((time.perf_counter() - start) / repeats * 1e3)
    return statistics.median(batches)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--policy", required=True)
    parser.add_argument("--pasts", default="128,384,768")
    parser.add_argument("--precisions", default="fp32,int8")
    parser.add_argument("--keeps", default="1,0.5")
    parser.add_argument("--against", help="a commit whose ort_step is timed beside the current one")
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--cache-dir", help="where the graphs are exported (default: a temporary directory)")
    args = parser.parse_args(argv)

    from leir_models.lm.store import load_model
    from leir_models.sol import decode, ort_runtime, ort_step
    from leir_models.sol.ort_runtime import loadavg
    from leir_models.sol.policy import load_policy

    torch.set_num_threads(args.threads)
    pasts = [int(p) for p in args.pasts.split(",")]
    precisions = args.precisions.split(",")
    keeps = [float(k) for k in args.keeps.split(",")]
    policy, orders = load_policy(args.policy)
    model, _ = load_model(args.model)
    decode.prepare(model, orders)
    limit = model.config.max_position_embeddings
    if max(pasts) >= limit:
        parser.error(f"--pasts must stay below the model's context ({limit})")
    rows, out = [], {"threads": args.threads, "repeats": args.repeats}
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(args.cache_dir or tmp)
        versions = {"current": ort_step}
        if args.against:
            versions[args.against] = old_module(args.against, Path(tmp))
        gen = torch.Generator().manual_seed(0)
        prompt = torch.randint(3, model.config.vocab_size, (max(pasts) + 1,), generator=gen).tolist()
        for precision in precisions:
            loaded = {name: module.load(model, precision, cache, threads=args.threads)
                      for name, module in versions.items()}
            for past in pasts:
                runners = {}
                for name, module in versions.items():
                    runners[name] = module.OrtPasses(model, loaded[name])
                    runners[name].prefill(prompt[:past])
                for keep in keeps:
                    for name, passes in runners.items():  # turn about
                        load = loadavg()
                        ms = time_step(passes, past, prompt[past], keep, args.repeats)
                        rows.append({"version": name, "precision": precision, "keep": keep, "past": past,
                                     "ms": round(ms, 3), "loadavg": load})
                        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
        out["steps"] = rows
        ort_policy = ort_step.OrtPolicy(policy, cache, threads=args.threads)
        out["policy_ms"] = {"torch": round(ort_runtime.policy_step_ms(policy, model), 4),
                            "onnx": round(ort_runtime.policy_step_ms(policy, model, ort_policy), 4),
                            "loadavg": loadavg()}
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
