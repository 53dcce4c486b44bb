"""NumPy references for the benchmark suite's LEIR workloads.

One function per ``bench/workloads/<stem>.leir``, named ``<stem>``. It takes
the program's ``in`` tensors as keyword arguments by their names and returns
``{output name: array}`` for its ``out`` tensors. Every reference computes in
float64 and casts to f32 at the end, so it is at least as accurate as any
LEIR variant it checks. Shapes are read from the inputs, not assumed, so a
reference also checks a copy of its workload with smaller loop extents
(what the tests evaluate for the largest ones); the one size a program
writes as a literal (layernorm's row length, ``1024.0``) is a parameter.

This module imports nothing but NumPy (and ``math``), as
``examples/references.py``: tests and ``bench/suite.py`` load it by path
with importlib.
"""

from __future__ import annotations

import math

import numpy as np

_F32 = np.float32
_EPS = 1e-05  # torch's default for LayerNorm


def _f64(a: np.ndarray) -> np.ndarray:
    return np.asarray(a, dtype=np.float64)


def _erf(x: np.ndarray) -> np.ndarray:
    # NumPy has no erf; math.erf is exact to double precision.
    return np.vectorize(math.erf, otypes=[np.float64])(x)


def _gelu(x: np.ndarray) -> np.ndarray:
    """The exact (erf) gelu, as torch.nn.GELU()."""
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def _conv2d(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Valid NCHW convolution, stride 1, of an already padded x (N,C,H,W) with w (K,C,R,S)."""
    _, _, r, s = w.shape
    windows = np.lib.stride_tricks.sliding_window_view(x, (r, s), axis=(2, 3))  # (N, C, H-R+1, W-S+1, R, S)
    return np.einsum("nchwrs,kcrs->nkhw", windows, w, optimize=True)


# --------------------------------------------------------------- contractions


def matmul_512(X, W):
    return {"C": (_f64(X) @ _f64(W)).astype(_F32)}


def matmul_1024x1024x512(X, W):
    return {"C": (_f64(X) @ _f64(W)).astype(_F32)}


def dense_768(X, W, bias):
    return {"Y": _gelu(_f64(X) @ _f64(W) + _f64(bias)).astype(_F32)}


def dense_3072(X, W, bias):
    return {"Y": _gelu(_f64(X) @ _f64(W) + _f64(bias)).astype(_F32)}


def attention_scores(Q, K):
    # S[b,i,j] = sum_d Q[b,i,d] K[b,j,d]: no 1/sqrt(d) scale in this workload
    return {"S": (_f64(Q) @ _f64(K).transpose(0, 2, 1)).astype(_F32)}


def conv2d_resnet(X, Wt):
    return {"O": _conv2d(_f64(X), _f64(Wt)).astype(_F32)}


def depthwise_conv2d(X, Wt):
    x, w = _f64(X), _f64(Wt)
    _, r, s = w.shape
    windows = np.lib.stride_tricks.sliding_window_view(x, (r, s), axis=(2, 3))  # (N, C, H', W', R, S)
    return {"O": np.einsum("nchwrs,crs->nchw", windows, w).astype(_F32)}


# --------------------------------------------------------------- rows and columns


def softmax_256x1024(X):
    x = _f64(X)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return {"Y": (e / e.sum(axis=1, keepdims=True)).astype(_F32)}


def layernorm_256x1024(X, gamma, beta, row_length: int = 1024):
    """``row_length`` is the literal the program divides by (1024.0): it is
    the row length only when the program is the real-sized one."""
    x = _f64(X)
    mean = x.sum(axis=1, keepdims=True) / row_length
    var = ((x - mean) ** 2).sum(axis=1, keepdims=True) / row_length  # biased, as torch
    y = (x - mean) / np.sqrt(var + _EPS) * _f64(gamma) + _f64(beta)
    return {"Y": y.astype(_F32)}


def column_sum(X):
    return {"S": _f64(X).sum(axis=0).astype(_F32)}
