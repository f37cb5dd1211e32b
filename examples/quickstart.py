"""gert in a notebook: load an ONNX model onto the (host) NPU and run it.

    python examples/quickstart.py
Uses the example model in examples/model_repository (build it again with examples/make_model.py).
"""

import os

import numpy as np
import onnxruntime as ort

import gert

HERE = os.path.dirname(os.path.abspath(__file__))
MODEL = os.path.join(HERE, "model_repository", "tiny_classifier", "1", "model.onnx")

print(f"gert {gert.__version__} on {gert.backend()}, {gert.device_count()} device(s)")

# Two streams, each with its own GE session and graphs; the batch axis is served with gears 1, 2, 4, 8.
with gert.load(MODEL, streams=2, gears={"batch": [1, 2, 4, 8]}) as model:
    print("inputs:", model.inputs)
    print("outputs:", model.outputs)
    model.warmup()  # compile every gear on every stream

    x = np.random.default_rng(0).standard_normal((5, 16)).astype(np.float32)
    probs = model.run({"features": x})["probs"]  # padded to the 8 gear, sliced back to 5 rows
    reference = ort.InferenceSession(MODEL).run(None, {"features": x})[0]
    print("max |gert - onnxruntime|:", float(np.abs(probs - reference).max()))

    futures = [model.submit({"features": x[i : i + 1]}) for i in range(5)]  # concurrent requests
    rows = np.concatenate([f.result()["probs"] for f in futures])
    print("futures agree:", bool(np.allclose(rows, probs, atol=1e-6)))

    big = np.random.default_rng(1).standard_normal((20, 16)).astype(np.float32)
    print("batch of 20 (split over the 8 gear):", model.run({"features": big})["probs"].shape)
    print("stats:", model.stats())
