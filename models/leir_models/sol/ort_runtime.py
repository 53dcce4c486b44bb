"""The decode loop's MLPs on ONNX Runtime (docs/sol.md, "The ONNX Runtime path").

``decode.generate`` runs a ``prepare``\\ d model whose MLPs are
``knobs.SlicedMLP`` and sets each token's keep fraction with
``knobs.set_keep``. ``install`` replaces every one of those wrappers by an
``OrtMLP``, a ``SlicedMLP`` subclass (so ``set_keep`` and ``prepare`` see it
as one) whose ``forward`` runs the ONNX Runtime session of its layer at its
current keep: numpy in, ``torch.from_numpy`` out. The attention, the norms,
the output head and the policy stay on torch; ``decode.py`` needs no change.

The graphs are ``onnx_blocks``': per layer and keep level, the truncated MLP
exported with the dynamo exporter (fp32), and its dynamic int8 quantization
(``quantize_int8``: ``MatMulInteger`` with int8 weights,
``DynamicQuantizeLinear`` on the activations). All of them are written once
into a cache directory keyed by a fingerprint of the MLP weights *after* the
channel reordering (``fingerprint``): another model, or the same model with
another policy's channel order, gets other graphs; a second ``install`` of
the same weights exports nothing. The precision is a runtime option for all
MLPs (``"fp32"`` or ``"int8"``); only that precision's sessions are opened,
with one intra-op thread by default.

Sessions ask for ``onnx_blocks.PROVIDERS`` (CUDA first, then CPU); the
providers really in use are ``OrtRuntime.providers`` (from every session's
``get_providers()``, ``onnx_blocks.provider_report``, which logs a CUDA
fall-back). The tensors cross to and from the CPU per call: there is no
IOBinding, so on a CUDA provider each MLP call would copy its input and
output (the issue's IOBinding item is not done).

The cache directory is ``$LEIR_SOL_CACHE``, else
``$XDG_CACHE_HOME/leir-lsp/sol-onnx``, else ``~/.cache/leir-lsp/sol-onnx``,
unless ``install`` is given one.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from leir_models.sol import knobs, onnx_blocks
from leir_models.sol.onnx_blocks import write_graph
from leir_models.sol.knobs import MLP_LEVELS, keep_width

log = logging.getLogger(__name__)

#: Bumped when the exported graphs change (part of the cache key). 2: int8
#: weights quantized to 7 bits (``onnx_blocks.quantize_int8``).
CACHE_FORMAT = "leir-sol-onnx/2"
RUNTIMES = ("torch", "onnx")


def sliced_layers(model) -> list[knobs.SlicedMLP]:
    """The ``SlicedMLP`` wrappers of a prepared model, in layer order."""
    return [m for m in model.modules() if isinstance(m, knobs.SlicedMLP)]


@torch.no_grad()
def fingerprint(mlps: Sequence[torch.nn.Module], keeps: Sequence[float] = MLP_LEVELS) -> str:
    """A hash of every MLP's weights (in their current channel order), the
    keep levels and ``CACHE_FORMAT``: the cache key of their graphs."""
    h = hashlib.sha256(json.dumps({"format": CACHE_FORMAT, "keeps": list(keeps)}).encode())
    for mlp in mlps:
        for name in ("gate_proj", "up_proj", "down_proj"):
            proj = getattr(mlp, name)
            for t in (proj.weight, proj.bias):
                if t is not None:
                    h.update(str(tuple(t.shape)).encode())
                    h.update(t.detach().float().contiguous().cpu().numpy().tobytes())
    return h.hexdigest()[:24]


def graph_path(directory: Path, layer: int, n: int, precision: str) -> Path:
    return directory / f"layer{layer}_k{n}_{precision}.onnx"


def export_all(mlps: Sequence[torch.nn.Module], cache_dir: str | Path | None = None,
               keeps: Sequence[float] = MLP_LEVELS) -> dict[tuple[int, float, str], Path]:
    """Every layer's graph at every keep level, fp32 and int8, under
    ``cache_dir/<fingerprint>/``; graphs already there are reused. Each file
    is written under a temporary name and renamed, so an interrupted export
    leaves no half-written graph behind. Returns (layer, keep, precision) -> path."""
    directory = Path(cache_dir or onnx_blocks.default_cache_dir()) / fingerprint(mlps, keeps)
    directory.mkdir(parents=True, exist_ok=True)
    paths: dict[tuple[int, float, str], Path] = {}
    with onnx_blocks.quiet_export():
        _export_missing(mlps, directory, keeps, paths)
    return paths


def _export_missing(mlps, directory: Path, keeps, paths: dict) -> None:
    for i, mlp in enumerate(mlps):
        inter = mlp.down_proj.in_features
        for keep in keeps:
            n = keep_width(inter, keep)
            fp32 = write_graph(graph_path(directory, i, n, "fp32"),
                               lambda tmp, mlp=mlp, keep=keep: onnx_blocks.export_mlp(mlp, tmp, keep))
            int8 = write_graph(graph_path(directory, i, n, "int8"),
                               lambda tmp, fp32=fp32: onnx_blocks.quantize_int8(fp32, tmp))
            paths[(i, keep, "fp32")], paths[(i, keep, "int8")] = fp32, int8


class OrtMLP(knobs.SlicedMLP):
    """A layer's MLP run by ONNX Runtime at its ``keep`` (set by
    ``knobs.set_keep``, as for any ``SlicedMLP``): one session per keep level.
    ``calls`` counts the session runs per keep (what the tests check)."""

    def __init__(self, mlp: torch.nn.Module, sessions: dict[float, object], keep: float = 1.0):
        super().__init__(mlp, keep)
        self.sessions = sessions
        self.calls: dict[float, int] = {k: 0 for k in sessions}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        session = self.sessions.get(self.keep)
        if session is None:
            raise ValueError(f"no ONNX graph at keep {self.keep} (exported: {sorted(self.sessions)})")
        self.calls[self.keep] += 1
        shape = x.shape
        arr = x.detach().to(torch.float32).reshape(-1, shape[-2], shape[-1]).contiguous().numpy()
        out = session.run([onnx_blocks.OUTPUT_NAME], {onnx_blocks.INPUT_NAME: arr})[0]
        return torch.from_numpy(out).reshape(shape).to(x.dtype)


@dataclass
class OrtRuntime:
    """The ORT sessions installed in a model (``install``); ``uninstall``
    puts the torch wrappers back."""

    model: object
    precision: str
    directory: Path
    paths: dict[tuple[int, float, str], Path]
    wrappers: list[OrtMLP]
    reports: list[onnx_blocks.ProviderReport]
    replaced: list[tuple[torch.nn.Module, str, knobs.SlicedMLP]] = field(default_factory=list)

    @property
    def providers(self) -> list[str]:
        """The providers the sessions really use, in ORT's order, each once."""
        return onnx_blocks.providers_in_use(self.reports)

    @property
    def requested(self) -> tuple[str, ...]:
        return self.reports[0].requested if self.reports else tuple(onnx_blocks.PROVIDERS)

    @property
    def cuda_missing(self) -> bool:
        return any(r.cuda_missing for r in self.reports)

    def uninstall(self) -> None:
        for parent, name, original in self.replaced:
            original.keep = 1.0
            setattr(parent, name, original)
        self.replaced.clear()


def install(model, precision: str = "fp32", cache_dir: str | Path | None = None, threads: int | None = 1,
            providers: Sequence[str] = onnx_blocks.PROVIDERS, keeps: Sequence[float] = MLP_LEVELS,
            quiet: bool = True) -> OrtRuntime:
    """Run ``model``'s MLPs on ONNX Runtime at ``precision`` from now on.

    ``model`` must be ``decode.prepare``\\ d (its ``SlicedMLP`` wrappers are
    replaced; prepare it, with the policy's channel orders, *before*: the
    graphs are of the weights as they are now). The graphs are exported
    into the cache if missing (``export_all``). ``quiet``: ORT's log and
    the per-session fall-back warnings held back, one warning logged
    (``onnx_blocks.quiet_sessions``); the report is in ``OrtRuntime.reports`` either way."""
    if precision not in onnx_blocks.PRECISIONS:
        raise ValueError(f"precision {precision!r} is not one of {onnx_blocks.PRECISIONS}")
    if any(isinstance(m, OrtMLP) for m in model.modules()):
        raise ValueError("the model already runs its MLPs on ONNX Runtime (uninstall first)")
    layers = sliced_layers(model)
    if not layers:
        raise ValueError("the model is not prepared (no knobs.SlicedMLP; call decode.prepare first)")
    mlps = [w.mlp for w in layers]
    paths = export_all(mlps, cache_dir, keeps)
    directory = next(iter(paths.values())).parent
    wrappers, reports = [], []
    by_layer = {id(w): i for i, w in enumerate(layers)}
    runtime = OrtRuntime(model, precision, directory, paths, wrappers, reports)
    with onnx_blocks.quiet_sessions(quiet):
        for parent in list(model.modules()):
            for name, child in list(parent.named_children()):
                if isinstance(child, knobs.SlicedMLP) and id(child) in by_layer:
                    i = by_layer[id(child)]
                    sessions = {}
                    for keep in keeps:
                        session, report = onnx_blocks.ort_session(paths[(i, keep, precision)], providers, threads)
                        sessions[keep] = session
                        reports.append(report)
                    wrapper = OrtMLP(child.mlp, sessions, child.keep)
                    setattr(parent, name, wrapper)
                    wrappers.append(wrapper)
                    runtime.replaced.append((parent, name, child))
    # model.modules() lists the decoder layers in order, so the wrappers are in layer order.
    if quiet and runtime.cuda_missing:
        log.warning("CUDAExecutionProvider was requested but is not in use by %d of %d sessions; running on %s",
                    sum(r.cuda_missing for r in reports), len(reports), ", ".join(runtime.providers) or "nothing")
    return runtime


# ------------------------------------------------------------ the measurement


def loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "n/a"


def measure_runtimes(model_dir, policy_dir, data_dir, prompts: int = 8, max_tokens: int = 64,
                     targets: Sequence[float] = (0.5, 0.7), repeats: int = 3, cache_dir=None, threads: int = 1,
                     split: str = "heldout") -> dict:
    """Decode tokens/s of dense and SOL (each target; the policy sampled,
    seeded, as ``decode.measure``) on torch, with the MLPs on ORT (fp32,
    int8: ``install``) and with each token's whole pass on ORT (fp32, int8:
    ``ort_step``): the
    reasoning after the step of the first ``prompts`` records of ``split``,
    ``max_tokens`` tokens each (no early stop). Every (runtime, mode) is run
    ``repeats`` times, the repeats interleaved; the median run is reported,
    with ``/proc/loadavg`` read before each run."""
    import statistics

    from leir_models.lm import tokenizer as tk
    from leir_models.lm.data import candidate_text, load_records, prompt_text
    from leir_models.lm.store import load_model
    from leir_models.sol import decode
    from leir_models.sol.policy import load_policy

    torch.set_num_threads(threads)
    policy, orders = load_policy(policy_dir)
    records = [r for r in load_records(data_dir)[0] if r.get("split") == split][:prompts]
    from leir_models.sol import ort_step

    ort_policy = ort_step.OrtPolicy(policy, cache_dir, threads=threads)
    models = {}
    # The MLPs alone on ONNX Runtime (``install``), and each token's whole pass (``ort_step``).
    for name, precision, whole in (("torch", None, False), ("onnx fp32", "fp32", False),
                                   ("onnx int8", "int8", False), ("onnx step fp32", "fp32", True),
                                   ("onnx step int8", "int8", True)):
        model, tok = load_model(model_dir)
        decode.prepare(model, orders)
        providers, steps = ["torch (cpu)"], None
        if whole:
            # dense on the plain graphs; SOL on the graphs with the policy inside,
            # and, to show what that saves, with the policy's own graph apart
            steps = (ort_step.load(model, precision, cache_dir, threads=threads),
                     ort_step.load(model, precision, cache_dir, threads=threads, policy=policy))
            providers = steps[0].providers
        elif precision:
            providers = install(model, precision, cache_dir, threads=threads).providers
        models[name] = (model, providers, steps)
    ids = [tk.encode_prompt(tok, prompt_text(r["before"], r["tensors"], r["target"],
                                             (r.get("reasoning_facts") or {}).get("machine") or {}))
           + tk.encode(tok, candidate_text(r["step"])) for r in records]
    # (name, target, which step graphs: 0 plain, 1 with the policy inside)
    modes = [("dense", None, 0), *((f"sol {t:g}", t, 1) for t in targets)]
    apart = [(f"sol {t:g}, policy apart", t, 0) for t in targets]

    def runner_of(model, steps, which):
        return ort_step.OrtPasses(model, steps[which]) if steps is not None else None

    for model, _, steps in models.values():  # warm-up
        for which in ((0, 1) if steps is not None else (0,)):
            decode.generate(model, ids[0], 4, "dense", stop_ids=[], passes=runner_of(model, steps, which))
    runs: dict[tuple[str, str], list[dict]] = {}
    for _ in range(repeats):
        for runtime, (model, _, steps) in models.items():
            for mode, target, which in modes + (apart if steps is not None else []):
                load = loadavg()
                if target is None:
                    done = [decode.generate(model, p, max_tokens, "dense", stop_ids=[],
                                            passes=runner_of(model, steps, which)) for p in ids]
                else:
                    gen = torch.Generator().manual_seed(0)
                    done = [decode.generate(model, p, max_tokens, "sol", policy=policy, target=target,
                                            greedy_policy=False, generator=gen, stop_ids=[],
                                            passes=runner_of(model, steps, which),
                                            policy_logits=ort_policy if steps is not None else None) for p in ids]
                passes = sum(len(d.actions) for d in done)
                seconds = sum(d.seconds - d.prefill_seconds for d in done)
                runs.setdefault((runtime, mode), []).append({
                    "tokens_per_s": passes / seconds, "loadavg": load,
                    "flops_per_token": sum(d.flops_per_token * len(d.actions) for d in done) / passes,
                    "net_keep": sum(d.net_keep * len(d.actions) for d in done) / passes})
    rows = []
    base = None
    for (runtime, mode), got in runs.items():
        speeds = [g["tokens_per_s"] for g in got]
        median = statistics.median(speeds)
        if base is None:
            base = median
        rows.append({"runtime": runtime, "mode": mode, "tokens_per_s": round(median, 1),
                     "runs": [round(s, 1) for s in speeds], "vs_torch_dense": round(median / base, 2),
                     "flops_per_token": round(got[0]["flops_per_token"]), "net_keep": round(got[0]["net_keep"], 4),
                     "loadavg": [g["loadavg"] for g in got]})
    return {"prompts": len(ids), "max_tokens": max_tokens, "repeats": repeats, "threads": threads,
            "providers": {name: p for name, (_, p, _) in models.items()}, "rows": rows,
            "mlp_ms_per_token": {name: mlp_ms_per_token(model) for name, (model, _, steps) in models.items()
                                 if steps is None},
            "policy_ms_per_token": round(policy_step_ms(policy, models["torch"][0]), 3),
            "policy_ms_per_token_onnx": round(policy_step_ms(policy, models["torch"][0], ort_policy), 3)}


@torch.no_grad()
def mlp_ms_per_token(model, repeats: int = 500) -> dict[str, float]:
    """Milliseconds of one token's MLP calls, all layers, at each keep level
    (a ``[1, 1, D]`` input, median of 5 batches of ``repeats``): the part of a
    token's time the keep fraction can save."""
    import statistics

    layers = sliced_layers(model)
    x = torch.randn(1, 1, model.config.hidden_size, generator=torch.Generator().manual_seed(0))
    out = {}
    for keep in MLP_LEVELS:
        knobs.set_keep(model, keep)
        times = []
        for _ in range(5):
            start = time.perf_counter()
            for _ in range(repeats):
                for m in layers:
                    m(x)
            times.append((time.perf_counter() - start) / repeats * 1e3)
        out[f"{keep:g}"] = round(statistics.median(times), 3)
    knobs.set_keep(model, 1.0)
    return out


def policy_step_ms(policy, model, logits_of=None, repeats: int = 2000) -> float:
    """Milliseconds of one policy step in the decode loop (features, forward,
    sampling: ``decode.Chooser``), its forward on torch or on ``logits_of``
    (``ort_step.OrtPolicy``)."""
    from leir_models.sol import decode

    chooser = decode.Chooser(policy, 0.5, int(model.config.intermediate_size), logits_of)
    hidden = torch.zeros(model.config.hidden_size)
    embedding = decode.embed(model, 3)
    generator = torch.Generator().manual_seed(0)
    start = time.perf_counter()
    for _ in range(repeats):
        a, _ = chooser.choose(chooser.features(hidden, embedding), False, generator)
        chooser.advance(a)
    return (time.perf_counter() - start) / repeats * 1e3


def measure_ranking(model_dir, policy_dir, data_dir, split: str = "heldout", cache_dir=None, threads: int = 1,
                    variants: Sequence[tuple[str, str | None, float]] = (
                        ("torch", None, 1.0), ("torch", None, 0.75), ("torch", None, 0.5),
                        ("onnx", "fp32", 1.0), ("onnx", "int8", 1.0), ("onnx", "int8", 0.75),
                        ("onnx", "int8", 0.5))) -> dict:
    """The ranking figures of ``leir_models.lm.evaluate`` (top-1 agreement
    with the measured-best step, ...) with the ranker's MLPs at a fixed keep
    on torch or ONNX Runtime (the ranker reads all candidates at once, so a
    per-token policy does not apply: a static keep is what it can use), and
    the share of states whose top-1 legal step is the dense torch ranker's,
    and the seconds the scoring took."""
    from leir_models.lm.data import load_states
    from leir_models.lm.evaluate import evaluate
    from leir_models.lm.ranker import ModelRanker
    from leir_models.lm.store import load_model
    from leir_models.sol import decode
    from leir_models.sol.policy import load_policy

    torch.set_num_threads(threads)
    _, orders = load_policy(policy_dir)
    states = [s for s in load_states(data_dir)[0] if split == "all" or s.split == split]

    class AtKeep(ModelRanker):
        def __init__(self, model, tok, keep):
            super().__init__(model, tok, f"keep {keep:g}")
            self.keep, self.tops, self.seconds = keep, [], 0.0

        def score(self, ctx, steps, target):
            knobs.set_keep(self.model, self.keep)
            start = time.perf_counter()
            try:
                out = super().score(ctx, steps, target)
            finally:
                knobs.set_keep(self.model, 1.0)
            self.seconds += time.perf_counter() - start
            self.tops.append(max(range(len(out)), key=lambda i: out[i][0]) if out else None)
            return out

    rankers, models = {}, {}
    for runtime, precision, keep in variants:
        key = (runtime, precision)
        if key not in models:
            model, tok = load_model(model_dir)
            decode.prepare(model, orders)
            if runtime == "onnx":
                install(model, precision, cache_dir, threads=threads)
            models[key] = (model, tok)
        model, tok = models[key]
        rankers[f"{runtime}{'' if precision is None else ' ' + precision} keep {keep:g}"] = AtKeep(model, tok, keep)
    figures = evaluate(rankers, states)
    dense = next(iter(rankers.values())).tops
    for name, r in rankers.items():
        same = sum(a == b for a, b in zip(r.tops, dense))
        figures["rankers"][name]["top1_same_as_first"] = round(same / len(dense), 4) if dense else None
        figures["rankers"][name]["seconds"] = round(r.seconds, 2)
    figures["first"] = next(iter(rankers))
    return figures


def main(argv=None) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="python -m leir_models.sol.ort_runtime",
                                description="decode tokens/s, dense and SOL, on torch and on ORT (the MLPs alone, or "
                                            "each token's whole pass; fp32 and int8)")
    p.add_argument("--model", required=True, metavar="DIR")
    p.add_argument("--policy", required=True, metavar="DIR")
    p.add_argument("--data", default="tests/data/dataset", metavar="DIR")
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--cache-dir", metavar="DIR")
    p.add_argument("--ranking", action="store_true", help="the ranking figures at each keep and runtime instead")
    p.add_argument("--split", default="heldout")
    args = p.parse_args(argv)
    if args.ranking:
        print(json.dumps(measure_ranking(args.model, args.policy, args.data, args.split, args.cache_dir,
                                         args.threads), indent=1))
        return 0
    print(json.dumps(measure_runtimes(args.model, args.policy, args.data, args.prompts, args.max_tokens,
                                      repeats=args.repeats, cache_dir=args.cache_dir, threads=args.threads),
                     indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
