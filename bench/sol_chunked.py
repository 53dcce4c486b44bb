"""One step graph for every keep level, against one graph per level
(``ort_step``), on ONNX Runtime: does sharing the MLP weights pay when the
keep changes from token to token? (docs/sol.md, "One graph for every keep")

The shared graph is ``ort_step.DecodeStep`` with each layer's MLP cut into
channel chunks at the keep levels' widths ([0, n(0.5)), [n(0.5), n(0.75)),
[n(0.75), I)), the gate and up rows of a chunk in one product; the first
chunk always runs, each further one under an ONNX ``If`` on an ``action``
input (``torch.cond`` in the exported module): keep k runs the chunks
below n(k), so every level reads the same weights, quantized once. Each
graph's logits are checked against the torch ``DecodeStep`` at every level,
then one pass at ``--past`` positions is timed (median of 5 batches of
``--repeats`` session runs, plain ``session.run``, the same inputs for both)
all at keep 1, all at 0.5, alternating 1 and 0.5, and in a seeded random
1/0.5 order, each twice, turn about.

    python bench/sol_chunked.py [--model DIR] [--policy DIR] [--out DIR] [--past 128] [--repeats 300]
"""
import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

from leir_models.lm.store import load_model
from leir_models.sol import decode, knobs, onnx_blocks, ort_step
from leir_models.sol.policy import load_policy

torch.set_num_threads(1)


class Piece(nn.Module):
    def __init__(self, mlp, lo, hi):
        super().__init__()
        d = mlp.gate_proj.in_features
        self.w = hi - lo
        self.gate_up = nn.Linear(d, 2 * self.w, bias=False)
        self.down = nn.Linear(self.w, d, bias=False)
        with torch.no_grad():
            self.gate_up.weight.copy_(torch.cat((mlp.gate_proj.weight[lo:hi], mlp.up_proj.weight[lo:hi])))
            self.down.weight.copy_(mlp.down_proj.weight[:, lo:hi])
        self.act = mlp.act_fn

    def forward(self, x):
        gu = self.gate_up(x)
        return self.down(self.act(gu[..., :self.w]) * gu[..., self.w:])


class Chunked(nn.Module):
    def __init__(self, mlp, bounds):
        super().__init__()
        self.pieces = nn.ModuleList(Piece(mlp, a, b) for a, b in zip(bounds, bounds[1:]))

    def forward(self, x, action):
        y = self.pieces[0](x)
        p1, p2 = self.pieces[1], self.pieces[2]
        y = torch.cond(action[0] <= 1, lambda x, y: y + p1(x), lambda x, y: y.clone(), (x, y))
        y = torch.cond(action[0] <= 0, lambda x, y: y + p2(x), lambda x, y: y.clone(), (x, y))
        return y


class ChunkStep(ort_step.DecodeStep):
    def __init__(self, model):
        super().__init__(model, 1.0)
        inter = model.config.intermediate_size
        bounds = [0, knobs.keep_width(inter, 0.5), knobs.keep_width(inter, 0.75), inter]
        for layer, src in zip(self.layers, model.model.layers):
            layer.mlp = Chunked(ort_step._mlp(src.mlp), bounds)

    def forward(self, embedded, position, action, *caches):
        heads, kv_heads, hd = self.heads, self.kv_heads, self.head_dim
        group, n_layers = heads // kv_heads, len(self.layers)
        past_keys, past_values = caches[:n_layers], caches[n_layers:]
        x = embedded
        freqs = position.to(torch.float32)[:, None] * self.inv_freq[None, :]
        angles = torch.cat((freqs, freqs), dim=-1)
        cos, sin = angles.cos() * self.rope_scaling, angles.sin() * self.rope_scaling
        capacity = past_keys[0].shape[-1]
        masked = torch.arange(capacity) >= position
        scale = hd ** -0.5
        new_keys, new_values = [], []
        for i, layer in enumerate(self.layers):
            h = self._rms(layer.norm_in, x)
            q = self._rotate(layer.q(h).reshape(heads, hd), cos, sin)
            k = self._rotate(layer.k(h).reshape(kv_heads, hd), cos, sin)
            v = layer.v(h).reshape(kv_heads, hd)
            qg = q.reshape(kv_heads, group, hd) * scale
            past = torch.matmul(qg, past_keys[i]).masked_fill(masked, float("-inf"))
            own = (qg * k[:, None, :]).sum(-1, keepdim=True)
            probs = torch.softmax(torch.cat((past, own), dim=-1), dim=-1)
            out = torch.matmul(probs[..., :-1], past_values[i]) + probs[..., -1:] * v[:, None, :]
            x = x + layer.o(out.reshape(1, heads * hd))
            x = x + layer.mlp(self._rms(layer.norm_post, x), action)
            new_keys.append(k)
            new_values.append(v)
        hidden = self._rms(self.norm, x)
        return self.head(hidden), hidden, torch.stack(new_keys), torch.stack(new_values)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="models/leir_models/lm/data")
    parser.add_argument("--policy", default="models/leir_models/lm/data/sol", help="for its channel order")
    parser.add_argument("--out", help="where the graphs go (default: a temporary directory)")
    parser.add_argument("--past", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=300)
    args = parser.parse_args(argv)
    model, _ = load_model(args.model)
    _, orders = load_policy(args.policy)
    decode.prepare(model, orders)
    step = ChunkStep(model).float().eval()
    L, kv, hd = len(step.layers), step.kv_heads, step.head_dim
    tmp = Path(args.out or tempfile.mkdtemp())
    tmp.mkdir(parents=True, exist_ok=True)
    cap = 7
    keys = [torch.zeros(kv, hd, cap) for _ in range(L)]
    values = [torch.zeros(kv, cap, hd) for _ in range(L)]
    example = (torch.zeros(1, 256), torch.tensor([3]), torch.tensor([0]), *keys, *values)
    c = torch.export.Dim("capacity", min=1)
    dyn = (None, None, None, (*({2: c} for _ in keys), *({1: c} for _ in values)))
    names = ["embedded", "position", "action", *(f"keys_{i}" for i in range(L)), *(f"values_{i}" for i in range(L))]
    fp32 = tmp / "chunk_fp32.onnx"
    int8 = tmp / "chunk_int8.onnx"
    if not fp32.exists():
        with torch.no_grad():
            torch.onnx.export(step, example, str(fp32), dynamo=True, input_names=names,
                              output_names=list(ort_step.OUTPUTS), dynamic_shapes=dyn, external_data=False)
    if not int8.exists():
        onnx_blocks.quantize_int8(fp32, int8)
    import onnx

    g = onnx.load(str(int8))
    ops = {}

    def count(graph):
        for n in graph.node:
            ops[n.op_type] = ops.get(n.op_type, 0) + 1
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    count(a.g)
    count(g.graph)
    print("int8 graph's operators (subgraphs included):", ops)
    # check against torch per action
    past = args.past
    gen = torch.Generator().manual_seed(0)
    K = [torch.randn(kv, hd, past, generator=gen) for _ in range(L)]
    V = [torch.randn(kv, past, hd, generator=gen) for _ in range(L)]
    emb = torch.randn(1, 256, generator=gen)
    sessions = {}
    for prec, path in (("fp32", fp32), ("int8", int8)):
        sessions[prec] = onnx_blocks.ort_session(path, ["CPUExecutionProvider"], 1)[0]
    per = {prec: ort_step.load(model, prec, tmp / "per", threads=1) for prec in ("fp32", "int8")}
    for a, keep in enumerate((1.0, 0.75, 0.5)):
        ref = ort_step.DecodeStep(model, keep).float().eval()
        with torch.no_grad():
            want = ref(emb, torch.tensor([past]), *K, *V)[0]
        feed = dict(zip(names, [emb.numpy(), np.array([past]), np.array([a]), *[t.numpy() for t in K],
                                *[t.numpy() for t in V]]))
        for prec in ("fp32", "int8"):
            got = sessions[prec].run(["logits"], feed)[0]
            print(prec, keep, "max abs diff vs torch", float(np.abs(got - want.numpy()).max()))

    def timeit(fn, schedule, repeats=args.repeats):
        batches = []
        for _ in range(5):
            t = time.perf_counter()
            for i in range(repeats):
                fn(schedule[i % len(schedule)])
            batches.append((time.perf_counter() - t) / repeats * 1e3)
        return statistics.median(batches)
    base = [emb.numpy(), np.array([past]), *[t.numpy() for t in K], *[t.numpy() for t in V]]
    schedules = {"all 1": [0], "all 0.5": [2], "alternate 1/0.5": [0, 2],
                 "random 1/0.5": [int(x) for x in torch.randint(0, 2, (300,), generator=gen) * 2]}
    for prec in ("fp32", "int8"):
        sess = sessions[prec]
        feeds = {a: dict(zip(names, [base[0], base[1], np.array([a]), *base[2:]])) for a in range(3)}
        pnames = ort_step.input_names(L)
        pfeed = dict(zip(pnames, base))
        keeps = (1.0, 0.75, 0.5)

        def chunk(a, sess=sess, feeds=feeds):
            sess.run(None, feeds[a])

        def separate(a, prec=prec, keeps=keeps, pfeed=pfeed):
            per[prec].sessions[keeps[a]].run(None, pfeed)
        for name, sched in schedules.items():
            for _ in range(2):
                row = {}
                for label, fn in (("one chunked graph", chunk), ("a graph per keep", separate)):
                    row[label] = round(timeit(fn, sched), 3)
                print(prec, name, row, open("/proc/loadavg").read().split()[0], flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
