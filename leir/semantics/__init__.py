"""Semantic analysis: the tensor table (declared or inferred) and the
meaning of every equation (plain write, reduction with implied init, or
update of an earlier value), with the checks that need them.

``analyze`` never raises on a parsed program; what is wrong becomes a
diagnostic at the offending node, with related locations where a second
place explains the first.

Checks, by code (errors unless marked as warnings):

- names and scopes: ``duplicate-declaration``, ``name-clash``,
  ``bad-scope``, ``duplicate-loop-var``, ``loop-var-out-of-scope``,
  ``unknown-loop-var``, ``unused-tensor`` (warning);
- types: ``dtype-conflict``, ``scope-conflict``, ``rank-conflict``
  (a tensor with neither declaration nor superscript is f32 in global
  memory: the default that keeps files short), ``type-rule``;
- roles and order: ``write-to-input``, ``never-written``,
  ``read-before-write``, ``reduction-init``, ``repeated-write`` (warning),
  ``guarded-reduction-init``, ``reduction-not-injective``;
- indices and sizes: ``index-out-of-bounds``, ``negative-index``,
  ``shape-not-inferable``, ``tensor-too-large``, ``too-many-iterations``;
- parallel loops: ``race``, ``vectorized-reduction``, ``possible-race``
  (warning), ``vector-not-innermost`` (warning);
- GPU threads: ``bad-thread-axis``, ``thread-extent-mismatch``,
  ``thread-extent-limit``, ``threads-per-block``, ``unbound-on-gpu``
  (warning).

The package, by concern (each pass a function of the shared ``Context``;
``driver`` runs them in order):

- ``model``: the data model (``Analysis``, ``TensorInfo``,
  ``EquationInfo``, ``COMBINER_INIT``);
- ``context``: the state the passes share and their memoised queries;
- ``names``: declarations, and every access collected per tensor;
- ``loops`` and ``gpu``: loop nests, thread axes and CUDA's launch limits;
- ``equations``: each equation's meaning (``classify``'s light path) and
  the order of writes and reads;
- ``races``: races in parallel loops;
- ``tensors`` and ``ranges``: the tensor table with inferred shapes, and
  the range of an index where it runs;
- ``bounds``: indices out of declared shapes;
- ``reductions``: reductions' implied initial values;
- ``driver``: ``analyze`` and ``classify``.
"""

from __future__ import annotations

from leir.semantics.context import ENUMERATION_BUDGET
from leir.semantics.driver import analyze, classify
from leir.semantics.equations import reduction_shape
from leir.semantics.gpu import MAX_THREADS_PER_BLOCK, THREAD_AXIS_LIMITS
from leir.semantics.model import COMBINER_INIT, Analysis, EquationInfo, TensorInfo

__all__ = [
    "COMBINER_INIT",
    "ENUMERATION_BUDGET",
    "MAX_THREADS_PER_BLOCK",
    "THREAD_AXIS_LIMITS",
    "Analysis",
    "EquationInfo",
    "TensorInfo",
    "analyze",
    "classify",
    "reduction_shape",
]
