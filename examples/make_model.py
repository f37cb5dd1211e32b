"""Build the example model: a tiny classifier, features [N, 16] float32 -> probs [N, 4] (Gemm, Relu, Gemm, Softmax).

    python examples/make_model.py [OUT.onnx]
Writes examples/model_repository/tiny_classifier/1/model.onnx by default (fixed seed: the same bytes every time).
"""

import os
import sys

import numpy as np
import onnx
import onnx.helper as oh
import onnx.numpy_helper as nh

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT = os.path.join(HERE, "model_repository", "tiny_classifier", "1", "model.onnx")


def build() -> onnx.ModelProto:
    rng = np.random.default_rng(7)
    w1 = nh.from_array(rng.standard_normal((16, 32)).astype(np.float32) * 0.3, "w1")
    b1 = nh.from_array(rng.standard_normal(32).astype(np.float32) * 0.1, "b1")
    w2 = nh.from_array(rng.standard_normal((32, 4)).astype(np.float32) * 0.3, "w2")
    b2 = nh.from_array(rng.standard_normal(4).astype(np.float32) * 0.1, "b2")
    x = oh.make_tensor_value_info("features", onnx.TensorProto.FLOAT, ["batch", 16])
    y = oh.make_tensor_value_info("probs", onnx.TensorProto.FLOAT, ["batch", 4])
    nodes = [
        oh.make_node("Gemm", ["features", "w1", "b1"], ["h"]),
        oh.make_node("Relu", ["h"], ["r"]),
        oh.make_node("Gemm", ["r", "w2", "b2"], ["logits"]),
        oh.make_node("Softmax", ["logits"], ["probs"]),
    ]
    m = oh.make_model(
        oh.make_graph(nodes, "tiny_classifier", [x], [y], [w1, b1, w2, b2]),
        opset_imports=[oh.make_opsetid("", 17)],
        producer_name="gert-examples",
    )
    m.ir_version = 8  # ONNX Runtime reads IR <= 13 (onnx 1.23 writes 14)
    return m


if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else DEFAULT
    os.makedirs(os.path.dirname(out), exist_ok=True)
    onnx.save(build(), out)
    print(out)
