# Devices: reference-counted aclInit / aclrtSetDevice / aclrtResetDevice / aclFinalize, and per-thread binding.
import atexit
import threading
from libc.stdint cimport uint64_t
from backend cimport gert_tls_context, gert_tls_set_context

DEF MAX_DEVICES = 64

cdef object _state_lock = threading.RLock()
cdef bint _acl_ready = False          # aclInit done and not finalized
cdef int _open_total = 0              # open Device objects, all devices
cdef int _refs[MAX_DEVICES]           # open Device objects per device
cdef uint64_t _epoch[MAX_DEVICES]     # bumped whenever a device is reset: handles from before are dead
cdef intptr_t _ctx[MAX_DEVICES]       # the device's default context
cdef dict _implicit = {}              # device id -> Device opened on first use, kept for the process


cdef int _ensure_acl() except -1:
    global _acl_ready
    if not _acl_ready:
        init()
        _acl_ready = True
    return 0


cdef int _check_device_id(int device_id) except -1:
    _ensure_acl()
    cdef unsigned int n = get_device_count()
    if device_id < 0 or device_id >= <int>n or device_id >= MAX_DEVICES:
        raise _AclError(ACL_ERROR_RT_INVALID_DEVICEID,
                        f"device {device_id} does not exist: this backend has {n} device(s)")
    return 0


cdef int _bind(int device_id, uint64_t epoch) except -1:
    """Make the device's context current in the calling thread; fail if the device was closed since."""
    if _epoch[device_id] != epoch or _refs[device_id] <= 0:
        raise _AclError(ACL_ERROR_RT_CONTEXT_NULL,
                        f"device {device_id} was closed (its last gert.Device was closed or reset); "
                        "handles created on it are no longer valid")
    cdef void* ctx = <void*>_ctx[device_id]
    if gert_tls_context() != ctx:
        check_status(aclrtSetCurrentContext(ctx))
        gert_tls_set_context(ctx)
    return 0


cdef class Device:
    """An open device: aclInit (first), aclrtSetDevice; close() resets it, the last close also finalizes.

    Reference counted across Device objects: the device is released when the last one closes.
    Use as a context manager to bound its life; handles (streams, buffers, events) created on it
    raise ``AclError`` once it is released.
    """
    cdef readonly int id
    cdef bint _open
    cdef uint64_t _epoch

    def __init__(self, int device_id=0):
        global _open_total
        with _state_lock:
            _check_device_id(device_id)
            set_device(device_id)
            if _refs[device_id] == 0:
                _ctx[device_id] = get_current_context()
            gert_tls_set_context(<void*>_ctx[device_id])
            _refs[device_id] += 1
            _open_total += 1
            self.id = device_id
            self._epoch = _epoch[device_id]
            self._open = True

    @property
    def closed(self) -> bool:
        return not self._open

    def close(self):
        """Release this reference; the last one resets the device (its streams drain, its memory is freed)."""
        global _open_total, _acl_ready
        with _state_lock:
            if not self._open:
                return
            self._open = False
            if self._epoch != _epoch[self.id]:
                return  # the device was already reset under us (aclFinalize)
            _refs[self.id] -= 1
            _open_total -= 1
            if _refs[self.id] == 0:
                _epoch[self.id] += 1
            reset_device(self.id)
            if _open_total == 0:
                _acl_ready = False
                finalize()
                for i in range(MAX_DEVICES):
                    if _refs[i] == 0:
                        _ctx[i] = 0
            gert_tls_set_context(NULL)

    def synchronize(self):
        """Wait for every stream gert created on this device."""
        for s in list(_live_streams.get(self.id, ())):
            if (<Stream>s)._h != NULL:  # a destroyed stream (its object still referenced) has nothing to wait for
                s.synchronize()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return f"<gert.Device {self.id}{' closed' if not self._open else ''}>"


cdef int _device_for(object device, uint64_t* epoch) except -1:
    """Resolve a device argument (None, int or Device) to an open device id, opening it on first use."""
    cdef int dev
    cdef Device d
    if isinstance(device, Device):
        d = <Device>device
        if not d._open:
            raise _AclError(ACL_ERROR_RT_CONTEXT_NULL, f"{d!r} is closed")
        dev = d.id
    else:
        dev = 0 if device is None else int(device)
    with _state_lock:
        if dev < 0 or dev >= MAX_DEVICES or _refs[dev] <= 0:
            _implicit[dev] = Device(dev)  # validates the id
    epoch[0] = _epoch[dev]
    _bind(dev, epoch[0])
    return dev


def device_count() -> int:
    """Number of devices the backend exposes (GERT_HOST_DEVICES on the host NPU)."""
    with _state_lock:
        _ensure_acl()
        return get_device_count()


def _shutdown():
    """At exit: release the devices gert opened implicitly, so streams drain while Python still runs."""
    for d in list(_implicit.values()):
        d.close()
    _implicit.clear()


atexit.register(_shutdown)
