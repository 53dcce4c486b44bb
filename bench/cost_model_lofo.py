"""How well the cost model ranks programs of a kind of kernel it never saw,
and whether the suite's own measurements help: leave one kind out.

The rows are every measured program the project has: the realistic suite's
(``bench/data/costs.jsonl``: each workload's naive program, sampled plans'
end states and prefixes, single steps), the committed dataset's samples
(``models/data/dataset-20261204``, the bundled examples' families at small
sizes, before and after each step) and the cost model's test data
(``tests/data/costs/measured.jsonl``, ``tests/data/dataset/samples.jsonl``).
A *kind* is the operation regardless of size (the suite's 512^3 matmul, its
1024x1024x512 one, the examples' small matmuls and batched matmuls are one
kind), so a held-out kind has no cousin left in training.

For each kind in the suite, three models are scored on that kind's suite
rows (latencies of one workload compared among themselves: Kendall's tau,
top-1 and top-3 recall of the measured fastest):

- ``shipped``: the model in ``leir_models/data`` (trained on the small
  examples only; it may have seen the kind at small sizes);
- ``small``: trained here on the small rows alone with the kind left out
  (what the shipped model would be, judged fairly);
- ``all``: trained on the small rows and the other kinds' suite rows, the
  kind left out everywhere.

    python bench/cost_model_lofo.py [--rounds 300] [--seed 0] [--json OUT.json]

Features are computed once per program (the analysis, nothing built);
training is XGBoost's, one thread.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "models"))

SUITE = REPO / "bench" / "data" / "costs.jsonl"
SMALL = [REPO / "tests" / "data" / "costs" / "measured.jsonl", REPO / "tests" / "data" / "dataset" / "samples.jsonl"]
DATASET = REPO / "models" / "data" / "dataset-20261204" / "data"

#: A kind of kernel: the first prefix of a workload's name that matches.
KINDS = (
    ("matmul", ("matmul", "batched_matmul")),
    ("dense", ("dense", "gemm")),
    ("conv2d", ("conv2d", "conv_bn_relu", "conv2d_resnet")),
    ("depthwise", ("depthwise",)),
    ("attention", ("attention", "mha_attention", "gqa_attention")),
    ("softmax", ("softmax", "log_softmax")),
    ("layernorm", ("layernorm", "batchnorm")),
    ("reduction", ("column_sum", "sum_", "max_axis")),
)


def kind_of(workload: str) -> str:
    name = workload.removesuffix(".leir")
    for kind, prefixes in KINDS:
        if any(name.startswith(p) for p in prefixes):
            return kind
    return name


def dataset_jsonl(out: Path) -> Path:
    """The committed dataset's parquet splits as the samples JSON lines the
    cost model reads (``reasoning_facts`` decoded where it is a string)."""
    import pyarrow.parquet as pq

    with out.open("w", encoding="utf-8") as f:
        for split in sorted(DATASET.glob("*.parquet")):
            for r in pq.read_table(split).to_pylist():
                facts = r.get("reasoning_facts")
                if isinstance(facts, str):
                    try:
                        r["reasoning_facts"] = json.loads(facts)
                    except json.JSONDecodeError:
                        r["reasoning_facts"] = None
                f.write(json.dumps(r, default=str) + "\n")
    return out


def scores(predicted, rows) -> dict[str, float]:
    """Kendall's tau within each workload (weighted by pairs), top-1/3 recall."""
    from leir_models.cost_model import kendall_tau, top_k_recall

    by: dict[str, list[int]] = {}
    for n, r in enumerate(rows):
        by.setdefault(r.workload, []).append(n)
    tau_sum = pairs = 0.0
    recalls = {1: [], 3: []}
    for idx in by.values():
        if len(idx) < 2:
            continue
        p = [predicted[n] for n in idx]
        m = [rows[n].ms for n in idx]
        tau, npairs = kendall_tau(p, m)
        tau_sum += tau * npairs
        pairs += npairs
        for k in recalls:
            recalls[k].append(top_k_recall(p, m, k))
    mean = lambda v: sum(v) / len(v) if v else float("nan")  # noqa: E731
    return {"kendall_tau": tau_sum / pairs if pairs else float("nan"), "top1": mean(recalls[1]),
            "top3": mean(recalls[3]), "programs": len(rows), "workloads": len(by)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-dataset", action="store_true", help="leave the committed dataset out (quicker)")
    parser.add_argument("--json", metavar="OUT")
    args = parser.parse_args(argv)

    import numpy as np
    import xgboost as xgb

    from leir_models.cost_model import ROUNDS, XGBoostCostModel, _dmatrix, _params, _rows_matrix, load_default, read_rows

    t0 = time.perf_counter()
    small_paths = list(SMALL)
    with tempfile.TemporaryDirectory() as tmp:
        if not args.no_dataset:
            small_paths.append(dataset_jsonl(Path(tmp) / "dataset.jsonl"))
        suite_rows = read_rows([SUITE])
        small_rows = read_rows(small_paths)
    x_suite, x_small = _rows_matrix(suite_rows), _rows_matrix(small_rows)
    print(f"rows: suite {len(suite_rows)}, small {len(small_rows)}; features in {time.perf_counter() - t0:.0f} s; "
          f"load {os.getloadavg()[0]:.1f}", flush=True)

    def fit(x, rows):
        y = np.log(np.maximum([r.ms for r in rows], 1e-6))
        dtrain = _dmatrix(x, y, None, "regression")
        return XGBoostCostModel(xgb.train(_params("regression", args.seed), dtrain,
                                          num_boost_round=args.rounds or ROUNDS))

    shipped = load_default()
    suite_kinds = [kind_of(r.workload) for r in suite_rows]
    small_kinds = [kind_of(r.workload) for r in small_rows]
    results = {}
    print("| kind | programs (workloads) | shipped tau / top-1 / top-3 | small, kind out | small + suite, kind out |")
    print("|---|---|---|---|---|")
    for kind in sorted(set(suite_kinds)):
        test = [n for n, k in enumerate(suite_kinds) if k == kind]
        rows = [suite_rows[n] for n in test]
        small_keep = [n for n, k in enumerate(small_kinds) if k != kind]
        suite_keep = [n for n, k in enumerate(suite_kinds) if k != kind]
        m_small = fit(x_small[small_keep], [small_rows[n] for n in small_keep])
        m_all = fit(np.concatenate([x_small[small_keep], x_suite[suite_keep]]),
                    [small_rows[n] for n in small_keep] + [suite_rows[n] for n in suite_keep])
        x_test = x_suite[test]
        row = {name: scores(list(model._to_ms(model._raw(x_test))), rows)
               for name, model in (("shipped", shipped), ("small", m_small), ("all", m_all))}
        results[kind] = row
        cell = lambda s: f"{s['kendall_tau']:.2f} / {s['top1']:.2f} / {s['top3']:.2f}"  # noqa: E731
        print(f"| {kind} | {row['all']['programs']} ({row['all']['workloads']}) | {cell(row['shipped'])} | "
              f"{cell(row['small'])} | {cell(row['all'])} |", flush=True)
    mean = {name: {m: sum(r[name][m] for r in results.values()) / len(results)
                   for m in ("kendall_tau", "top1", "top3")} for name in ("shipped", "small", "all")}
    print("mean over kinds: " + "; ".join(
        f"{name} tau {v['kendall_tau']:.2f} top-1 {v['top1']:.2f} top-3 {v['top3']:.2f}" for name, v in mean.items()))
    print(f"{time.perf_counter() - t0:.0f} s in all; load {os.getloadavg()[0]:.1f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"kinds": results, "mean": mean, "rounds": args.rounds,
                                               "seed": args.seed, "dataset": not args.no_dataset}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
