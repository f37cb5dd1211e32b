"""PP-OCR rec 1x3x48xW over widths drawn from 100..1000: shape policies pad (gears 320/640/1000), exact, dynamic and
auto (gert's default: the dynamic graph at once, static graphs for hot widths in the background), one stream with
2 cube cores.

The timed call runs every width once, after a first pass that compiled what the policy needs (its time, the
graphs compiled and the padding ratio are in extra_info). The baseline of the group is exact (a static graph per
width, compiled on first use).
"""

from __future__ import annotations

import time

import numpy as np
import pytest

import gert
from _common import REC, images, read_ppocr, tag

REC_W = "p2o.DynamicDimension.1"
POLICIES = {
    # rec's height axis is an unnamed dim ("?", always 48 here): exact for pad and exact, as W's policy otherwise
    # rec's output time axis is W / 8: padding cannot be sliced off it, taken at the padded size on purpose
    "pad": dict(
        gears={"batch": [1], REC_W: [320, 640, 1000]},
        shape_policy={REC_W: "pad", "?": "exact"},
        output_dims={"softmax_11.tmp_0": {1: None}},
    ),
    "exact": dict(gears={"batch": [1]}, shape_policy={REC_W: "exact", "?": "exact"}),
    "dynamic": dict(gears={"batch": [1]}, shape_policy={REC_W: "dynamic", "?": "dynamic"}),
    "auto": dict(gears={"batch": [1]}),
}


def _padding_ratio(stats: dict) -> float:
    real = padded = 0.0
    for label, g in stats["gears"].items():  # e.g. "?=48,batch=1,p2o.DynamicDimension.1=640"
        sizes = [int(kv.rsplit("=", 1)[1]) for kv in label.split(",")]
        per_hit = 3 * float(np.prod([v for v in sizes if v > 0]))  # padded elements of one request at this gear
        padded += g["hits"] * per_hit
        real += g["hits"] * per_hit * (1 - g["padding_ratio"])
    return 1 - real / padded if padded else 0.0


@pytest.mark.parametrize("policy", ["exact", "pad", "dynamic", "auto"])
def test_rec_policy(benchmark, measuring, policy):
    model = read_ppocr(REC)
    widths = np.random.default_rng(3).integers(100, 1001, 12 if measuring else 2).tolist()
    xs = [images(1, 48, int(w), seed=int(w)) for w in widths]
    tag(
        benchmark,
        f"rec 1x3x48xW, {len(widths)} widths in 100..1000",
        "baseline" if policy == "exact" else "gert",
        requests=len(widths),
    )
    with gert.load(model, streams=1, cube_cores=2, **POLICIES[policy]) as m:
        if policy == "auto":
            m.warmup()  # its dynamic-shape graph, as gert_triton's load does
        t0 = time.perf_counter()
        for x in xs:
            m.run({"x": x})
        first = time.perf_counter() - t0

        def run_all():
            for x in xs:
                m.run({"x": x})

        benchmark.pedantic(run_all, rounds=3 if measuring else 1)
        st = m.stats()
    benchmark.extra_info.update(
        first_pass_s=round(first, 3),
        compiles=st["compiles"],
        padding_ratio=round(_padding_ratio(st), 3),
        widths=sorted(widths),
    )
    if policy == "auto":
        assert st["request_path_compiles"] == 0 and st["compiles"] >= 1
        return
    assert (
        st["compiles"]
        == {
            "pad": len({min(g for g in (320, 640, 1000) if g >= w) for w in widths}),
            "exact": len(set(widths)),
            "dynamic": 1,
        }[policy]
    )
