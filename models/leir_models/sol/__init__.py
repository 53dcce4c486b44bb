"""Per-token compute allocation after SOL (issue 16; docs/sol.md).

``knobs``: the MLP keep fraction as a physically smaller matrix product
(channels reordered once by importance, then a prefix kept). ``onnx_blocks``:
each MLP variant (keep fraction x fp32/int8) exported to ONNX and run with
ONNX Runtime. Importing this package imports neither torch nor onnxruntime;
its modules do.
"""
