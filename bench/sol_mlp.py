"""Does the MLP keep fraction (and int8) really save time? A SmolLM2-135M-
shaped MLP stack (hidden 576, intermediate 1536, 30 layers, random weights),
one token at a time (batch 1), single thread.

Per keep level (1.0/0.75/0.5): the dense torch stack, the sliced torch
forward (``knobs.sliced_mlp_forward``: weight views), and the exported ORT
graphs in fp32 and int8 (``onnx_blocks``). Prints the median time of one
pass through the 30 layers, its ratio to dense torch, and the load average.

    python bench/sol_mlp.py [--repeats N] [--layers L]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import torch
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaMLP

from leir_models.sol import knobs, onnx_blocks


def median_seconds(fn, repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--layers", type=int, default=30)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    config = LlamaConfig(hidden_size=576, intermediate_size=1536, hidden_act="silu")
    stack = [LlamaMLP(config).eval() for _ in range(args.layers)]
    x = torch.randn(1, 1, config.hidden_size)
    rows = []
    with torch.no_grad(), tempfile.TemporaryDirectory() as tmp:
        dense = median_seconds(lambda: [m(x) for m in stack], args.repeats)
        provider = None
        for keep in knobs.MLP_LEVELS:
            sliced = median_seconds(lambda: [knobs.sliced_mlp_forward(m, x, keep) for m in stack], args.repeats)
            row = {"keep": keep, "torch dense": dense, "torch sliced": sliced}
            for precision in onnx_blocks.PRECISIONS:
                sessions = []
                for i, m in enumerate(stack):
                    n = knobs.keep_width(config.intermediate_size, keep)
                    path = onnx_blocks.export_mlp(m, f"{tmp}/l{i}_k{n}.onnx", keep)
                    if precision == "int8":
                        path = onnx_blocks.quantize_int8(path, f"{tmp}/l{i}_k{n}_int8.onnx")
                    session, report = onnx_blocks.ort_session(path, threads=1)
                    provider = report.primary
                    sessions.append(session)
                feed = {onnx_blocks.INPUT_NAME: x.numpy()}
                row[f"ort {precision}"] = median_seconds(lambda: [s.run(None, feed) for s in sessions], args.repeats)
            rows.append(row)
    columns = ["torch dense", "torch sliced", "ort fp32", "ort int8"]
    print(f"{args.layers} MLP layers (576 -> 1536 -> 576), batch 1, 1 thread, median of {args.repeats}; "
          f"ORT provider in use: {provider}")
    print("keep  " + "  ".join(f"{c:>20}" for c in columns))
    for row in rows:
        cells = [f"{row[c] * 1e3:8.3f} ms ({dense / row[c]:4.2f}x)" for c in columns]
        print(f"{row['keep']:<5} " + "  ".join(f"{c:>20}" for c in cells))
    print("load average (1, 5, 15 min): " + ", ".join(f"{v:.2f}" for v in os.getloadavg()))


if __name__ == "__main__":
    main()
