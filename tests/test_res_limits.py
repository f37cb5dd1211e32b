"""Core (resource) limits: CANN's fallback order stream -> device -> hardware, per-stream values, range checks,
and aclrtUseStreamResInCurrentThread / aclrtGetResInCurrentThread per thread."""

import threading

import pytest

import gert
from _helpers import RUNTIME, run_python_result
from gert import _cann

pytestmark = RUNTIME

CUBE, VECTOR = _cann.RES_CUBE_CORE, _cann.RES_VECTOR_CORE


@pytest.fixture(autouse=True)
def clean_device_limits(device):
    _cann.reset_device_res_limit(0)
    yield
    _cann.reset_device_res_limit(0)


def hw(kind):
    attr = _cann.DEV_ATTR_CUBE_CORE_NUM if kind == CUBE else _cann.DEV_ATTR_VECTOR_CORE_NUM
    return _cann.get_device_info(0, attr)


def test_defaults_are_the_hardware_counts(device):
    with gert.Stream(device) as s:
        assert s.cube_cores == hw(CUBE) >= 1
        assert s.vector_cores == hw(VECTOR) >= 1
        assert _cann.get_device_res_limit(0, CUBE) == hw(CUBE)
        assert _cann.get_device_res_limit(0, VECTOR) == hw(VECTOR)


def test_fallback_order_in_process(device):
    n = hw(CUBE)
    if n < 2:
        pytest.skip("needs at least 2 hardware cube cores to tell the levels apart")
    with gert.Stream(device) as s, gert.Stream(device) as t:
        _cann.set_device_res_limit(0, CUBE, 1)
        assert _cann.get_device_res_limit(0, CUBE) == 1
        assert s.cube_cores == 1 and t.cube_cores == 1  # stream unset -> device
        s.cube_cores = n
        assert s.cube_cores == n and t.cube_cores == 1  # stream set -> stream
        s.reset_limits()
        assert s.cube_cores == 1  # back to the device
        _cann.reset_device_res_limit(0)
        assert s.cube_cores == n and t.cube_cores == n  # back to the hardware


def test_fallback_order_and_per_stream_values():
    res = run_python_result(
        """
        C, V = _cann.RES_CUBE_CORE, _cann.RES_VECTOR_CORE
        d = gert.Device(0)
        s1, s2, s3 = gert.Stream(d), gert.Stream(d), gert.Stream(d)
        out = {"hw": [_cann.get_device_info(0, _cann.DEV_ATTR_CUBE_CORE_NUM),
                      _cann.get_device_info(0, _cann.DEV_ATTR_VECTOR_CORE_NUM)]}
        out["start"] = [s1.cube_cores, s1.vector_cores]
        _cann.set_device_res_limit(0, C, 4)
        out["device_cube"] = [s1.cube_cores, s1.vector_cores, _cann.get_device_res_limit(0, C),
                              _cann.get_device_res_limit(0, V)]
        s1.cube_cores = 2
        s2.cube_cores = 7            # a stream may exceed the device limit, up to the hardware
        s2.vector_cores = 3
        out["streams"] = [[s.cube_cores, s.vector_cores] for s in (s1, s2, s3)]
        out["raw_stream"] = _cann.get_stream_res_limit(s2.handle, V)
        _cann.set_device_res_limit(0, V, 5)
        out["device_vector"] = [[s.cube_cores, s.vector_cores] for s in (s1, s2, s3)]
        s2.reset_limits()
        out["s2_reset"] = [s2.cube_cores, s2.vector_cores]
        _cann.reset_device_res_limit(0)
        out["device_reset"] = [[s.cube_cores, s.vector_cores] for s in (s1, s2, s3)]
        # a device limit set on a device that is then released does not survive the release
        _cann.set_device_res_limit(0, C, 3)
        for s in (s1, s2, s3):
            s.destroy()
        d.close()
        with gert.Device(0) as d2:
            out["after_reopen"] = _cann.get_device_res_limit(0, C)
        emit(out)
    """,
        env={"GERT_HOST_CUBE_CORES": "8", "GERT_HOST_VECTOR_CORES": "6"},
    )
    assert res["hw"] == [8, 6]
    assert res["start"] == [8, 6]  # nothing set: hardware
    assert res["device_cube"] == [4, 6, 4, 6]  # device cube limit; vector still hardware
    assert res["streams"] == [[2, 6], [7, 3], [4, 6]]  # stream values where set, else device, else hardware
    assert res["raw_stream"] == 3
    assert res["device_vector"] == [[2, 5], [7, 3], [4, 5]]
    assert res["s2_reset"] == [4, 5]
    assert res["device_reset"] == [[2, 6], [8, 6], [8, 6]]
    assert res["after_reopen"] == 8


def test_out_of_range_values_are_rejected(device):
    n = hw(CUBE)
    with gert.Stream(device) as s:
        before = s.cube_cores
        for bad in (0, n + 1, 10**6):
            with pytest.raises(gert.AclError) as ei:
                s.cube_cores = bad
            e = ei.value
            assert (e.code, e.name) == (107000, "ACL_ERROR_RT_PARAM_INVALID")
            assert (
                "aclrtSetStreamResLimit" in e.message and f"cube core limit {bad} is out of range [1, {n}]" in e.message
            )
            assert s.cube_cores == before  # unchanged
        with pytest.raises(gert.AclError) as ei:
            s.vector_cores = hw(VECTOR) + 1
        assert "vector core limit" in ei.value.message
        with pytest.raises(OverflowError):
            s.cube_cores = -1
    for bad in (0, n + 1):
        with pytest.raises(gert.AclError) as ei:
            _cann.set_device_res_limit(0, CUBE, bad)
        assert ei.value.code == 107000 and "aclrtSetDeviceResLimit" in ei.value.message
        assert "out of range" in ei.value.message
    assert _cann.get_device_res_limit(0, CUBE) == n
    with pytest.raises(gert.AclError) as ei:
        _cann.set_device_res_limit(0, 7, 1)  # not an aclrtDevResLimitType
    assert ei.value.code == 107000 and "aclrtDevResLimitType" in ei.value.message  # CANN 8.5: 107000
    with pytest.raises(gert.AclError) as ei:
        _cann.set_device_res_limit(gert.device_count(), CUBE, 1)
    assert ei.value.code == 107001


def test_use_in_current_thread_is_per_thread():
    res = run_python_result(
        """
        C, V = _cann.RES_CUBE_CORE, _cann.RES_VECTOR_CORE
        d = gert.Device(0)
        _cann.set_device_res_limit(0, C, 4)
        streams = {"a": gert.Stream(d), "b": gert.Stream(d), "c": gert.Stream(d)}
        streams["a"].cube_cores = 3
        streams["b"].cube_cores = 5
        streams["b"].vector_cores = 2
        barrier = threading.Barrier(4)
        seen = {}

        def worker(name):
            gert.memory_info(d)                     # binds device 0's context in this thread
            if name != "none":
                streams[name].use_in_current_thread()
            barrier.wait()                          # every thread has made its choice
            first = [_cann.get_res_in_current_thread(C), _cann.get_res_in_current_thread(V)]
            barrier.wait()
            if name == "a":
                streams["a"].cube_cores = 6         # a change to the stream shows through
            barrier.wait()
            second = [_cann.get_res_in_current_thread(C), _cann.get_res_in_current_thread(V)]
            if name != "none":
                streams[name].unuse_in_current_thread()
            third = [_cann.get_res_in_current_thread(C), _cann.get_res_in_current_thread(V)]
            seen[name] = [first, second, third]

        ts = [threading.Thread(target=worker, args=(n,)) for n in ("a", "b", "c", "none")]
        for t in ts: t.start()
        for t in ts: t.join(30)
        main = [_cann.get_res_in_current_thread(C), _cann.get_res_in_current_thread(V)]
        streams["c"].use_in_current_thread()
        unuse_other = catch(streams["a"].unuse_in_current_thread)
        streams["c"].destroy()                      # a destroyed stream's binding falls back to the device
        after_destroy = _cann.get_res_in_current_thread(C)
        emit({"seen": seen, "main": main, "unuse_other": unuse_other, "after_destroy": after_destroy})
    """,
        env={"GERT_HOST_CUBE_CORES": "8", "GERT_HOST_VECTOR_CORES": "6"},
    )
    seen = res["seen"]
    assert seen["a"] == [[3, 6], [6, 6], [4, 6]]
    assert seen["b"] == [[5, 2], [5, 2], [4, 6]]
    assert seen["c"] == [[4, 6], [4, 6], [4, 6]]  # uses a stream without limits: device, hardware
    assert seen["none"] == [[4, 6], [4, 6], [4, 6]]
    assert res["main"] == [4, 6]  # other threads' choices do not leak into this one
    code, name, msg = res["unuse_other"]
    assert code == 107000 and "does not use the resources of stream" in msg
    assert res["after_destroy"] == 4


def test_use_in_current_thread_in_process(device):
    n = hw(CUBE)
    if n < 2:
        pytest.skip("needs at least 2 hardware cube cores")
    results = {}
    with gert.Stream(device) as limited, gert.Stream(device) as plain:
        limited.cube_cores = 1

        def worker(name, stream):
            if stream is not None:
                stream.use_in_current_thread()
            else:
                gert.memory_info(device)
            results[name] = _cann.get_res_in_current_thread(CUBE)
            if stream is not None:
                stream.unuse_in_current_thread()

        ts = [threading.Thread(target=worker, args=a) for a in (("limited", limited), ("plain", plain), ("none", None))]
        for t in ts:
            t.start()
        for t in ts:
            t.join(10)
    assert results == {"limited": 1, "plain": n, "none": n}
