"""Query the example model served by `gert serve examples/model_repository` over HTTP and gRPC.

gert serve examples/model_repository &      # HTTP 8000, gRPC 8001, metrics 8002
python examples/client.py [--http 127.0.0.1:8000] [--grpc 127.0.0.1:8001]
"""

import argparse
import sys

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

MODEL = "tiny_classifier"

ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ap.add_argument("--http", default="127.0.0.1:8000", help="the server's HTTP address")
ap.add_argument("--grpc", default="127.0.0.1:8001", help="the server's gRPC address")
args = ap.parse_args()
x = np.random.default_rng(0).standard_normal((3, 16)).astype(np.float32)

http = httpclient.InferenceServerClient(args.http)
if not http.is_model_ready(MODEL):
    sys.exit(f"{MODEL} is not ready: start `gert serve examples/model_repository` first")
print(http.get_model_metadata(MODEL))

inp = httpclient.InferInput("features", list(x.shape), "FP32")
inp.set_data_from_numpy(x)
by_http = http.infer(MODEL, [inp]).as_numpy("probs")
print("HTTP:", by_http)

grpc = grpcclient.InferenceServerClient(args.grpc)
inp = grpcclient.InferInput("features", list(x.shape), "FP32")
inp.set_data_from_numpy(x)
by_grpc = grpc.infer(MODEL, [inp]).as_numpy("probs")
print("gRPC:", by_grpc)

# the same answer both ways, and a probability distribution per row (the model ends in Softmax)
if not (np.array_equal(by_http, by_grpc) and np.allclose(by_http.sum(axis=1), 1, atol=1e-5)):
    sys.exit("unexpected results")
