"""A learned cost model: XGBoost over ``leir.tools.costs.program_features``.

``XGBoostCostModel`` implements ``leir.tools.costs.CostModel``: it predicts
a program's latency from the features the analysis gives (nothing is
built), and ``update`` continues training the booster from a search's own
measurements, a few rounds at a time, as MetaSchedule does with its XGBoost
model. The learned quantity is log(ms):

- ``objective="regression"``: ``reg:squarederror`` on log(ms); predictions
  are latencies in ms;
- ``objective="rank"``: ``rank:pairwise`` within groups of programs of the
  same workload (the same computation at the same sizes), labels -log(ms);
  its scores order programs of one workload but say nothing about their
  scale, so a line fitted after training maps a score to log(ms) over all
  the training rows (``calibration`` in the sidecar; decreasing, so the
  order is kept), and ``update`` refits its offset to the search's own
  measurements: until then a ranking model's figures are rough, its order
  is what it is for.

Which ranks better on held-out workload families is measured by ``train
--objective auto`` (folds of the training families; ranking is kept only
when it beats regression by ``RANK_MARGIN``) and by ``evaluate``. On the
committed dataset sample and tests/data/costs/measured.jsonl (705
programs, 23 families), leaving each family out in turn: mean Kendall tau
0.29 for regression, 0.28 for ranking (top-1 recall 0.18 and 0.22); the
regression's latencies are within 2x for 59% of held-out programs, the
calibrated ranking's for 22%.

Files: the booster in XGBoost's own format (UBJSON ``.ubj``, or ``.json``;
never pickle) and a JSON sidecar beside it (``NAME.meta.json``) with the
feature names, the objective and the training facts (rows, workloads,
families held out, date, the command). ``load`` refuses a model whose
feature names are not ``FEATURE_NAMES`` (features added, removed or
reordered since it was trained). The shipped model is
``leir_models/data/cost_model.ubj``; ``load_default`` (the ``default``
entry point of ``leir.cost_models``) loads it.

Training data, JSON lines, either of:

- ``{"program": LEIR text, "target": "llvm", "ms": float, "workload": NAME}``
  (``bench/collect_costs.py`` writes these; optional ``"machine"``: a
  ``Machine.to_json()``, this CPU otherwise);
- the dataset builder's ``samples.jsonl`` (docs/dataset.md): each verified
  sample gives its program before and after the step with both latencies;
  the group is the workload's variant, the machine the one its reasoning
  facts name.

Commands::

    python -m leir_models.cost_model train --data FILE.jsonl [--data ...] --out PATH
        [--heldout fam1,fam2] [--objective regression|rank|auto] [--rounds N] [--seed S]
    python -m leir_models.cost_model evaluate --model PATH --data FILE.jsonl [--data ...] [--heldout ...]

``evaluate`` prints, per workload family not in training, Kendall's tau
between predicted and measured latency within each group (averaged, the
groups weighted by their pairs) and top-k recall (the share of the
measured-best k programs of a group among the model's k best).
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import math
import os
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from leir.explain.machine import Machine
from leir.semantics import Analysis
from leir.tools.costs import FEATURE_NAMES, program_features

if TYPE_CHECKING:
    import numpy as np

__all__ = ["DEFAULT_PATH", "CostModelError", "Row", "XGBoostCostModel", "evaluate", "load_default", "read_rows"]

logger = logging.getLogger(__name__)

#: The shipped model.
DEFAULT_PATH = Path(__file__).resolve().parent / "data" / "cost_model.ubj"
#: Version of the sidecar's layout.
FORMAT = 1
OBJECTIVES = ("regression", "rank")
#: Boosting rounds of a training, and of each ``update``.
ROUNDS = 300
UPDATE_ROUNDS = 20
#: Smallest latency learned from (log of 0 is no figure).
MIN_MS = 1e-6

PARAMS = {
    "max_depth": 6,
    "eta": 0.1,
    "subsample": 0.9,
    "colsample_bytree": 0.9,
    "min_child_weight": 1.0,
    "lambda": 1.0,
    "tree_method": "hist",
}


class CostModelError(ValueError):
    """A model file that cannot be used here (missing, other features, not
    XGBoost's format)."""


def sidecar_path(path: str | Path) -> Path:
    """``cost_model.ubj`` -> ``cost_model.meta.json``."""
    path = Path(path)
    return path.with_name(path.stem + ".meta.json")


@dataclass
class Row:
    """One measured program."""

    program: str
    analysis: Analysis
    target: str
    ms: float
    workload: str
    #: Programs comparable with each other: one workload at one set of sizes.
    group: str
    family: str
    machine: Machine | None = None


def family_of(workload: str) -> str:
    from leir.tools.dataset.export import family

    return family(workload)


def _analyze(text: str) -> Analysis | None:
    from leir.parser import parse
    from leir.semantics import analyze

    parsed = parse(text)
    if not parsed.ok:
        return None
    analysis = analyze(parsed.program)
    return analysis if analysis.ok else None


def _machine(d: dict | None) -> Machine | None:
    if not isinstance(d, dict):
        return None
    fields = {k: d[k] for k in ("l1d", "l2", "l3", "vector_bytes", "vector_isa", "cores", "line_bytes") if k in d}
    try:
        return Machine(**fields, assumed=tuple(d.get("assumed", ())))
    except TypeError:
        return None


def _records(path: Path) -> Iterable[dict]:
    with path.open(encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if line:
                try:
                    yield json.loads(line)
                except json.JSONDecodeError as e:
                    raise CostModelError(f"{path}:{n}: not JSON: {e}") from None


def read_rows(paths: Sequence[str | Path]) -> list[Row]:
    """The measured programs of ``paths`` (either format, see the module
    docstring), one row per distinct (group, target, program): a program
    measured more than once gets the geometric mean of its latencies."""
    found: dict[tuple[str, str, str], list] = {}
    for path in map(Path, paths):
        for r in _records(path):
            if "before" in r and "after" in r:  # a dataset sample
                if not r.get("verified"):
                    continue
                workload = str(r.get("workload", "?"))
                group = f"{workload}/{r.get('variant', 'orig')}"
                machine = (r.get("reasoning_facts") or {}).get("machine")
                pairs = [(r["before"], r.get("latency_before_ms")), (r["after"], r.get("latency_after_ms"))]
            elif "program" in r and "ms" in r:
                workload = str(r.get("workload", "?"))
                group = workload
                machine = r.get("machine")
                pairs = [(r["program"], r["ms"])]
            else:
                continue
            target = str(r.get("target", "llvm"))
            for text, ms in pairs:
                if not isinstance(ms, (int, float)) or not ms > 0 or not math.isfinite(ms):
                    continue
                key = (group, target, text)
                if key not in found:
                    found[key] = [workload, machine, []]
                found[key][2].append(float(ms))
    rows = []
    for (group, target, text), (workload, machine, times) in found.items():
        analysis = _analyze(text)
        if analysis is None:
            logger.debug("cost model data: a program of %s does not check; left out", group)
            continue
        ms = math.exp(sum(math.log(max(t, MIN_MS)) for t in times) / len(times))
        rows.append(Row(text, analysis, target, ms, workload, group, family_of(workload), _machine(machine)))
    return rows


def features(analyses: Sequence[Analysis], target: str, machines: Sequence[Machine | None] | None = None):
    """The feature matrix (float32, one row per analysis)."""
    import numpy as np

    here = Machine.detect()
    machines = machines or [None] * len(analyses)
    return np.array([program_features(a, m or here, target=target) for a, m in zip(analyses, machines)],
                    dtype=np.float32).reshape(len(analyses), len(FEATURE_NAMES))


def _rows_matrix(rows: Sequence[Row]):
    import numpy as np

    here = Machine.detect()
    return np.array([program_features(r.analysis, r.machine or here, target=r.target) for r in rows],
                    dtype=np.float32).reshape(len(rows), len(FEATURE_NAMES))


def _dmatrix(x, log_ms, groups: Sequence[str] | None, objective: str):
    """A DMatrix; for ranking, sorted by group (XGBoost wants each query's
    rows together) with labels -log(ms): higher is faster."""
    import numpy as np
    import xgboost as xgb

    if objective == "rank":
        keys = list(groups) if groups is not None else [""] * len(log_ms)
        ids = {g: n for n, g in enumerate(sorted(set(keys)))}
        qid = np.array([ids[g] for g in keys], dtype=np.int64)
        order = np.argsort(qid, kind="stable")
        return xgb.DMatrix(x[order], label=-np.asarray(log_ms)[order], qid=qid[order],
                           feature_names=list(FEATURE_NAMES))
    return xgb.DMatrix(x, label=np.asarray(log_ms), feature_names=list(FEATURE_NAMES))


def _threads() -> int:
    """XGBoost's threads: 1 unless ``LEIR_COST_MODEL_THREADS`` says more.
    The data are small (thousands of rows), and on a machine whose cores
    are busy OpenMP's threads wait for each other: 300 rounds on 700 rows
    took 53 s with 2 threads on this 2-core machine under load, 1.7 s
    with 1."""
    try:
        return max(1, int(os.environ.get("LEIR_COST_MODEL_THREADS", "1")))
    except ValueError:
        return 1


def _params(objective: str, seed: int) -> dict:
    params = dict(PARAMS, seed=seed, nthread=_threads())
    if objective == "rank":
        params.update(objective="rank:pairwise", eval_metric="ndcg")
    else:
        params.update(objective="reg:squarederror", eval_metric="rmse")
    return params


def _fit_line(score, log_ms) -> dict[str, float]:
    """log(ms) ~ scale * score + offset by least squares, the scale kept
    negative (a higher ranking score is a faster program)."""
    import numpy as np

    score = np.asarray(score, dtype=np.float64)
    log_ms = np.asarray(log_ms, dtype=np.float64)
    var = float(np.var(score))
    scale = float(np.cov(score, log_ms, bias=True)[0, 1] / var) if var > 0 else -1.0
    scale = min(scale, -1e-6)
    return {"scale": scale, "offset": float(np.mean(log_ms) - scale * np.mean(score))}


class XGBoostCostModel:
    """``leir.tools.costs.CostModel`` with an XGBoost booster (None: not
    trained yet; it then predicts 1 ms for everything until ``update``)."""

    def __init__(self, booster=None, meta: dict | None = None, objective: str = "regression", seed: int = 0,
                 name: str = "xgboost"):
        if objective not in OBJECTIVES:
            raise ValueError(f"objective is one of {', '.join(OBJECTIVES)}, not {objective!r}")
        self.booster = booster
        self.objective = objective
        self.seed = seed
        self.name = name
        self.meta = meta or {}
        #: What ``update`` has learned from so far (features, log ms, group).
        self._seen: list[tuple[Any, float, str]] = []

    # ---------------------------------------------------------------- training

    @classmethod
    def train(cls, rows: Sequence[Row], objective: str = "regression", rounds: int = ROUNDS, seed: int = 0,
              facts: dict | None = None) -> "XGBoostCostModel":
        """A model trained on ``rows`` from scratch."""
        import numpy as np
        import xgboost as xgb

        if not rows:
            raise CostModelError("no training rows")
        x = _rows_matrix(rows)
        y = np.log(np.maximum([r.ms for r in rows], MIN_MS))
        dtrain = _dmatrix(x, y, [f"{r.target}:{r.group}" for r in rows], objective)
        booster = xgb.train(_params(objective, seed), dtrain, num_boost_round=rounds)
        calibration = _fit_line(booster.inplace_predict(x), y) if objective == "rank" else None
        meta = {
            "format": FORMAT, "feature_names": list(FEATURE_NAMES), "objective": objective,
            "target_transform": "log_ms", "rounds": rounds, "seed": seed, "calibration": calibration,
            "training": {
                "rows": len(rows), "groups": len({r.group for r in rows}),
                "workloads": sorted({r.workload for r in rows}), "families": sorted({r.family for r in rows}),
                "targets": sorted({r.target for r in rows}),
                "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                "xgboost": xgb.__version__, **(facts or {}),
            },
        }
        return cls(booster, meta, objective, seed)

    # -------------------------------------------------------------- predicting

    def _raw(self, x) -> "np.ndarray":
        import numpy as np

        if self.booster is None:
            return np.zeros(len(x))
        return self.booster.inplace_predict(x)

    def _to_ms(self, raw) -> list[float]:
        import numpy as np

        raw = np.asarray(raw, dtype=np.float64)
        if self.objective == "rank":
            c = self.meta.get("calibration") or {"scale": -1.0, "offset": 0.0}
            raw = c["scale"] * raw + c["offset"]
        return [float(v) for v in np.exp(raw)]

    def predict(self, analyses: Sequence[Analysis], target: str) -> list[float]:
        """Predicted latency of each program in ms (for a ranking model,
        up to one factor per workload)."""
        if not analyses:
            return []
        return self._to_ms(self._raw(features(analyses, target)))

    def predict_rows(self, rows: Sequence[Row]) -> list[float]:
        """``predict`` for measured rows, each with its own target and machine."""
        if not rows:
            return []
        return self._to_ms(self._raw(_rows_matrix(rows)))

    # ---------------------------------------------------------------- updating

    def update(self, analyses: Sequence[Analysis], ms: Sequence[float], target: str,
               rounds: int = UPDATE_ROUNDS) -> None:
        """Continue training from the current booster, ``rounds`` rounds on
        what this model was given to learn from so far (``update``'s
        measurements, the latest included): a search's own measurements
        correct the pretrained model where its programs differ from the
        training data."""
        import numpy as np
        import xgboost as xgb

        if len(analyses) != len(ms):
            raise ValueError(f"{len(analyses)} programs but {len(ms)} latencies")
        keep = [(a, float(t)) for a, t in zip(analyses, ms) if t is not None and t > 0 and math.isfinite(t)]
        if not keep:
            return
        x = features([a for a, _ in keep], target)
        for row, (_, t) in zip(x, keep):
            self._seen.append((row, math.log(max(t, MIN_MS)), target))
        xs = np.stack([s[0] for s in self._seen])
        ys = np.array([s[1] for s in self._seen])
        dtrain = _dmatrix(xs, ys, [s[2] for s in self._seen], self.objective)
        self.booster = xgb.train(_params(self.objective, self.seed), dtrain, num_boost_round=rounds,
                                 xgb_model=self.booster)
        if self.objective == "rank":
            # The scale stays (the order it keeps is the model's); the
            # offset moves to this search's latencies.
            scale = (self.meta.get("calibration") or {}).get("scale", -1.0)
            offset = float(np.mean(ys - scale * self.booster.inplace_predict(xs)))
            self.meta["calibration"] = {"scale": scale, "offset": offset}

    # ------------------------------------------------------------------- files

    def save(self, path: str | Path) -> Path:
        """The booster in XGBoost's format (``.ubj`` UBJSON or ``.json``) and
        the sidecar ``NAME.meta.json``; returns the booster's path."""
        path = Path(path)
        if path.suffix not in (".ubj", ".json"):
            raise CostModelError(f"{path}: a cost model is saved as .ubj (UBJSON) or .json")
        if self.booster is None:
            raise CostModelError("an untrained model has nothing to save")
        path.parent.mkdir(parents=True, exist_ok=True)
        self.booster.save_model(str(path))
        meta = dict(self.meta, format=FORMAT, feature_names=list(FEATURE_NAMES), objective=self.objective,
                    seed=self.seed, updates=len(self._seen))
        sidecar_path(path).write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
        return path

    @classmethod
    def load(cls, path: str | Path, name: str | None = None) -> "XGBoostCostModel":
        """A saved model; ``CostModelError`` when it is missing, is not
        XGBoost's format, or was trained on other features than
        ``FEATURE_NAMES``."""
        import xgboost as xgb

        path = Path(path)
        meta_path = sidecar_path(path)
        if path.suffix not in (".ubj", ".json"):
            raise CostModelError(f"{path}: a cost model file is .ubj (UBJSON) or .json")
        if not path.is_file() or not meta_path.is_file():
            raise CostModelError(f"{path}: no model there (the booster and {meta_path.name} are both needed)")
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as e:
            raise CostModelError(f"{meta_path}: {e}") from None
        names = meta.get("feature_names")
        if names != list(FEATURE_NAMES):
            raise CostModelError(_mismatch(path, names))
        objective = meta.get("objective", "regression")
        if objective not in OBJECTIVES:
            raise CostModelError(f"{path}: unknown objective {objective!r}")
        booster = xgb.Booster()
        try:
            booster.load_model(str(path))
        except xgb.core.XGBoostError as e:
            raise CostModelError(f"{path}: not an XGBoost model: {str(e).splitlines()[0]}") from None
        if booster.feature_names is not None and list(booster.feature_names) != list(FEATURE_NAMES):
            raise CostModelError(_mismatch(path, booster.feature_names))
        booster.set_param({"nthread": _threads()})
        if booster.num_features() != len(FEATURE_NAMES):
            raise CostModelError(f"{path}: the booster has {booster.num_features()} features, "
                                 f"leir.tools.costs gives {len(FEATURE_NAMES)}")
        return cls(booster, meta, objective, int(meta.get("seed", 0)), name or f"xgboost:{path.name}")


def _mismatch(path: Path, names) -> str:
    if not isinstance(names, list):
        return f"{path}: the model does not name its features"
    ours = list(FEATURE_NAMES)
    missing = [n for n in ours if n not in names]
    extra = [n for n in names if n not in ours]
    what = []
    if missing:
        what.append(f"{len(missing)} features missing ({', '.join(missing[:3])}...)")
    if extra:
        what.append(f"{len(extra)} unknown ({', '.join(extra[:3])}...)")
    if not what:
        what.append("the same features in another order")
    return (f"{path}: trained on other features than leir.tools.costs.FEATURE_NAMES: {'; '.join(what)}; "
            "retrain it (python -m leir_models.cost_model train)")


def load_default() -> XGBoostCostModel:
    """The shipped model (the ``default`` entry point of ``leir.cost_models``)."""
    return XGBoostCostModel.load(DEFAULT_PATH, name="xgboost")


# --------------------------------------------------------------- evaluation


def kendall_tau(a: Sequence[float], b: Sequence[float]) -> tuple[float, int]:
    """Kendall's tau-b of two sequences and the number of pairs it counted
    (pairs tied in either are left out of the numerator)."""
    n = len(a)
    concordant = discordant = ties_a = ties_b = 0
    for i in range(n):
        for j in range(i + 1, n):
            da, db = a[i] - a[j], b[i] - b[j]
            if da == 0 and db == 0:
                continue
            if da == 0:
                ties_a += 1
            elif db == 0:
                ties_b += 1
            elif (da > 0) == (db > 0):
                concordant += 1
            else:
                discordant += 1
    pairs = concordant + discordant
    denom = math.sqrt((pairs + ties_a) * (pairs + ties_b))
    return ((concordant - discordant) / denom if denom else 0.0), pairs + ties_a + ties_b


def top_k_recall(predicted: Sequence[float], measured: Sequence[float], k: int) -> float:
    """The share of the ``k`` measured-fastest among the ``k`` predicted fastest."""
    k = min(k, len(measured))
    best = set(sorted(range(len(measured)), key=lambda i: measured[i])[:k])
    chosen = set(sorted(range(len(predicted)), key=lambda i: predicted[i])[:k])
    return len(best & chosen) / k if k else 0.0


def evaluate(model: XGBoostCostModel, rows: Sequence[Row], ks: Sequence[int] = (1, 3)) -> dict[str, dict]:
    """Per family of ``rows``: groups, programs, Kendall's tau (within
    groups, weighted by their pairs), top-k recall (groups of more than k
    programs, averaged) and the tau of a random order's expectation, 0."""
    predicted = model.predict_rows(rows)
    by_group: dict[tuple[str, str], list[int]] = defaultdict(list)
    for n, r in enumerate(rows):
        by_group[(r.family, f"{r.target}:{r.group}")].append(n)
    out: dict[str, dict] = {}
    for (fam, _), idx in sorted(by_group.items()):
        if len(idx) < 2:
            continue
        e = out.setdefault(fam, {"groups": 0, "programs": 0, "pairs": 0, "_tau": 0.0,
                                 **{f"_top{k}": [] for k in ks}})
        p = [predicted[i] for i in idx]
        m = [rows[i].ms for i in idx]
        tau, pairs = kendall_tau(p, m)
        e["groups"] += 1
        e["programs"] += len(idx)
        e["pairs"] += pairs
        e["_tau"] += tau * pairs
        for k in ks:
            if len(idx) > k:
                e[f"_top{k}"].append(top_k_recall(p, m, k))
    for e in out.values():
        e["kendall_tau"] = e.pop("_tau") / e["pairs"] if e["pairs"] else 0.0
        for k in ks:
            got = e.pop(f"_top{k}")
            e[f"top{k}_recall"] = sum(got) / len(got) if got else None
    return out


def summary(result: dict[str, dict]) -> dict[str, float]:
    """Means over families (each family counts once)."""
    if not result:
        return {}
    out = {"families": len(result), "kendall_tau": sum(e["kendall_tau"] for e in result.values()) / len(result)}
    for key in next(iter(result.values())):
        if key.startswith("top"):
            got = [e[key] for e in result.values() if e[key] is not None]
            out[key] = sum(got) / len(got) if got else None
    return out


def format_evaluation(result: dict[str, dict]) -> str:
    keys = [k for k in next(iter(result.values()), {}) if k.startswith("top")]
    lines = [f"{'family':<22} {'groups':>6} {'programs':>8} {'tau':>6} " + " ".join(f"{k:>12}" for k in keys)]
    for fam, e in result.items():
        tops = " ".join(f"{'-' if e[k] is None else format(e[k], '.2f'):>12}" for k in keys)
        lines.append(f"{fam:<22} {e['groups']:>6} {e['programs']:>8} {e['kendall_tau']:>6.3f} {tops}")
    s = summary(result)
    if s:
        tops = " ".join(f"{'-' if s[k] is None else format(s[k], '.2f'):>12}" for k in keys)
        lines.append(f"{'mean of families':<22} {'':>6} {'':>8} {s['kendall_tau']:>6.3f} {tops}")
    return "\n".join(lines)


def _split(rows: Sequence[Row], heldout: set[str]) -> tuple[list[Row], list[Row]]:
    train = [r for r in rows if r.family not in heldout]
    test = [r for r in rows if r.family in heldout]
    return train, test


#: How much better (mean Kendall tau) ranking must rank to be kept over
#: regression, whose predictions are latencies in ms and not only an order.
RANK_MARGIN = 0.02


def choose_objective(rows: Sequence[Row], rounds: int, seed: int, folds: int = 5) -> tuple[str, dict[str, float]]:
    """The objective whose models rank better (mean Kendall tau over the
    families) on families left out of training, by ``folds`` folds of the
    training families (never the held-out ones); ranking only when it beats
    regression by ``RANK_MARGIN``."""
    import random

    families = sorted({r.family for r in rows})
    random.Random(seed).shuffle(families)
    folds = max(2, min(folds, len(families)))
    scores: dict[str, float] = {}
    for objective in OBJECTIVES:
        taus = []
        for k in range(folds):
            out = set(families[k::folds])
            train, test = _split(rows, out)
            if not train or not test:
                continue
            result = evaluate(XGBoostCostModel.train(train, objective, rounds, seed), test)
            taus += [e["kendall_tau"] for e in result.values()]
        scores[objective] = sum(taus) / len(taus) if taus else float("-inf")
    best = "rank" if scores["rank"] > scores["regression"] + RANK_MARGIN else "regression"
    return best, scores


# -------------------------------------------------------------------- command


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m leir_models.cost_model",
                                     description="Train or evaluate the XGBoost cost model.")
    sub = parser.add_subparsers(dest="command", required=True)
    train_p = sub.add_parser("train", help="train on measured programs and save the model")
    train_p.add_argument("--data", action="append", required=True, help="JSON lines (repeatable)")
    train_p.add_argument("--out", required=True, help="the model file (.ubj or .json)")
    train_p.add_argument("--heldout", default="", help="families left out of training, comma-separated")
    train_p.add_argument("--objective", choices=OBJECTIVES + ("auto",), default="auto")
    train_p.add_argument("--rounds", type=int, default=ROUNDS)
    train_p.add_argument("--seed", type=int, default=0)
    eval_p = sub.add_parser("evaluate", help="ranking quality on the families a model was not trained on")
    eval_p.add_argument("--model", default=str(DEFAULT_PATH))
    eval_p.add_argument("--data", action="append", required=True)
    eval_p.add_argument("--heldout", default=None,
                        help="families to evaluate on (default: every family the model was not trained on)")
    eval_p.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    if args.command == "train":
        rows = read_rows(args.data)
        heldout = {f for f in args.heldout.split(",") if f}
        train, test = _split(rows, heldout)
        if not train:
            print("no training rows (every family held out, or no data)", file=sys.stderr)
            return 1
        print(f"{len(rows)} programs, {len({r.group for r in rows})} groups, "
              f"{len({r.family for r in rows})} families; training on {len(train)}, holding out {len(test)} "
              f"({', '.join(sorted(heldout)) or 'none'})")
        objective, scores = args.objective, {}
        if objective == "auto":
            objective, scores = choose_objective(train, args.rounds, args.seed)
            print("objectives by folds of the training families (mean Kendall tau): "
                  + ", ".join(f"{o} {s:.3f}" for o, s in scores.items()) + f"; keeping {objective} (rank only by more than {RANK_MARGIN})")
        command = "python -m leir_models.cost_model " + " ".join(argv if argv is not None else sys.argv[1:])
        facts = {"command": command, "heldout": sorted(heldout), "data": [Path(d).name for d in args.data]}
        if scores:
            facts["objective_scores"] = scores
        model = XGBoostCostModel.train(train, objective, args.rounds, args.seed, facts)
        if test:
            result = evaluate(model, test)
            model.meta["training"]["heldout_evaluation"] = {"families": result, "mean": summary(result)}
            print(format_evaluation(result))
        path = model.save(args.out)
        print(f"saved {path} and {sidecar_path(path).name}")
        return 0

    try:
        model = XGBoostCostModel.load(args.model)
    except CostModelError as e:
        print(e, file=sys.stderr)
        return 1
    rows = read_rows(args.data)
    if args.heldout is not None:
        families = {f for f in args.heldout.split(",") if f}
    else:
        trained = set(model.meta.get("training", {}).get("families", ()))
        families = {r.family for r in rows} - trained
    test = [r for r in rows if r.family in families]
    if not test:
        print("no rows of a held-out family in the data", file=sys.stderr)
        return 1
    result = evaluate(model, test)
    if args.json:
        print(json.dumps({"families": result, "mean": summary(result)}, indent=1))
    else:
        print(format_evaluation(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
