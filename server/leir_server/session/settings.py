"""The ``leir`` settings: what they are (``Settings``, with the defaults an
editor gets when it sends none) and how the server gets them.

They are pulled from the client with ``workspace/configuration`` (on
``initialized`` and on every ``workspace/didChangeConfiguration``), or taken
from the notification itself for clients that only push. Values that cannot
be used are reported in the client's log and left at their defaults; a
client that fails the request leaves the settings as they were.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

from lsprotocol import types

from leir.bridge.targets import TARGETS as BUILD_TARGETS

logger = logging.getLogger(__name__)

#: The ``workspace/configuration`` section the server reads.
CONFIG_SECTION = "leir"

#: The targets a program is built for, and "rpc": a device behind a TVM RPC tracker.
TARGETS = (*BUILD_TARGETS, "rpc")

#: ``model.tier``: which local model ranks, as the name of its ranker in
#: ``leir.rankers`` (``leir.tools.ranking.load_ranker``). "embedded": the
#: 5M-parameter model shipped in the package; "smollm2": SmolLM2-135M
#: fine-tuned by the user (docs/model.md, "The larger tier").
MODEL_TIERS = {"embedded": "model", "smollm2": "smollm2"}

#: ``model.sol.runtime``: where the MLPs of the SOL decoding run
#: (``leir_models.sol``): eager torch, or ONNX Runtime (its graphs exported
#: once into a cache, about 20 s for the embedded model).
SOL_RUNTIMES = ("torch", "onnx")
#: ``model.sol.precision``: the ONNX MLPs' weights; int8 needs "onnx".
SOL_PRECISIONS = ("fp32", "int8")
#: ``model.sol.budget`` by default: the SOL policy's net keep target for
#: the reasoning the model writes. At 0.5 the shipped model's held-out
#: perplexity moves by 0.1% and a decoded token costs about a quarter
#: fewer FLOPs (docs/sol.md, "The shipped policy"); in the worker it took
#: as long as dense decoding, within the noise (docs/sol.md, "In the server").
SOL_BUDGET = 0.5


@dataclass(frozen=True)
class Settings:
    """The ``leir`` configuration section, with the defaults an editor gets
    when it sends none."""

    #: Where kernels are measured: this CPU, this machine's NVIDIA GPU, or
    #: devices behind an RPC tracker (``rpc_tracker`` and ``rpc_key``).
    target: str = "llvm"
    rpc_tracker: str = ""  # HOST:PORT
    rpc_key: str = ""
    #: Measure the top suggestions in the background after a change. Off by
    #: default: measuring keeps a core busy, which a laptop user notices.
    auto_measure: bool = False
    #: Most measurements one "optimize" command may spend.
    measurement_budget: int = 24
    #: Rank suggestions with the local model (when one is installed).
    model_enabled: bool = True
    #: Which local model (``MODEL_TIERS``): the embedded one by default, the
    #: larger SmolLM2 one where the user has fine-tuned it.
    model_tier: str = "embedded"
    #: The SOL policy's budget (net keep target, in (0, 1]) for the reasoning
    #: the model worker decodes; None: dense decoding. The ranking is dense
    #: either way.
    model_sol_budget: float | None = SOL_BUDGET
    #: Where that decoding runs (``SOL_RUNTIMES``: torch, or each token's pass on ONNX Runtime) and at which
    #: precision (``SOL_PRECISIONS``).
    model_sol_runtime: str = "torch"
    model_sol_precision: str = "fp32"
    #: Publish the top suggestions on save as Hint diagnostics, for editors
    #: without a code-action menu.
    suggestions_on_save: bool = False
    #: Programs whose memory exceeds it (MB) are refused before anything is
    #: built (``leir.footprint``); None: the default (1000 MB).
    memory_budget_mb: float | None = None

    @classmethod
    def from_json(cls, data: Any) -> tuple["Settings", list[str]]:
        """Settings from a client's section (camelCase keys as VS Code sends
        them), and one message per value that was ignored and why. Unknown
        keys are ignored silently: a newer client may send more."""
        problems: list[str] = []
        if data is None:
            return cls(), problems
        if not isinstance(data, dict):
            return cls(), [f"the '{CONFIG_SECTION}' settings should be an object, got {type(data).__name__}"]
        values: dict[str, Any] = {}

        def take(key: str, attr: str, kind: type, check=None, why: str = "") -> None:
            if key not in data or data[key] is None:
                return
            value = data[key]
            ok = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
            if ok and check is not None:
                ok = check(value)
            if ok:
                values[attr] = value
            else:
                problems.append(f"{CONFIG_SECTION}.{key}: ignored {value!r} ({why or f'expected {kind.__name__}'})")

        take("target", "target", str, lambda v: v in TARGETS, f"expected one of {', '.join(TARGETS)}")
        rpc = data.get("rpc")
        if isinstance(rpc, dict):  # nested form {"rpc": {"tracker": ..., "key": ...}}
            data = {**data, "rpcTracker": rpc.get("tracker"), "rpcKey": rpc.get("key")}
        take("rpcTracker", "rpc_tracker", str, _is_host_port, "expected HOST:PORT")
        take("rpcKey", "rpc_key", str)
        take("autoMeasure", "auto_measure", bool)
        from leir.tools.optimize import MIN_BUDGET  # no TVM or NumPy; read after the initialize reply

        take("measurementBudget", "measurement_budget", int, lambda v: MIN_BUDGET <= v <= 10_000,
             f"expected a whole number from {MIN_BUDGET} to 10000: the start, a candidate and its paired confirmation")
        model = data.get("model")
        if isinstance(model, dict):  # nested form {"model": {"enabled": ..., "tier": ..., "sol": {...}}}
            for key, flat in (("enabled", "modelEnabled"), ("tier", "modelTier")):
                if key in model:
                    data = {**data, flat: model.get(key)}
            sol = model.get("sol")
            if isinstance(sol, dict):
                for key, flat in (("budget", "modelSolBudget"), ("runtime", "modelSolRuntime"),
                                  ("precision", "modelSolPrecision")):
                    if key in sol:
                        data = {**data, flat: sol.get(key)}
        take("modelEnabled", "model_enabled", bool)
        take("modelTier", "model_tier", str, lambda v: v in MODEL_TIERS, f"expected one of {', '.join(MODEL_TIERS)}")
        if "modelSolBudget" in data and data["modelSolBudget"] is None:
            values["model_sol_budget"] = None  # null turns SOL off: unlike other keys, not "the default"
        take("modelSolBudget", "model_sol_budget", (int, float), lambda v: not isinstance(v, bool) and 0 < v <= 1,
             "expected a net keep in (0, 1], or null for dense decoding")
        take("modelSolRuntime", "model_sol_runtime", str, lambda v: v in SOL_RUNTIMES,
             f"expected one of {', '.join(SOL_RUNTIMES)}")
        take("modelSolPrecision", "model_sol_precision", str, lambda v: v in SOL_PRECISIONS,
             f"expected one of {', '.join(SOL_PRECISIONS)}")
        if values.get("model_sol_precision", "fp32") != "fp32" and values.get("model_sol_runtime", "torch") == "torch":
            problems.append(f"{CONFIG_SECTION}.modelSolPrecision: ignored {values.pop('model_sol_precision')!r} "
                            "(int8 needs modelSolRuntime onnx: the torch runtime is fp32)")
        take("suggestionsOnSave", "suggestions_on_save", bool)
        take("memoryBudgetMB", "memory_budget_mb", (int, float), lambda v: not isinstance(v, bool) and 1 <= v <= 10**7,
             "expected a number of megabytes from 1 to 10000000")
        settings = cls(**values)
        if settings.target == "rpc" and not (settings.rpc_tracker and settings.rpc_key):
            problems.append(f"{CONFIG_SECTION}.target is rpc but rpcTracker and rpcKey are not both set; using llvm")
            settings = cls(**{**values, "target": "llvm"})
        return settings, problems

    @property
    def model_ranker(self) -> str:
        """The ranker the model worker loads for ``model_tier``."""
        return MODEL_TIERS[self.model_tier]

    @property
    def model_sol(self) -> tuple[float, str, str] | None:
        """(budget, runtime, precision) of the model worker's SOL decoding;
        None: dense (then runtime and precision do not matter)."""
        if self.model_sol_budget is None:
            return None
        return float(self.model_sol_budget), self.model_sol_runtime, self.model_sol_precision

    @property
    def measure_target(self):
        """What ``leir.measure.MeasurementEngine`` takes: "llvm", "cuda" or
        an ``RPC``."""
        if self.target != "rpc":
            return self.target
        from leir.measure.rpc import RPC

        host, _, port = self.rpc_tracker.rpartition(":")
        return RPC(host, int(port), self.rpc_key)


def _is_host_port(text: str) -> bool:
    host, colon, port = text.rpartition(":")
    return bool(colon and host and port.isdigit() and 1 <= int(port) <= 65535)


#: How long to wait for the client's answer. A client that never answers
#: must not leave a task waiting for ever.
PULL_TIMEOUT_S = 10.0


def client_can_pull(server) -> bool:
    capabilities = server.client_capabilities
    workspace = capabilities.workspace if capabilities is not None else None
    return bool(workspace is not None and workspace.configuration)


async def pull(server) -> None:
    """Ask the client for the ``leir`` section and apply it."""
    params = types.ConfigurationParams(items=[types.ConfigurationItem(section=CONFIG_SECTION)])
    try:
        result = await asyncio.wait_for(server.workspace_configuration_async(params), PULL_TIMEOUT_S)
    except asyncio.CancelledError:
        raise
    except Exception as e:  # noqa: BLE001 - the client's failure is not ours to crash on
        _log(server, types.MessageType.Warning,
             f"could not read the '{CONFIG_SECTION}' settings from the editor ({type(e).__name__}: {e}); "
             "keeping the current ones")
        return
    section = result[0] if isinstance(result, (list, tuple)) and result else None
    apply(server, section)


def apply(server, section) -> None:
    """Replace the session's settings with ``section`` (the client's JSON)."""
    settings, problems = Settings.from_json(section)
    server.session.settings = settings
    for problem in problems:
        _log(server, types.MessageType.Warning, problem)


def _log(server, kind: types.MessageType, message: str) -> None:
    logger.warning(message)
    server.window_log_message(types.LogMessageParams(type=kind, message=message))
