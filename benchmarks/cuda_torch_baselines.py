"""PyTorch (cuBLAS / cuDNN, TF32 off) on the suite operators of a CUDA bundle: the vendor-library baseline.

Runs on the GPU machine beside `cuda_device_measure.py`, with the same seeded inputs, the same check against the
CPU reference at sampled positions and the same timing (CUDA events, median of repeats of back-to-back runs).

    python benchmarks/cuda_torch_baselines.py --bundle DIR --out torch.jsonl
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cuda_device_measure import output_matches, seeded_inputs  # noqa: E402


def torch_function(builder: str, p: dict):
    """A callable over the task's input tensors (in parameter order) that returns its output, or None."""
    import torch
    import torch.nn.functional as F

    if builder == "gemm":
        return lambda a, b: a @ b
    if builder == "batch_matmul":
        return lambda a, b: torch.bmm(a, b.transpose(1, 2))
    if builder == "dense_bias_gelu":
        return lambda x, w, bias: F.gelu(F.linear(x, w, bias))
    if builder == "conv1d":
        return lambda d, w: F.conv1d(d, w, stride=p["stride"], padding=p["pad"])
    if builder == "conv2d_nchw":
        return lambda d, w: F.conv2d(d, w, stride=p["stride"], padding=p["pad"])
    if builder == "conv2d_nhwc":  # channels-last views: cuDNN runs NHWC, no copies
        return lambda d, w: F.conv2d(d.permute(0, 3, 1, 2), w.permute(3, 2, 0, 1), stride=p["stride"],
                                     padding=p["pad"]).permute(0, 2, 3, 1)
    if builder == "conv2d_bias_relu":
        return lambda d, w, b: F.relu(F.conv2d(d, w, b, stride=p["stride"], padding=p["pad"]))
    if builder == "depthwise_conv2d":
        return lambda d, w: F.conv2d(d, w, stride=p["stride"], padding=p["pad"], groups=p["C"])
    if builder == "conv2d_transpose":
        return lambda d, w: F.conv_transpose2d(d, w, stride=p["stride"], padding=p["pad"])
    if builder == "norm2":
        return lambda a: torch.linalg.vector_norm(a).reshape(1)
    if builder == "softmax":
        return lambda x: torch.softmax(x, -1)
    if builder == "layer_norm":
        return lambda x, g, b: F.layer_norm(x, (p["N"],), g, b, eps=1e-12)
    if builder == "max_pool2d":
        return lambda d: F.max_pool2d(d, p["K"], p["stride"], p["pad"])
    if builder == "avg_pool2d":
        return lambda d: F.avg_pool2d(d, p["K"], p["stride"], p["pad"], count_include_pad=True)
    if builder == "global_avg_pool":
        return lambda d: d.mean(dim=(2, 3), keepdim=True)
    return None


def measure(doc: dict, min_repeat_ms: float, repeats: int) -> dict:
    import torch

    row = {"op": doc["op"], "system": "torch"}
    fn = torch_function(doc["workload"]["builder"], doc["workload"]["params"])
    if fn is None:
        return row | {"error": f"no PyTorch equivalent of {doc['workload']['builder']}"}
    host = seeded_inputs(doc["params"], doc["seed"])
    args = [torch.from_numpy(x).cuda() for p, x in zip(doc["params"], host, strict=True) if not p["written"]]
    written = [p["name"] for p in doc["params"] if p["written"]]
    out = fn(*args)
    warm = torch.ones(2048, 2048, device="cuda")
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < 0.5:  # leave the idle clock before timing, as the kernels' side does
        warm = warm @ warm * (1.0 / 2048)
        torch.cuda.synchronize()
    ref = doc["reference"][written[0]]
    got = out.contiguous().reshape(-1)[torch.as_tensor(ref["index"], device="cuda")].double().cpu().numpy()
    if not output_matches(got, np.asarray(ref["value"])):
        return row | {"error": "wrong result"}
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn(*args)
    stop.record()
    stop.synchronize()
    number = int(min(10000, max(1, math.ceil(min_repeat_ms / max(start.elapsed_time(stop), 1e-3)))))
    times = []
    for _ in range(repeats):
        start.record()
        for _ in range(number):
            fn(*args)
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) * 1e-3 / number)
    return row | {"seconds": float(np.median(times)), "times": times, "number": number}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bundle", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--min-repeat-ms", type=float, default=2.0)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = True  # let cuDNN pick its fastest algorithm, as a tuned deployment would
    ops_dir = os.path.join(args.bundle, "ops")
    with open(args.out, "a") as out:
        for name in sorted(os.listdir(ops_dir)):
            with open(os.path.join(ops_dir, name)) as f:
                doc = json.load(f)
            try:
                row = measure(doc, args.min_repeat_ms, args.repeats)
            except Exception as err:  # noqa: BLE001 - recorded per operator
                row = {"op": doc["op"], "system": "torch", "error": f"{type(err).__name__}: {str(err)[:200]}"}
            row["torch"] = torch.__version__
            out.write(json.dumps(row) + "\n")
            out.flush()
            shown = f"{row['seconds'] * 1e6:9.2f} us" if "seconds" in row else row["error"]
            print(f"torch {doc['op']:20s} {shown}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
