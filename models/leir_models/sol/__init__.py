"""Per-token compute allocation after SOL (issue 16; docs/sol.md).

``knobs``: the MLP keep fraction as a physically smaller matrix product
(channels reordered once by importance, then a prefix kept). ``onnx_blocks``:
each MLP variant (keep fraction x fp32/int8) exported to ONNX and run with
ONNX Runtime. ``policy``: ``SolPolicy``, the small network that picks each
token's keep fraction (``ACTIONS``, ``net_keep``, ``load_policy``).
``decode``: the decode loop (dense prefill, then one token at a time at the
policy's, a static or the dense keep; ``generate``) and the teacher-forced
scoring of a schedule (``teacher_forced``, the cache restored between
rollouts and replayed densely after an episode). ``train``: ``train_sol``,
SOL's counterfactual-group training and the evaluation at matched budgets
(``leir model train-sol``). ``ort_runtime``: the decode loop's MLPs run by
ONNX Runtime sessions (fp32 or int8, the providers really in use reported).
``generate``: ``leir model generate``, the model's step and its reasoning
decoded under the policy. Importing this package imports neither torch
nor onnxruntime; its modules do.
"""

__all__ = ["decode", "generate", "knobs", "onnx_blocks", "ort_runtime", "policy", "train"]
