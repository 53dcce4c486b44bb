"""The benchmark suite (bench/workloads/): `leir optimize` against TVM
MetaSchedule at the same number of measured trials and against a vendor
library, on realistic sizes, every figure of a workload timed in one process
with one timer, turn about.

For each workload (`bench/workloads/<name>.leir`, serial loops):

- `leir optimize` (`leir.tools.optimize.optimize(analysis, steps=S,
  budget=B, strategy=STRATEGY)`) at each budget of `--budgets` (or the one
  `--budget`), a fresh measurement cache for each search (`--keep-cache`
  uses `$LEIR_CACHE_DIR` as it is), so its wall time includes every build;
- MetaSchedule `tune_tir` with `max_trials_global=B` on the lowered PrimFunc
  (`bench/metaschedule.py`'s `tune_metaschedule`; `--no-metaschedule` skips
  it; `--ms-store DIR` keeps its best schedule per workload and budget in
  TVM's JSON form and reuses it in a later run when the program, target and
  TVM are the same: tuned once, timed turn about in every run, its search
  time as it was when tuned, marked `*`);
- a vendor library: NumPy in f32 (`VENDOR_NUMPY` below: `np.matmul` and so on,
  which hands contractions to OpenBLAS), and torch on the CPU when `import
  torch` works (`VENDOR_TORCH`; skipped silently otherwise: the output says
  which vendors ran).

Then the naive program, every leir result, every MetaSchedule result and the
vendors are timed turn about for `--rounds` rounds (`bench/metaschedule.py`'s
`timer` and `turn_about`: TVM's time_evaluator, one warm-up call, `--repeat`
runs of at least `--min-repeat-ms` each, median; the vendors by
`leir.measure.timing.time_callable` with the same repeat and run length),
median of the rounds. Every timed program and vendor is first checked
against the float64 reference in `bench/workloads/references.py` (Step-TP's
rule, `leir.bridge.comparison.compare`); one that differs is reported, not
counted. A workload whose search fails prints the reason in its row and the
suite carries on.

Ratios are speeds: "leir / MetaSchedule" is MetaSchedule ms / leir ms (above 1:
leir's kernel is faster), "leir / vendor" is the fastest vendor's ms / leir ms.
Geomeans are over the workloads where both figures exist.

    python bench/suite.py [--workloads matmul_512,softmax_256x1024] [--budget 64 | --budgets 16,32,64]
                          [--steps 15] [--strategy plans] [--cost-model none|both] [--ranker model|both]
                          [--no-metaschedule | --ms-store bench/data/metaschedule] [--rounds 3]
                          [--json OUT.json] [--docs docs/optimize.md]
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import NamedTuple

import numpy as np

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
WORKLOADS = BENCH / "workloads"
sys.path.insert(0, str(REPO))  # this checkout's leir, not an installed one


def _load(path: Path, name: str):
    # By path: bench/ is not a package, and putting bench/ on sys.path would
    # let its optimize.py, server.py, ... shadow other modules.
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# timer, turn_about, build, tune_metaschedule
_MS = _load(BENCH / "metaschedule.py", "bench_metaschedule")
REFERENCES = _load(WORKLOADS / "references.py", "bench_workload_references")


def workload_names() -> list[str]:
    return sorted(p.stem for p in WORKLOADS.glob("*.leir"))


# ------------------------------------------------------------ vendors: NumPy in f32

_F32 = np.float32

try:
    from scipy.special import erf as _erf_f32  # vectorized, keeps f32

    ERF = "scipy.special.erf"
except ImportError:  # NumPy has no erf: element by element, slow, and said so
    import math as _math

    _erf_vec = np.vectorize(_math.erf, otypes=[_F32])

    def _erf_f32(x):
        return _erf_vec(x)

    ERF = "math.erf element-wise (no SciPy: slow)"


def _gelu_f32(x):
    return (_F32(0.5) * x * (_F32(1.0) + _erf_f32(x * _F32(1.0 / math.sqrt(2.0))))).astype(_F32)


def _np_matmul(X, W):
    return {"C": np.matmul(X, W)}


def _np_dense(X, W, bias):
    return {"Y": _gelu_f32(np.matmul(X, W) + bias)}


def _np_attention_scores(Q, K):
    return {"S": np.matmul(Q, K.transpose(0, 2, 1))}


def _np_conv2d(X, Wt):
    # im2col and one sgemm per image: (K, C*R*S) @ (C*R*S, H'*W')
    n, c, _, _ = X.shape
    k, _, r, s = Wt.shape
    windows = np.lib.stride_tricks.sliding_window_view(X, (r, s), axis=(2, 3))  # (N, C, H', W', R, S)
    h, w = windows.shape[2:4]
    weights = Wt.reshape(k, c * r * s)
    out = np.empty((n, k, h, w), dtype=_F32)
    for b in range(n):
        cols = windows[b].transpose(0, 3, 4, 1, 2).reshape(c * r * s, h * w)  # a copy: the im2col matrix
        out[b] = (weights @ cols).reshape(k, h, w)
    return {"O": out}


def _np_depthwise_conv2d(X, Wt):
    # nine shifted multiply-adds over the whole tensor
    _, r, s = Wt.shape
    h, w = X.shape[2] - r + 1, X.shape[3] - s + 1
    out = np.zeros((X.shape[0], X.shape[1], h, w), dtype=_F32)
    for dr in range(r):
        for ds in range(s):
            out += X[:, :, dr:dr + h, ds:ds + w] * Wt[None, :, dr, ds, None, None]
    return {"O": out}


def _np_softmax(X):
    e = np.exp(X - X.max(axis=1, keepdims=True))
    return {"Y": e / e.sum(axis=1, keepdims=True)}


def _np_layernorm(X, gamma, beta):
    mean = X.mean(axis=1, keepdims=True)
    d = X - mean
    var = (d * d).mean(axis=1, keepdims=True)
    return {"Y": d / np.sqrt(var + _F32(1e-05)) * gamma + beta}


def _np_column_sum(X):
    return {"S": X.sum(axis=0)}


#: workload -> f32 NumPy function taking the inputs by name, returning the outputs.
VENDOR_NUMPY = {
    "matmul_512": _np_matmul,
    "matmul_1024x1024x512": _np_matmul,
    "dense_768": _np_dense,
    "dense_3072": _np_dense,
    "attention_scores": _np_attention_scores,
    "conv2d_resnet": _np_conv2d,
    "depthwise_conv2d": _np_depthwise_conv2d,
    "softmax_256x1024": _np_softmax,
    "layernorm_256x1024": _np_layernorm,
    "column_sum": _np_column_sum,
}

VENDOR_NUMPY_WHAT = {
    "matmul_512": "np.matmul", "matmul_1024x1024x512": "np.matmul",
    "dense_768": f"np.matmul + gelu ({ERF})", "dense_3072": f"np.matmul + gelu ({ERF})",
    "attention_scores": "np.matmul (batched)", "conv2d_resnet": "im2col + np.matmul",
    "depthwise_conv2d": "9 shifted multiply-adds", "softmax_256x1024": "np.exp, sums",
    "layernorm_256x1024": "mean, var", "column_sum": "X.sum(axis=0)",
}


# ------------------------------------------------------------ vendors: torch on the CPU


def _torch_functions():
    """workload -> a function of torch tensors, or None without torch."""
    try:
        import torch
        import torch.nn.functional as F
    except Exception:  # torch absent or broken: skipped silently
        return None
    return {
        "matmul_512": lambda X, W: {"C": torch.matmul(X, W)},
        "matmul_1024x1024x512": lambda X, W: {"C": torch.matmul(X, W)},
        "dense_768": lambda X, W, bias: {"Y": F.gelu(torch.addmm(bias, X, W))},
        "dense_3072": lambda X, W, bias: {"Y": F.gelu(torch.addmm(bias, X, W))},
        "attention_scores": lambda Q, K: {"S": torch.bmm(Q, K.transpose(1, 2))},
        "conv2d_resnet": lambda X, Wt: {"O": F.conv2d(X, Wt)},
        "depthwise_conv2d": lambda X, Wt: {"O": F.conv2d(X, Wt.unsqueeze(1), groups=Wt.shape[0])},
        "softmax_256x1024": lambda X: {"Y": torch.softmax(X, dim=1)},
        "layernorm_256x1024": lambda X, gamma, beta: {"Y": F.layer_norm(X, (X.shape[1],), gamma, beta, 1e-05)},
        "column_sum": lambda X: {"S": X.sum(dim=0)},
    }


def vendors(name: str, inputs: dict[str, np.ndarray]) -> list[tuple[str, str, object]]:
    """(vendor, what, bound call returning NumPy outputs) for each vendor that
    has the workload; torch's inputs are converted once, outside the call."""
    out = []
    fn = VENDOR_NUMPY.get(name)
    if fn is not None:
        out.append(("numpy", f"NumPy {np.__version__} f32: {VENDOR_NUMPY_WHAT[name]}",
                    lambda: fn(**inputs)))
    torch_fns = _torch_functions()
    if torch_fns is not None and name in torch_fns:
        import torch

        tensors = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in inputs.items()}
        tfn = torch_fns[name]

        def call():
            with torch.no_grad():
                return {k: v.numpy() for k, v in tfn(**tensors).items()}

        out.append(("torch", f"torch {torch.__version__} CPU ({torch.get_num_threads()} threads)", call))
    return out


# ------------------------------------------------------------ checks and timers


def check_outputs(outputs: dict, expected: dict, analysis) -> str | None:
    """Why ``outputs`` differ from the reference, or None."""
    from leir.bridge.comparison import compare

    for t in analysis.outputs():
        if t.name not in outputs:
            return f"no output {t.name}"
        value = np.asarray(outputs[t.name])
        if value.shape != expected[t.name].shape:
            return f"{t.name}: shape {list(value.shape)} != {list(expected[t.name].shape)}"
        c = compare(value, expected[t.name], t.dtype)
        if not c.ok:
            return f"{t.name}: {c.describe()}"
    return None


def run_module(module, analysis, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """One call of the built ``main`` on ``inputs`` (by name: a transformed
    program may list its tensors in another order)."""
    import tvm

    from leir.inputs import zeros

    dev = tvm.cpu(0)
    args = [tvm.runtime.tensor(inputs[t.name], dev) for t in analysis.inputs()]
    outs = [tvm.runtime.tensor(zeros(t), dev) for t in analysis.outputs()]
    module["main"](*args, *outs)
    return {t.name: o.numpy() for t, o in zip(analysis.outputs(), outs)}


def vendor_timer(call, repeat: int, min_repeat_ms: int):
    from leir.measure.timing import summarize, time_callable

    call()  # warm-up
    return lambda: summarize(*time_callable(call, repeat=repeat, min_run_ms=min_repeat_ms)).median_ms


def _reason(e: BaseException) -> str:
    lines = f"{type(e).__name__}: {e}".strip().splitlines()
    # one line, and no "|" to break the Markdown table
    return (lines[0] if lines else type(e).__name__)[:300].replace("|", "/")


def _geomean(xs: list[float]) -> float | None:
    xs = [x for x in xs if x is not None and x > 0 and math.isfinite(x)]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


# ------------------------------------------------------------ one workload


class Search(NamedTuple):
    """One leir search a budget runs: its row key, its label, the cost model
    that screens its plans ("default": the installed one; "none": the plans'
    prior) and the ranker that orders its steps ("heuristic" or "model")."""

    key: str
    label: str
    cost_model: str = "default"
    ranker: str = "heuristic"


#: The comparisons ``--cost-model both`` and ``--ranker both`` add: (row key of
#: the second search, ratio key, what the ratio says). Each ratio is a speed:
#: the second search's ms over the first's for the cost model (the cost
#: model's kernel against the prior's), the first's over the second's for the
#: ranker (the model's kernel against the heuristic's).
EFFECTS = (
    ("leir_prior", "cost_model_over_prior", "cost model / prior"),
    ("leir_model", "model_over_heuristic", "model ranker / heuristic"),
)


def _searches(args) -> list[Search]:
    """Each leir search a budget runs: the main one ("leir"), and with
    ``--cost-model both`` the same with the plans prior alone, with
    ``--ranker both`` the same with the local model's ranking."""
    main = Search("leir", "leir", "none" if args.cost_model == "none" else "default",
                  "model" if args.ranker == "model" else "heuristic")
    found = [main]
    if args.cost_model == "both":
        found.append(Search("leir_prior", "leir, plans prior (no cost model)", "none", main.ranker))
    if args.ranker == "both":
        found.append(Search("leir_model", "leir, model ranker", main.cost_model, "model"))
    return found


_RANKERS: dict = {}


def _ranker(name: str):
    """The ranker named (loaded once a process), or None for the heuristic;
    a model that does not load stops the run (its figures would be the
    heuristic's under the model's name)."""
    if name == "heuristic":
        return None
    if name not in _RANKERS:
        from leir.tools.ranking import HeuristicRanker, load_ranker_telling

        said: list[str] = []
        ranker = load_ranker_telling(name, said.append)
        if isinstance(ranker, HeuristicRanker):
            raise SystemExit(f"the {name} ranker did not load: {'; '.join(said) or 'no reason given'}")
        _RANKERS[name] = ranker
    return _RANKERS[name]


def _leir_search(name: str, analysis, budget: int, args, search: Search, where: dict):
    """One ``leir optimize`` search into ``where`` (a fresh measurement cache
    unless --keep-cache); its final program analysed, or None when it failed."""
    from leir.semantics import analyze
    from leir.tools.optimize import optimize

    t0 = time.time()
    final = None
    try:
        with tempfile.TemporaryDirectory(prefix=f"leir-cache-{name}-") as cache:
            if not args.keep_cache:
                os.environ["LEIR_CACHE_DIR"] = cache
            result = optimize(analysis, steps=args.steps, budget=budget, strategy=args.strategy,
                              ranker=_ranker(search.ranker),
                              **({"cost_model": None} if search.cost_model == "none" else {}))
        final = analyze(result.final)
        where.update(steps=[s.id for s in result.steps], measurements=result.measurements,
                     cache_hits=result.cache_hits, confirmations=result.confirmations,
                     unconfirmed=result.unconfirmed, stop_reason=result.stop_reason,
                     search_start_ms=result.start_ms, search_final_ms=result.final_ms,
                     trace=[s.to_json() for s in result.steps])
    except Exception as e:  # report it in the row, carry on
        where["error"] = _reason(e)
        traceback.print_exc()
    finally:
        if not args.keep_cache:
            os.environ.pop("LEIR_CACHE_DIR", None)
            if args.saved_cache_dir is not None:
                os.environ["LEIR_CACHE_DIR"] = args.saved_cache_dir
    where["search_s"] = time.time() - t0
    steps = where.get("steps")
    print(f"  budget {budget}: {search.label} {args.strategy}: "
          + (f"{len(steps)} steps ({' '.join(steps) or '-'}), {where['measurements']} measurements"
             if steps is not None else f"failed: {where['error']}")
          + f", {where['search_s']:.0f} s", flush=True)
    return final


def run_workload(name: str, args, metaschedule: bool) -> dict:
    from leir.bridge.document import load_program
    from leir.bridge.lower import lower
    from leir.bridge.run import compile_program
    from leir.inputs import random_inputs

    analysis, _ = load_program(WORKLOADS / f"{name}.leir")
    inputs = random_inputs(analysis, 0)
    expected = getattr(REFERENCES, name)(**inputs)
    record = {"workload": name, "loads": [os.getloadavg()[0]], "budgets": {}}
    print(f"== {name}", flush=True)

    finals = {}  # (row key, budget) -> analysis of leir's final program
    ms_funcs = {}  # budget -> MetaSchedule's PrimFunc
    for budget in args.budgets:
        row = {"leir": {}, "metaschedule": {}}
        record["budgets"][budget] = row
        # leir optimize (again with --cost-model both / --ranker both: row["leir_prior"], row["leir_model"])
        for search in _searches(args):
            row[search.key] = {}
            final = _leir_search(name, analysis, budget, args, search, row[search.key])
            if final is not None:
                finals[search.key, budget] = final
        # MetaSchedule
        if not metaschedule:
            row["metaschedule"]["skipped"] = True
            continue
        stored = _ms_load(args.ms_store, name, budget, analysis) if args.ms_store else None
        if stored is not None:
            ms_funcs[budget], row["metaschedule"] = stored
            print(f"  budget {budget}: MetaSchedule: {row['metaschedule']['records']} records, "
                  f"{row['metaschedule']['search_s']:.0f} s (stored {row['metaschedule']['stored']})", flush=True)
            continue
        t0 = time.time()
        try:
            import cloudpickle  # noqa: F401  (MetaSchedule's builder pickles with it)
            import psutil  # noqa: F401
            import xgboost  # noqa: F401

            with tempfile.TemporaryDirectory(prefix=f"ms-{name}-") as work_dir:
                ms_funcs[budget], records = _MS.tune_metaschedule(lower(analysis), budget, work_dir, args.ms_timeout)
            row["metaschedule"]["records"] = records
        except Exception as e:
            row["metaschedule"]["error"] = _reason(e)
            traceback.print_exc()
        row["metaschedule"]["search_s"] = time.time() - t0
        row["metaschedule"]["loads"] = [record["loads"][0], os.getloadavg()[0]]
        print(f"  budget {budget}: MetaSchedule: "
              + (f"{row['metaschedule']['records']} records" if "error" not in row["metaschedule"]
                 else f"failed: {row['metaschedule']['error']}")
              + f", {row['metaschedule']['search_s']:.0f} s", flush=True)
        if args.ms_store and budget in ms_funcs:
            _ms_save(args.ms_store, name, budget, analysis, ms_funcs[budget], row["metaschedule"])
    record["loads"].append(os.getloadavg()[0])

    # Build and check everything, then one turn-about timing of all of it.
    labels, timers = [], []

    def add_tvm(label, module, program, where):
        why = check_outputs(run_module(module, program, inputs), expected, program)
        if why is not None:
            where["error"] = f"wrong result: {why}"
            print(f"  {label}: {where['error']}", flush=True)
            return
        labels.append((label, where))
        timers.append(_MS.timer(module, program, args.repeat, args.min_repeat_ms))

    record["naive"] = {}
    add_tvm("naive", compile_program(analysis).module, analysis, record["naive"])
    for budget in args.budgets:
        row = record["budgets"][budget]
        try:
            for key in (search.key for search in _searches(args)):
                if (key, budget) in finals:
                    final = finals[key, budget]
                    add_tvm(f"{key}@{budget}", compile_program(final).module, final, row[key])
            if budget in ms_funcs:
                add_tvm(f"ms@{budget}", _MS.build(ms_funcs[budget]), analysis, row["metaschedule"])
        except Exception as e:
            print(f"  budget {budget}: build for timing failed: {_reason(e)}", flush=True)
            traceback.print_exc()
    record["vendors"] = {}
    for vendor, what, call in vendors(name, inputs):
        where = {"what": what}
        record["vendors"][vendor] = where
        try:
            why = check_outputs(call(), expected, analysis)
        except Exception as e:
            why = _reason(e)
        if why is not None:
            where["error"] = f"wrong result: {why}"
            print(f"  {vendor}: {where['error']}", flush=True)
            continue
        labels.append((vendor, where))
        timers.append(vendor_timer(call, args.repeat, args.min_repeat_ms))
    for (label, where), ms in zip(labels, _MS.turn_about(timers, args.rounds)):
        where["ms"] = ms
    record["loads"].append(os.getloadavg()[0])

    # ratios (speeds)
    timed_vendors = {v: d["ms"] for v, d in record["vendors"].items() if "ms" in d}
    best_vendor = min(timed_vendors, key=timed_vendors.get) if timed_vendors else None
    record["best_vendor"] = best_vendor
    for budget in args.budgets:
        row = record["budgets"][budget]
        ours, theirs = row["leir"].get("ms"), row["metaschedule"].get("ms")
        row["leir_over_metaschedule"] = theirs / ours if ours and theirs else None
        row["leir_over_vendor"] = timed_vendors[best_vendor] / ours if ours and best_vendor else None
        naive = record["naive"].get("ms")
        row["leir_speedup"] = naive / ours if naive and ours else None
        if "leir_prior" in row:  # the cost model's effect: its search's kernel against the prior's, as speeds
            prior = row["leir_prior"].get("ms")
            row["cost_model_over_prior"] = prior / ours if ours and prior else None
        if "leir_model" in row:  # the model ranker's effect: its search's kernel against the heuristic's
            model = row["leir_model"].get("ms")
            row["model_over_heuristic"] = ours / model if ours and model else None
    record["load_range"] = f"{min(record['loads']):.1f}-{max(record['loads']):.1f}"
    return record


# ------------------------------------------------------------ MetaSchedule's results, kept


def _ms_key(name: str, budget: int, analysis) -> dict:
    """What a stored MetaSchedule result must match to be reused: the
    workload's lowered PrimFunc (its structural hash), the trials, the
    target MetaSchedule tuned for (this CPU, its cores) and TVM's version."""
    import tvm
    import tvm_ffi

    from leir.bridge.lower import lower
    from leir.bridge.targets import host_target

    return {"workload": name, "trials": budget, "func_hash": str(tvm_ffi.structural_hash(lower(analysis))),
            "target": str(host_target()), "cores": os.cpu_count(), "tvm": tvm.__version__}


def _ms_path(store: str, name: str, budget: int) -> Path:
    return Path(store) / f"{name}-{budget}.json"


def _ms_save(store: str, name: str, budget: int, analysis, func, row: dict) -> None:
    """MetaSchedule's best PrimFunc for (workload, trials) in TVM's JSON form
    (``tvm.ir.save_json``: data, nothing a load executes) with its search's
    figures, written beside and renamed into place."""
    import tvm

    from leir.files import write_atomic

    path = _ms_path(store, name, budget)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {"key": _ms_key(name, budget, analysis), "records": row.get("records"),
               "search_s": row.get("search_s"), "loads": row.get("loads"),
               "tuned": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
               "commit": _commit(), "func": tvm.ir.save_json(func)}
    write_atomic(path, json.dumps(payload) + "\n")


def _ms_load(store: str, name: str, budget: int, analysis):
    """(PrimFunc, row) of a stored MetaSchedule result that matches
    ``_ms_key``, or None (none stored, or stored for another program, target,
    machine or TVM: tuned afresh then, and stored over it)."""
    import tvm

    path = _ms_path(store, name, budget)
    if not path.is_file():
        return None
    try:
        payload = json.loads(path.read_text(encoding="utf-8"))
        if payload.get("key") != _ms_key(name, budget, analysis):
            print(f"  budget {budget}: MetaSchedule: {path} is for another program, target or TVM: tuning afresh",
                  flush=True)
            return None
        func = tvm.ir.load_json(payload["func"])
    except Exception as e:  # a damaged file: tune afresh
        print(f"  budget {budget}: MetaSchedule: {path} does not load ({_reason(e)}): tuning afresh", flush=True)
        return None
    return func, {"records": payload.get("records"), "search_s": payload.get("search_s") or 0.0,
                  "loads": payload.get("loads"), "stored": payload.get("tuned")}


# ------------------------------------------------------------ the table


def _ms(d: dict) -> str:
    if "ms" in d:
        return f"{d['ms']:.3f}"
    if d.get("skipped"):
        return "-"
    return f"failed: {d['error']}" if "error" in d else "-"


def _ratio(x) -> str:
    return "-" if x is None else f"{x:.2f}"


def table(records: list[dict], budgets: list[int]) -> str:
    lines = ["| workload | budget | naive ms | leir ms (steps) | MetaSchedule ms | vendor ms | leir / MetaSchedule "
             "| leir / vendor | leir search s | MetaSchedule search s | load average |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in records:
        if "error" in r:
            lines.append(f"| {r['workload']} | - | failed: {r['error']} | - | - | - | - | - | - | - | - |")
            continue
        best = r.get("best_vendor")
        vendor = f"{r['vendors'][best]['ms']:.3f} ({best})" if best else "-"
        for budget in budgets:
            row = r["budgets"][budget]
            leir = row["leir"]
            ours = _ms(leir) + (f" ({len(leir['steps'])})" if "steps" in leir and "ms" in leir else "")
            ms = row["metaschedule"]
            ms_s = "-" if ms.get("skipped") else f"{ms.get('search_s', 0):.0f}" + (" *" if ms.get("stored") else "")
            lines.append(f"| {r['workload']} | {budget} | {_ms(r['naive'])} | {ours} | {_ms(ms)} | {vendor} "
                         f"| {_ratio(row['leir_over_metaschedule'])} | {_ratio(row['leir_over_vendor'])} "
                         f"| {leir.get('search_s', 0):.0f} | {ms_s} | {r['load_range']} |")
    return "\n".join(lines)


def effect_tables(records: list[dict], budgets: list[int]) -> str:
    """With --cost-model both or --ranker both: the main search against its
    counterpart (the plans prior alone; the model's ranking), both kernels
    timed turn about, one table each."""
    tables = []
    for key, ratio, says in EFFECTS:
        if not any(key in row for r in records if "error" not in r for row in r["budgets"].values()):
            continue
        first, other = (("leir, cost model", "leir, plans prior") if key == "leir_prior"
                        else ("leir, heuristic ranker", "leir, model ranker"))
        lines = [f"| workload | budget | naive ms | {first} ms (steps) | {other} ms (steps) | {says} "
                 "| search s (first, second) | load average |", "|---|---|---|---|---|---|---|---|"]
        for r in records:
            if "error" in r:
                continue
            for budget in budgets:
                row = r["budgets"][budget]
                if key not in row:
                    continue
                cells = []
                for k in ("leir", key):
                    d = row[k]
                    cells.append(_ms(d) + (f" ({len(d['steps'])})" if "steps" in d and "ms" in d else ""))
                lines.append(f"| {r['workload']} | {budget} | {_ms(r['naive'])} | {cells[0]} | {cells[1]} "
                             f"| {_ratio(row.get(ratio))} | {row['leir'].get('search_s', 0):.0f}, "
                             f"{row[key].get('search_s', 0):.0f} | {r['load_range']} |")
        tables.append("\n".join(lines))
    return "\n\n".join(tables)


def geomeans(records: list[dict], budgets: list[int]) -> dict:
    out = {}
    for budget in budgets:
        rows = [r["budgets"][budget] for r in records if "error" not in r]
        vs_ms = [r["leir_over_metaschedule"] for r in rows if r["leir_over_metaschedule"]]
        vs_vendor = [r["leir_over_vendor"] for r in rows if r["leir_over_vendor"]]
        out[budget] = {**{ratio: _geomean([r[ratio] for r in rows if r.get(ratio)]) for _, ratio, _ in EFFECTS},
                       "leir_over_metaschedule": _geomean(vs_ms), "over_n_metaschedule": len(vs_ms),
                       "leir_over_vendor": _geomean(vs_vendor), "over_n_vendor": len(vs_vendor),
                       "leir_speedup": _geomean([r["leir_speedup"] for r in rows if r["leir_speedup"]])}
    return out


def _commit() -> str:
    try:
        return subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, timeout=10).stdout.strip()
    except Exception:
        return ""


def main(argv=None) -> int:
    from leir.tools.optimize import STRATEGIES

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", default="all", help="comma-separated names in bench/workloads/ (default all)")
    parser.add_argument("--budget", type=int, default=64, help="measurements for leir, trials for MetaSchedule")
    parser.add_argument("--budgets", help="several budgets, e.g. 16,32,64 (overrides --budget)")
    parser.add_argument("--steps", type=int, default=15, help="steps at most for leir optimize")
    parser.add_argument("--strategy", default=STRATEGIES[0], choices=STRATEGIES)
    parser.add_argument("--no-metaschedule", action="store_true", help="skip MetaSchedule")
    parser.add_argument("--ranker", choices=("heuristic", "model", "both"), default="heuristic",
                        help="the ranking that orders leir's steps: the heuristic, the local model (leir_models), "
                             "or both searches, timed turn about (the model's effect on search)")
    parser.add_argument("--cost-model", choices=("default", "none", "both"), default="default",
                        help="none: the plans search orders its plans by their hand-written prior, no learned model; "
                             "both: each budget searched both ways, timed turn about (the cost model's effect)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the turn-about timing (default 3)")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--min-repeat-ms", type=int, default=50)
    parser.add_argument("--ms-timeout", type=float, default=300.0, help="MetaSchedule builder/runner timeout in seconds")
    parser.add_argument("--ms-store", metavar="DIR",
                        help="reuse MetaSchedule's best schedule for a workload and budget from DIR when it was tuned "
                             "for the same program, target and TVM (its search time and load as they were then), "
                             "and store each new one there (e.g. bench/data/metaschedule)")
    parser.add_argument("--keep-cache", action="store_true",
                        help="measure through $LEIR_CACHE_DIR as it is (default: a fresh cache per search)")
    parser.add_argument("--json", metavar="OUT", help="write every figure to this JSON file")
    parser.add_argument("--docs", metavar="FILE", help="append the Markdown table to this file")
    args = parser.parse_args(argv)

    known = workload_names()
    names = known if args.workloads == "all" else [n.strip() for n in args.workloads.split(",") if n.strip()]
    unknown = [n for n in names if n not in known]
    if unknown:
        parser.error(f"unknown workload(s) {', '.join(unknown)}: expected some of {', '.join(known)}")
    try:
        args.budgets = ([int(b) for b in args.budgets.split(",") if b.strip()] if args.budgets else [args.budget])
    except ValueError:
        parser.error(f"--budgets takes comma-separated integers, got {args.budgets!r}")
    args.saved_cache_dir = os.environ.get("LEIR_CACHE_DIR")

    from leir.bridge.targets import kernel_threads
    from leir.measure.vendor import blas_description

    # Kernels timed here run on the threads the measurement engine's workers
    # use (TVM's default is half the CPUs, pinned); MetaSchedule's runner
    # inherits it.
    os.environ.setdefault("TVM_NUM_THREADS", str(kernel_threads()))
    started = datetime.datetime.now(datetime.timezone.utc)
    records = []
    for name in names:
        try:
            records.append(run_workload(name, args, metaschedule=not args.no_metaschedule))
        except Exception as e:  # a workload that cannot even be timed: its row says why
            traceback.print_exc()
            records.append({"workload": name, "error": _reason(e)})
        # Each workload's row as soon as it is timed, and the figures so far
        # (a long run cut short keeps what it measured).
        print("\n".join(table(records[-1:], args.budgets).splitlines()[2:]), flush=True)
        if args.json:
            Path(args.json + ".partial").write_text(json.dumps(
                {"started": started.isoformat(), "commit": _commit(), "workloads": records}, indent=2,
                default=str) + "\n", encoding="utf-8")

    text = table(records, args.budgets)
    means = geomeans(records, args.budgets)
    ran_vendors = sorted({v for r in records for v, d in r.get("vendors", {}).items() if "ms" in d})
    vendor_names = {v: d["what"] for r in records for v, d in r.get("vendors", {}).items()}
    summary_lines = []
    for budget, g in means.items():
        summary_lines.append(
            f"budget {budget}: geomean leir / MetaSchedule {_ratio(g['leir_over_metaschedule'])} "
            f"(over {g['over_n_metaschedule']}), leir / vendor {_ratio(g['leir_over_vendor'])} "
            f"(over {g['over_n_vendor']}), leir / naive {_ratio(g['leir_speedup'])}"
            + "".join(f", {says} {_ratio(g[ratio])}" for _, ratio, says in EFFECTS if g[ratio] is not None))
    cpu = platform.processor() or platform.machine()
    torch_note = "" if "torch" in ran_vendors else " (torch not importable: NumPy only)"
    summary_lines.append(
        f"leir optimize --strategy {args.strategy} --steps {args.steps}"
        f"{', no cost model (the plans prior)' if args.cost_model == 'none' else ''}"
        f"{', with the cost model and with the plans prior alone' if args.cost_model == 'both' else ''}"
        f"{', ranked by the local model' if args.ranker == 'model' else ''}"
        f"{', ranked by the heuristic and by the local model' if args.ranker == 'both' else ''}"
        f", a fresh cache per search"
        f"{' (kept: --keep-cache)' if args.keep_cache else ''}; MetaSchedule "
        f"{'skipped' if args.no_metaschedule else 'tune_tir at the same number of trials'}; vendors that ran: "
        f"{', '.join(ran_vendors) or 'none'}{torch_note}; {blas_description()}; timed turn about, {args.rounds} "
        f"rounds of {args.repeat} runs of at least {args.min_repeat_ms} ms; {os.cpu_count()} cores ({cpu}), "
        f"TVM_NUM_THREADS={os.environ.get('TVM_NUM_THREADS')}; commit {_commit()}, "
        f"{started:%Y-%m-%d %H:%M} UTC; load average at the end {os.getloadavg()[0]:.1f}")
    stored = sorted({f"{r['workload']}@{b}: {row['metaschedule']['stored']}" for r in records if "error" not in r
                     for b, row in r["budgets"].items() if row["metaschedule"].get("stored")})
    if stored:
        summary_lines.append("* MetaSchedule's schedule reused from --ms-store (tuned then, timed in this run; its "
                             "search time as it was then): " + ", ".join(stored))
    summary = "\n".join(summary_lines)
    effect = effect_tables(records, args.budgets)
    print()
    print(text)
    if effect:
        print()
        print(effect)
        text += "\n\n" + effect
    print()
    print(summary)
    if args.json:
        payload = {"started": started.isoformat(), "commit": _commit(), "cores": os.cpu_count(), "cpu": cpu,
                   "blas": blas_description(), "vendors": vendor_names, "arguments": {
                       k: v for k, v in vars(args).items() if k not in ("saved_cache_dir",)},
                   "workloads": records, "geomeans": means}
        Path(args.json).write_text(json.dumps(payload, indent=2, default=str) + "\n", encoding="utf-8")
    if args.docs:
        with open(args.docs, "a", encoding="utf-8") as f:
            command = "python bench/suite.py " + " ".join(sys.argv[1:] if argv is None else argv)
            notes = "\n".join(f"- {line}" for line in summary_lines)
            f.write(f"\n    {command}\n\n{text}\n\n{notes}\n")
    failed = any("error" in r or any("error" in row["leir"] or "error" in row["metaschedule"]
                                     for row in r["budgets"].values()) for r in records)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
