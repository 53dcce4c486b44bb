"""Do the measurement engine and an in-process timer agree on one program?

For each workload, ``--rounds`` rounds each time the naive program with
three timers, one after the other, so that all three see the same moments
of the machine's load:

- ``engine``: ``MeasurementEngine.measure(use_cache=False)`` (a worker
  process; calibrated calls per run, 7 runs of at least 10 ms; median);
- ``fallback``: ``leir.tools.measuring.FallbackMeasurer`` in this process
  (``time_evaluator`` with ``number=1``, 5 runs of at least 20 ms; median);
- ``in-process``: the engine's own protocol (``leir.measure.timing.
  time_module``) run in this process.

It prints each timer's median over the rounds, the spread of its rounds
((max - min) / median) and the ratio to the engine, with the load average.

    python bench/timer_agreement.py [--workloads batched_matmul,matmul,softmax] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def in_process(analysis) -> float:
    import tvm

    from leir.inputs import random_inputs, zeros
    from leir.measure.timing import time_module
    from leir.bridge.run import compile_program

    compiled = compile_program(analysis, "llvm")
    inputs = random_inputs(analysis, 0)
    args = [tvm.runtime.tensor(inputs[t.name], compiled.device) for t in analysis.inputs()]
    args += [tvm.runtime.tensor(zeros(t), compiled.device) for t in analysis.outputs()]
    compiled.module["main"](*args)
    seconds, _ = time_module(compiled.module, compiled.device, args)
    return statistics.median(seconds) * 1e3


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", default="batched_matmul,matmul,softmax")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    from leir.bridge.targets import kernel_threads

    # Kernels timed in this process run on the threads the measurement
    # engine's workers use (TVM's default is half the CPUs, pinned).
    os.environ.setdefault("TVM_NUM_THREADS", str(kernel_threads()))

    from leir.bridge.document import load_program
    from leir.measure import MeasurementEngine
    from leir.tools.measuring import FallbackMeasurer

    fallback = FallbackMeasurer()
    print("| workload | engine ms | fallback ms | in-process ms | fallback / engine | in-process / engine "
          "| spread of rounds (engine, fallback, in-process) | load average |")
    print("|---|---|---|---|---|---|---|---|")
    with MeasurementEngine("llvm", cache=False, vendor=False) as engine:
        engine.wait_ready()
        for name in args.workloads.split(","):
            analysis, _ = load_program(REPO / "examples" / f"{name}.leir")
            runs = {"engine": [], "fallback": [], "in-process": []}
            loads = [os.getloadavg()[0]]
            for _ in range(args.rounds):
                runs["engine"].append(engine.measure(analysis, use_cache=False).median_ms)
                runs["fallback"].append(fallback([analysis])[0].ms)
                runs["in-process"].append(in_process(analysis))
                loads.append(os.getloadavg()[0])
            med = {k: statistics.median(v) for k, v in runs.items()}
            spread = ", ".join(f"{(max(v) - min(v)) / statistics.median(v):.0%}" for v in runs.values())
            print(f"| {name} | {med['engine']:.3f} | {med['fallback']:.3f} | {med['in-process']:.3f} "
                  f"| {med['fallback'] / med['engine']:.2f} | {med['in-process'] / med['engine']:.2f} | {spread} "
                  f"| {min(loads):.1f}-{max(loads):.1f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
