"""gert.LoadConfig (gert/core/load_config.py): every gert.load option checked once, in one place.

Each option's bad values fail naming the option, what it takes and what it got (hypothesis over bad values where a
range fits); gert.load, gert_triton's parse_parameters and `gert bench` build equal configs for equal settings; a
config.pbtxt parameter's bad value fails naming the parameter, with LoadConfig's own words.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, strategies as st
from onnx import helper

import gert
from gert.core.load_config import OPTIONS, LoadConfig, OptionError
from gert.errors import GertError
from gert.tools import bench
from gert_triton.config import LOAD_KEYS, ConfigError, parse_parameters
from models import make_model, vi


def relu_model() -> bytes:
    """y = Relu(x), x [N, W]: a batch dim and one other dynamic dim."""
    return make_model(
        [helper.make_node("Relu", ["x"], ["y"])], [vi("x", np.float32, ["N", "W"])], [vi("y", np.float32, ["N", "W"])]
    )


def strings(**kv) -> dict:
    """config.pbtxt parameters as the Triton stub's JSON has them."""
    return {k: {"string_value": v} for k, v in kv.items()}


# option -> (a bad value, words its error must hold besides the option's name)
BAD = {
    "devices": ((), ["at least one device"]),
    "streams": (0, ["streams must be >= 1, got 0"]),
    "cube_cores": (0, ["cube_cores=0 is out of range"]),
    "vector_cores": (-2, ["vector_cores=-2 is out of range"]),
    "gears": ({"W": [0, 160]}, ["gears for 'W' must be positive integers, got [0, 160]"]),
    "shape_policy": ({"W": "fast"}, ["shape_policy for 'W' is 'fast'", "pad", "auto"]),
    "pad_value": ({"x": "zero"}, ["pad_value for 'x' must be a number", "'zero'"]),
    "max_batch": (0, ["max_batch must be >= 1, got 0"]),
    "options": ({1: "x"}, ["options: key 1 is not a str"]),
    "output_dims": ({"y": ["N"]}, ["output_dims for 'y'", "['N']"]),
    "max_exact_graphs": (0, ["max_exact_graphs must be >= 1, got 0"]),
    "split_batch": ("yes", ["split_batch must be True or False", "'yes'"]),
    "request_timeout_s": (0, ["request_timeout_s must be > 0 seconds, got 0"]),
    "hot_after": (0, ["hot_after must be >= 1, got 0"]),
    "hot_window": (2, ["hot_window must be >= hot_after (4), got 2"]),
    "compile_share": (1.5, ["compile_share must be in (0, 1], got 1.5"]),
    "state": ({"h": 3}, ["state must map each state input", "3"]),
    "batch_dim": (5, ["batch_dim must be a dim name", "5"]),
    "sequence_wait_s": (-1, ["sequence_wait_s must be >= 0, got -1"]),
    "cache_dir": (3, ["cache_dir must be a path, got int"]),
    "cache_mode": ("0777", ["cache_mode: 0o777 lets every user write"]),
    "trust_foreign_entries": (None, ["trust_foreign_entries must be True or False", "None"]),
    "cann_ops": ("loud", ["cann_ops: expected one of warn, strict, off, got 'loud'"]),
    "precision_mode": ("fp8", ["precision_mode: 'fp8' is not a GE precision mode"]),
    "keep_fp32": ([1], ["keep_fp32 must be node names or op types, got [1]"]),
    "dynamic_batching": ({"max_wait": 1}, ["dynamic_batching: unknown setting(s) ['max_wait']"]),
    "host_memory": (-1, ["host_memory must be >= 0 bytes, got -1"]),
    "rows_independent": (3, ["rows_independent must be True, False or output names", "3"]),
    "load_analysis": ("subprocess", ["load_analysis", "'inline' or 'process'", "'subprocess'"]),
    "fallback": ("gpu", ["fallback: expected None or 'cpu', got 'gpu'"]),
}


def test_every_option_has_a_bad_value_here():
    assert set(BAD) == set(OPTIONS)


@pytest.mark.parametrize("option", sorted(BAD))
def test_a_bad_value_is_named_with_what_it_takes_and_got(option):
    value, words = BAD[option]
    with pytest.raises(OptionError) as e:
        LoadConfig.from_kwargs(**{option: value})
    assert e.value.option == option and isinstance(e.value, GertError)
    for w in [option] + words:
        assert w in str(e.value), str(e.value)


@pytest.mark.parametrize("option", ["streams", "hot_after", "max_exact_graphs", "max_batch", "cube_cores"])
@given(value=st.one_of(st.integers(max_value=0), st.floats(allow_nan=False), st.text(max_size=4), st.booleans()))
def test_counts_take_ints_of_at_least_one(option, value):
    with pytest.raises(OptionError) as e:
        LoadConfig.from_kwargs(**{option: value})
    assert e.value.option == option and option in str(e.value) and repr(value) in str(e.value)


@given(share=st.one_of(st.floats(max_value=0.0), st.floats(min_value=1.0, exclude_min=True)))
def test_compile_share_outside_its_range(share):
    with pytest.raises(OptionError, match=r"compile_share must be in \(0, 1\]"):
        LoadConfig(compile_share=share)


@given(sizes=st.lists(st.integers(max_value=0), min_size=1, max_size=4), good=st.lists(st.integers(1, 64)))
def test_gears_with_a_size_below_one(sizes, good):
    with pytest.raises(OptionError, match="gears for 'W' must be positive integers"):
        LoadConfig(gears={"W": good + sizes})


@given(policy=st.text(max_size=8).filter(lambda p: p not in ("pad", "exact", "dynamic", "auto")))
def test_unknown_shape_policies(policy):
    with pytest.raises(OptionError) as e:
        LoadConfig(shape_policy={"W": policy})
    assert f"shape_policy for 'W' is {policy!r}" in str(e.value)


def test_an_unknown_keyword_is_a_type_error_naming_it():
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'streems' \(did you mean 'streams'\?\)"):
        gert.load(relu_model(), streems=2)
    with pytest.raises(TypeError, match="unexpected keyword argument 'colour'"):
        LoadConfig().replace(colour="red")


def test_values_are_normalised_so_equal_settings_are_equal():
    a = LoadConfig.from_kwargs(
        devices=[0],
        gears={"W": [320, 160, 160]},
        host_memory="1GB",
        cache_mode="0770",
        cann_ops=" Strict",
        keep_fp32=["Mul"],
        dynamic_batching={"max_queue_delay_ms": 1},
        options={"ge.x": 1},
        batch_dim=["x:1"],
    )
    b = LoadConfig(
        devices=(0,),
        gears={"W": (160, 320)},
        host_memory=1 << 30,
        cache_mode=0o770,
        cann_ops="strict",
        keep_fp32=("Mul",),
        dynamic_batching=a.dynamic_batching,
        options={"ge.x": "1"},
        batch_dim=("x:1",),
    )
    assert a == b and a.replace() == a and dataclasses.replace(a) == a
    assert LoadConfig(dynamic_batching=False).dynamic_batching is None and LoadConfig(state={}).state is None


SETTINGS = dict(
    streams=2,
    cube_cores=1,
    gears={"batch": [1, 4], "W": [160, 320]},
    shape_policy={"W": "pad"},
    pad_value=-1.0,
    max_batch=4,
    hot_after=2,
    hot_window=64,
    max_exact_graphs=4,
    compile_share=0.5,
    host_memory="1GB",
    cann_ops="off",
    precision_mode="force_fp16",
    keep_fp32=("Mul",),
    request_timeout_s=0.25,
    split_batch=True,
)
TRITON = strings(
    streams="2",
    cube_cores="1",
    gears="batch:1,4;W:160,320",
    shape_policy="W:pad",
    pad_value="-1",
    max_batch="4",
    hot_after="2",
    hot_window="64",
    max_exact_graphs="4",
    compile_share="0.5",
    host_memory="1GB",
    cann_ops="OFF",
    precision_mode="force_fp16",
    keep_fp32="Mul",
    request_timeout_ms="250",
    split_batch="true",
    device_ids="0",
    **{"ge.opt": "1"},
)


def test_gert_load_and_triton_parameters_build_equal_configs():
    expected = LoadConfig.from_kwargs(**SETTINGS)
    assert parse_parameters(TRITON).load_config() == expected.replace(options={"global.ge.opt": "1"})
    with gert.load(relu_model(), **SETTINGS) as model:
        assert model.load_config == expected
    with gert.load(relu_model(), config=LoadConfig(streams=2), max_batch=2) as model:
        assert model.load_config == LoadConfig(streams=2, max_batch=2)  # keywords over the config's fields


def test_bench_builds_the_config_gert_load_takes():
    gears, policy = {"W": [160, 320]}, {"W": "pad"}
    made = bench.load_config((0,), gears, policy, (1, 4, None), "force_fp16")
    assert made == LoadConfig(gears=gears, shape_policy=policy, max_batch=4, precision_mode="force_fp16")
    triton = parse_parameters(
        strings(gears="W:160,320", shape_policy="W:pad", max_batch="4", precision_mode="force_fp16")
    )
    assert triton.load_config() == made
    with gert.load(relu_model(), config=made) as model:
        assert model.load_config == made
    with pytest.raises(bench.BenchArgError, match="cannot load the model with these settings: gears for 'W'"):
        bench.sweep(relu_model(), gears={"W": [0]}, iterations=1)


# config.pbtxt parameter -> a text LoadConfig refuses (its syntax is right), and LoadConfig's words after the name
TRITON_BAD = {
    "streams": ("0", "must be >= 1, got 0"),
    "hot_after": ("0", "must be >= 1, got 0"),
    "hot_window": ("2", "must be >= hot_after (4), got 2"),
    "max_exact_graphs": ("0", "must be >= 1, got 0"),
    "max_batch": ("-3", "must be >= 1, got -3"),
    "compile_share": ("2", "must be in (0, 1], got 2.0"),
    "host_memory": ("2XB", "must be a number of bytes"),
    "cache_mode": ("0600", "owner needs rwx"),
    "cann_ops": ("loud", "expected one of warn, strict, off, got 'loud'"),
    "precision_mode": ("half", "'half' is not a GE precision mode"),
    "gears": ("W:0,160", "gears for 'W' must be positive integers, got [0, 160]"),
    "shape_policy": ("W:teleport", "shape_policy for 'W' is 'teleport'"),
    "device_ids": ("-1", "devices must be device ids (ints >= 0), got (-1,)"),
    "request_timeout_ms": ("-5", "request_timeout_s must be > 0 seconds"),
    "cube_cores": ("0", "cube_cores=0 is out of range"),
}


@pytest.mark.parametrize("key", sorted(TRITON_BAD))
def test_a_bad_parameter_is_named_with_load_configs_words(key):
    text, words = TRITON_BAD[key]
    with pytest.raises(ConfigError) as e:
        parse_parameters(strings(**{key: text}))
    assert str(e.value).startswith(f"parameter '{key}': ") and words in str(e.value), str(e.value)
    assert not str(e.value).startswith((f"parameter '{key}': {key}: ", f"parameter '{key}': {key} must")), str(e.value)


def test_every_load_parameter_sets_a_load_config_field():
    assert set(LOAD_KEYS.values()) <= set(OPTIONS)
    assert parse_parameters({}).load_config() == LoadConfig()
