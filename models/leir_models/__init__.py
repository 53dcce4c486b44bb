"""Language model, SOL policy, training, ONNX export."""
