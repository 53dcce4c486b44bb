"""NumPy references for the bundled LEIR workloads.

One function per ``examples/<stem>.leir``, named ``<stem>``. It takes the
program's ``in`` tensors as keyword arguments by their declared names and
returns ``{output name: array}`` for its ``out`` tensors. Every reference
computes in float64 (int64 for integer programs) and casts to the declared
output dtype at the end, so it is at least as accurate as any LEIR variant it
checks. The CPU and GPU variants compute exactly what their serial program
does and delegate to it.

This module imports nothing but NumPy: tests load it by path with importlib,
and the verifier may run it in a worker without the rest of the project.
"""

from __future__ import annotations

import math

import numpy as np

_F32 = np.float32
_EPS = 1e-05  # torch's default for LayerNorm and BatchNorm

#: Inputs that must be drawn non-negative (running variances, which go under
#: a square root); any other input may take any finite value.
NONNEGATIVE_INPUTS: dict[str, tuple[str, ...]] = {
    "batchnorm": ("rvar",),
    "conv_bn_relu": ("rvar",),
}


def _f64(a: np.ndarray) -> np.ndarray:
    return np.asarray(a, dtype=np.float64)


def _erf(x: np.ndarray) -> np.ndarray:
    # NumPy has no erf and SciPy is not a dependency; math.erf is exact to
    # double precision and these arrays are small.
    return np.vectorize(math.erf, otypes=[np.float64])(x)


def _gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def _softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _conv2d(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Valid (unpadded) NCHW convolution, stride 1: x (N,C,H,W), w (K,C,R,S)."""
    _, _, r, s = w.shape
    windows = np.lib.stride_tricks.sliding_window_view(x, (r, s), axis=(2, 3))  # (N, C, H-R+1, W-S+1, R, S)
    return np.einsum("nchwrs,kcrs->nkhw", windows, w)


def _batchnorm(x, gamma, beta, rmean, rvar):
    """Inference batch norm of NCHW ``x`` with per-channel statistics."""
    c = (slice(None), None, None)  # broadcast (C,) over (N, C, H, W)
    return (x - rmean[c]) / np.sqrt(rvar[c] + _EPS) * gamma[c] + beta[c]


def _attention(q, k, v):
    """softmax(q k^T / sqrt(d)) v over (batch, head, seq, d); k and v may
    have fewer heads than q, each shared by a contiguous group of q heads."""
    group = q.shape[1] // k.shape[1]
    k = np.repeat(k, group, axis=1)
    v = np.repeat(v, group, axis=1)
    scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(q.shape[-1])  # (B, H, S, S)
    return _softmax(scores) @ v  # (B, H, S, D)


# --------------------------------------------------------------- level 1


def matmul(X, W):
    return {"C": (_f64(X) @ _f64(W)).astype(_F32)}


def matmul_cpu(X, W):
    return matmul(X=X, W=W)


def matmul_gpu(X, W):
    return matmul(X=X, W=W)


def matmul_f16(X, W):
    return {"C": (_f64(X) @ _f64(W)).astype(_F32)}


def batched_matmul(X, Y):
    return {"C": (_f64(X) @ _f64(Y)).astype(_F32)}


def conv2d(X, Wt):
    return {"O": _conv2d(_f64(X), _f64(Wt)).astype(_F32)}


def conv2d_cpu(X, Wt):
    return conv2d(X=X, Wt=Wt)


def conv2d_gpu(X, Wt):
    return conv2d(X=X, Wt=Wt)


def depthwise_conv2d(X, Wt):
    x, w = _f64(X), _f64(Wt)
    _, r, s = w.shape
    windows = np.lib.stride_tricks.sliding_window_view(x, (r, s), axis=(2, 3))  # (N, C, H', W', R, S)
    return {"O": np.einsum("nchwrs,crs->nchw", windows, w).astype(_F32)}


def max_pool2d(X):
    # 3x3 window, stride 2
    windows = np.lib.stride_tricks.sliding_window_view(_f64(X), (3, 3), axis=(2, 3))[:, :, ::2, ::2]
    return {"Y": windows.max(axis=(4, 5)).astype(_F32)}


def avg_pool2d(X):
    # 2x2 window, stride 2
    n, c, h, w = X.shape
    blocks = _f64(X).reshape(n, c, h // 2, 2, w // 2, 2)
    return {"Y": blocks.mean(axis=(3, 5)).astype(_F32)}


def softmax(X):
    return {"Y": _softmax(_f64(X), axis=1).astype(_F32)}


def softmax_cpu(X):
    return softmax(X=X)


def softmax_gpu(X):
    return softmax(X=X)


def log_softmax(X):
    x = _f64(X)
    m = x.max(axis=1, keepdims=True)
    y = x - m - np.log(np.exp(x - m).sum(axis=1, keepdims=True))
    return {"Y": y.astype(_F32)}


def layernorm(X, gamma, beta):
    x = _f64(X)
    mean = x.mean(axis=1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=1, keepdims=True)  # biased, as torch
    y = (x - mean) / np.sqrt(var + _EPS) * _f64(gamma) + _f64(beta)
    return {"Y": y.astype(_F32)}


def layernorm_cpu(X, gamma, beta):
    return layernorm(X=X, gamma=gamma, beta=beta)


def layernorm_gpu(X, gamma, beta):
    return layernorm(X=X, gamma=gamma, beta=beta)


def batchnorm(X, gamma, beta, rmean, rvar):
    y = _batchnorm(_f64(X), _f64(gamma), _f64(beta), _f64(rmean), _f64(rvar))
    return {"Y": y.astype(_F32)}


def gelu(X):
    return {"Y": _gelu(_f64(X)).astype(_F32)}


def sum_axis0(X):
    return {"S": _f64(X).sum(axis=0).astype(_F32)}


def sum_axis1(X):
    return {"S": _f64(X).sum(axis=1).astype(_F32)}


def sum_axis2(X):
    return {"S": _f64(X).sum(axis=2).astype(_F32)}


def max_axis1(X):
    return {"Y": _f64(X).max(axis=1).astype(_F32)}


def sum_i32(X):
    # Accumulate in int64 and wrap to int32 at the end, which is what a
    # 32-bit accumulator gives under two's-complement overflow.
    return {"S": np.asarray(X, dtype=np.int64).sum(axis=1).astype(np.int32)}


def transpose(X):
    return {"Y": np.ascontiguousarray(_f64(X).T).astype(_F32)}


# --------------------------------------------------------------- level 2


def gemm_bias_relu(X, W, bias):
    y = _f64(X) @ _f64(W) + _f64(bias)
    return {"Y": np.maximum(y, 0.0).astype(_F32)}


def gemm_bias_relu_cpu(X, W, bias):
    return gemm_bias_relu(X=X, W=W, bias=bias)


def gemm_bias_relu_gpu(X, W, bias):
    return gemm_bias_relu(X=X, W=W, bias=bias)


def conv_bn_relu(X, Wt, gamma, beta, rmean, rvar):
    c = _conv2d(_f64(X), _f64(Wt))
    y = _batchnorm(c, _f64(gamma), _f64(beta), _f64(rmean), _f64(rvar))
    return {"Y": np.maximum(y, 0.0).astype(_F32)}


def gemm_gelu_residual(X, W):
    x = _f64(X)
    return {"Y": (_gelu(x @ _f64(W)) + x).astype(_F32)}


def softmax_matmul(X, W):
    return {"Y": (_softmax(_f64(X), axis=1) @ _f64(W)).astype(_F32)}


def mha_attention(Q, K, V):
    return {"O": _attention(_f64(Q), _f64(K), _f64(V)).astype(_F32)}


def mha_attention_gpu(Q, K, V):
    return mha_attention(Q=Q, K=K, V=V)


def gqa_attention(Q, K, V):
    return {"O": _attention(_f64(Q), _f64(K), _f64(V)).astype(_F32)}
