"""Query the example model served by `gert serve examples/model_repository` over HTTP and gRPC.

    gert serve examples/model_repository &      # HTTP 8000, gRPC 8001, metrics 8002
    python examples/client.py
"""
import sys

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

MODEL = "tiny_classifier"
x = np.random.default_rng(0).standard_normal((3, 16)).astype(np.float32)

http = httpclient.InferenceServerClient("127.0.0.1:8000")
if not http.is_model_ready(MODEL):
    sys.exit(f"{MODEL} is not ready: start `gert serve examples/model_repository` first")
print(http.get_model_metadata(MODEL))

inp = httpclient.InferInput("features", list(x.shape), "FP32")
inp.set_data_from_numpy(x)
print("HTTP:", http.infer(MODEL, [inp]).as_numpy("probs"))

grpc = grpcclient.InferenceServerClient("127.0.0.1:8001")
inp = grpcclient.InferInput("features", list(x.shape), "FP32")
inp.set_data_from_numpy(x)
print("gRPC:", grpc.infer(MODEL, [inp]).as_numpy("probs"))
