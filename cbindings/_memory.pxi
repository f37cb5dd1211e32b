# Memory: device buffers (aclrtMalloc) and pinned host buffers (aclrtMallocHost) with the buffer protocol.
cimport cython
from cpython.buffer cimport (PyObject_GetBuffer, PyBuffer_Release, PyBUF_C_CONTIGUOUS, PyBUF_WRITABLE,
                             PyBUF_FORMAT, PyBUF_ND, PyBUF_STRIDES)
from cpython.pycapsule cimport PyCapsule_New, PyCapsule_IsValid, PyCapsule_GetPointer
from libc.stdlib cimport malloc as c_malloc, free as c_free
from libc.stdint cimport int64_t, uint8_t, uint16_t, uint32_t, uint64_t
import dataclasses


cdef extern from "dlpack.h" nogil:
    ctypedef enum DLDeviceType:
        kDLCPU
    ctypedef struct DLDevice:
        DLDeviceType device_type
        int32_t device_id
    ctypedef struct DLDataType:
        uint8_t code
        uint8_t bits
        uint16_t lanes
    ctypedef struct DLTensor:
        void* data
        DLDevice device
        int32_t ndim
        DLDataType dtype
        int64_t* shape
        int64_t* strides
        uint64_t byte_offset
    ctypedef struct DLManagedTensor:
        DLTensor dl_tensor
        void* manager_ctx
        void (*deleter)(DLManagedTensor*)
    ctypedef struct DLPackVersion:
        uint32_t major
        uint32_t minor
    ctypedef struct DLManagedTensorVersioned:
        DLPackVersion version
        void* manager_ctx
        void (*deleter)(DLManagedTensorVersioned*)
        uint64_t flags
        DLTensor dl_tensor
    uint32_t DLPACK_MAJOR_VERSION
    uint32_t DLPACK_MINOR_VERSION



cdef class _HeldBuffer:
    """A Py_buffer kept acquired (the exporter cannot resize or free it) until this object dies."""
    cdef Py_buffer view
    cdef bint held

    def __dealloc__(self):
        if self.held:
            PyBuffer_Release(&self.view)


cdef _HeldBuffer _acquire(obj, bint writable, str what):
    dt = getattr(obj, "dtype", None)
    if dt is not None and getattr(dt, "hasobject", False):
        # The buffer protocol hands out the PyObject pointers themselves: copying them bypasses reference
        # counting, and copying into such an array plants dangling pointers.
        raise TypeError(f"{what}: arrays of Python objects (dtype {dt}) cannot be copied to or from a device")
    cdef _HeldBuffer h = _HeldBuffer.__new__(_HeldBuffer)
    cdef int flags = PyBUF_C_CONTIGUOUS | (PyBUF_WRITABLE if writable else 0)
    try:
        PyObject_GetBuffer(obj, &h.view, flags)
    except (BufferError, ValueError) as e:  # numpy raises ValueError, memoryview and others BufferError
        text = str(e)
        low = text.lower()
        shape = getattr(obj, "shape", None)
        strides = getattr(obj, "strides", None)
        detail = f" (shape {shape}, strides {strides})" if shape is not None else ""
        if writable and ("writ" in low or "read-only" in low or "readonly" in low):
            raise ValueError(f"{what}: the destination {type(obj).__name__} is read-only") from e
        if "contiguous" in low:
            raise ValueError(f"{what}: expected a C-contiguous buffer, got a non-contiguous {type(obj).__name__}"
                             f"{detail}; pass numpy.ascontiguousarray(x)") from e
        raise ValueError(f"{what}: cannot use the buffer of {type(obj).__name__}{detail}: {text}") from e
    except TypeError as e:
        raise TypeError(f"{what}: expected an object with the buffer protocol (numpy array, bytes, HostBuffer, ...),"
                        f" got {type(obj).__name__}") from e
    h.held = True
    return h


@cython.no_gc_clear
cdef class DeviceBuffer:
    """``nbytes`` of device memory (aclrtMalloc), freed when the object dies or on free().

    no_gc_clear: __dealloc__ reads ``_owner`` to know whether the memory is its own. A buffer over memory GE
    allocated, collected in a garbage cycle (an exception's traceback holding the frame that held the output), had
    ``_owner`` set to None by the cycle collector's tp_clear before its __dealloc__, then freed memory its owner
    frees too: a double free."""
    cdef intptr_t _ptr
    cdef readonly size_t nbytes
    cdef readonly int device_id
    cdef uint64_t _epoch
    cdef object _owner  # set when the memory belongs to someone else (e.g. GE): dropped instead of aclrtFree

    def __init__(self, size_t nbytes, device=None):
        self.device_id = _device_for(device, &self._epoch)
        self.nbytes = nbytes
        self._ptr = malloc(nbytes, ACL_MEM_MALLOC_HUGE_FIRST) if nbytes else 0

    cdef int _check(self) except -1:
        if self._ptr == 0 and self.nbytes:
            raise _AclError(ACL_ERROR_RT_PARAM_INVALID, "the DeviceBuffer was freed")
        _bind(self.device_id, self._epoch)
        return 0

    @property
    def ptr(self) -> int:
        """The device address, as an int (0 for an empty or freed buffer)."""
        return self._ptr

    def copy_from(self, src, Stream stream=None):
        """Copy host memory (any C-contiguous buffer) or another DeviceBuffer into the start of this buffer.

        With ``stream`` the copy is queued (H2D or D2D) and ``src`` is kept alive until stream.synchronize().
        """
        self._check()
        cdef size_t n
        cdef intptr_t sp
        cdef int kind
        cdef _HeldBuffer held = None
        if isinstance(src, DeviceBuffer):
            (<DeviceBuffer>src)._check()
            n, sp, kind = (<DeviceBuffer>src).nbytes, (<DeviceBuffer>src)._ptr, ACL_MEMCPY_DEVICE_TO_DEVICE
        else:
            held = _acquire(src, False, "DeviceBuffer.copy_from")
            n, sp, kind = <size_t>held.view.len, <intptr_t>held.view.buf, ACL_MEMCPY_HOST_TO_DEVICE
        if n > self.nbytes:
            raise ValueError(f"DeviceBuffer.copy_from: source has {n} bytes, the buffer holds {self.nbytes}")
        self._copy(self._ptr, sp, n, kind, stream, src if held is None else held)

    def copy_to(self, dst, Stream stream=None):
        """Copy the start of this buffer into ``dst`` (a writable C-contiguous buffer, or a DeviceBuffer).

        With ``stream`` the copy is queued and ``dst`` must not be read before stream.synchronize().
        """
        self._check()
        cdef size_t n
        cdef intptr_t dp
        cdef int kind
        cdef _HeldBuffer held = None
        if isinstance(dst, DeviceBuffer):
            (<DeviceBuffer>dst)._check()
            n, dp, kind = (<DeviceBuffer>dst).nbytes, (<DeviceBuffer>dst)._ptr, ACL_MEMCPY_DEVICE_TO_DEVICE
        else:
            held = _acquire(dst, True, "DeviceBuffer.copy_to")
            n, dp, kind = <size_t>held.view.len, <intptr_t>held.view.buf, ACL_MEMCPY_DEVICE_TO_HOST
        if n > self.nbytes:
            raise ValueError(f"DeviceBuffer.copy_to: destination has {n} bytes, the buffer holds {self.nbytes}")
        self._copy(dp, self._ptr, n, kind, stream, dst if held is None else held)

    cdef _copy(self, intptr_t dst, intptr_t src, size_t n, int kind, Stream stream, keep):
        if n == 0:
            return
        if stream is None:
            memcpy(dst, n, src, n, kind)
        else:
            stream._check()
            memcpy_async(dst, n, src, n, kind, <intptr_t>stream._h)
            stream._keep_alive(keep)
            stream._keep_alive(self)

    def memset(self, int value=0, nbytes=None, Stream stream=None):
        """Set the first ``nbytes`` (default: all) bytes to ``value`` (aclrtMemset / aclrtMemsetAsync)."""
        self._check()
        cdef size_t n = self.nbytes if nbytes is None else nbytes
        if n > self.nbytes:
            raise ValueError(f"DeviceBuffer.memset: nbytes {n} is larger than the buffer ({self.nbytes})")
        if n == 0:
            return
        if stream is None:
            memset(self._ptr, self.nbytes, value, n)
        else:
            stream._check()
            memset_async(self._ptr, self.nbytes, value, n, <intptr_t>stream._h)
            stream._keep_alive(self)

    def free(self):
        """Free the device memory now (aclrtFree). Queued work that uses it still completes."""
        cdef intptr_t p = self._ptr
        self._ptr = 0
        if self._owner is not None:
            self._owner = None
            return
        if p and _epoch[self.device_id] == self._epoch and _refs[self.device_id] > 0:
            free(p)

    close = free

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.free()

    def __dealloc__(self):
        if self._owner is None and self._ptr and _epoch[self.device_id] == self._epoch and _refs[self.device_id] > 0:
            aclrtFree(<void*>self._ptr)
        self._ptr = 0

    def __repr__(self):
        return f"<gert.DeviceBuffer {self.nbytes} bytes on device {self.device_id} at 0x{self._ptr:x}>"


cdef char _empty_host[1]
cdef char* _fmt_B = "B"


cdef class HostBuffer:
    """``nbytes`` of pinned host memory (aclrtMallocHost), exposed through the buffer protocol and DLPack."""
    cdef intptr_t _ptr
    cdef readonly size_t nbytes
    cdef Py_ssize_t _shape[1]
    cdef Py_ssize_t _strides[1]
    cdef int _exports

    def __init__(self, size_t nbytes):
        cdef uint64_t epoch
        _device_for(None, &epoch)  # aclrtMallocHost needs an initialized runtime
        self.nbytes = nbytes
        self._ptr = malloc_host(nbytes) if nbytes else 0

    @property
    def ptr(self) -> int:
        return self._ptr

    def numpy(self, dtype="uint8", shape=None):
        """A numpy view of the buffer (no copy); ``shape`` defaults to as many items as fit."""
        import numpy as np
        dt = np.dtype(dtype)
        if shape is None:
            count = self.nbytes // dt.itemsize
            shape = (count,)
        else:
            shape = (int(shape),) if isinstance(shape, int) else tuple(int(s) for s in shape)
            count = 1
            for s in shape:
                count *= s
        if count * dt.itemsize > self.nbytes:
            raise ValueError(f"HostBuffer.numpy: shape {shape} of {dt} needs {count * dt.itemsize} bytes, "
                             f"the buffer holds {self.nbytes}")
        return np.frombuffer(self, dtype=dt, count=count).reshape(shape)

    def __getbuffer__(self, Py_buffer* view, int flags):
        if self._ptr == 0 and self.nbytes:
            raise BufferError("HostBuffer was freed")
        self._shape[0] = self.nbytes
        self._strides[0] = 1
        view.buf = <void*>self._ptr if self._ptr else <void*>_empty_host
        view.obj = self
        view.len = self.nbytes
        view.readonly = 0
        view.itemsize = 1
        view.format = _fmt_B if (flags & PyBUF_FORMAT) else NULL
        view.ndim = 1
        view.shape = NULL
        view.strides = NULL
        if flags & PyBUF_ND:
            view.shape = self._shape
        if (flags & PyBUF_STRIDES) == PyBUF_STRIDES:
            view.strides = self._strides
        view.suboffsets = NULL
        view.internal = NULL
        self._exports += 1

    def __releasebuffer__(self, Py_buffer* view):
        self._exports -= 1

    def __dlpack_device__(self):
        return (kDLCPU, 0)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        """A DLPack capsule of the buffer as a 1-D uint8 tensor on the CPU (no copy). A consumer that accepts
        DLPack 1.x (``max_version``) gets a versioned, writable tensor; older ones the legacy capsule (which
        numpy imports read-only)."""
        if copy:
            raise BufferError("HostBuffer.__dlpack__: copy=True is not supported; the export never copies")
        if dl_device is not None and tuple(dl_device) != (kDLCPU, 0):
            raise BufferError(f"HostBuffer.__dlpack__: cannot export to device {dl_device}; it lives on (kDLCPU, 0)")
        cdef DLManagedTensor* m = NULL
        cdef DLManagedTensorVersioned* v = NULL
        cdef int64_t* shape
        cdef DLTensor* t
        versioned = max_version is not None and int(max_version[0]) >= DLPACK_MAJOR_VERSION
        if versioned:
            v = <DLManagedTensorVersioned*>c_malloc(sizeof(DLManagedTensorVersioned) + sizeof(int64_t))
            if v == NULL:
                raise MemoryError()
            shape = <int64_t*>(<char*>v + sizeof(DLManagedTensorVersioned))
            v.version.major = DLPACK_MAJOR_VERSION
            v.version.minor = DLPACK_MINOR_VERSION
            v.manager_ctx = <void*>self
            v.deleter = _dlpack_versioned_deleter
            v.flags = 0  # writable, not a copy
            t = &v.dl_tensor
        else:
            m = <DLManagedTensor*>c_malloc(sizeof(DLManagedTensor) + sizeof(int64_t))
            if m == NULL:
                raise MemoryError()
            shape = <int64_t*>(<char*>m + sizeof(DLManagedTensor))
            m.manager_ctx = <void*>self
            m.deleter = _dlpack_deleter
            t = &m.dl_tensor
        shape[0] = self.nbytes
        t.data = <void*>self._ptr if self._ptr else <void*>_empty_host
        t.device.device_type = kDLCPU
        t.device.device_id = 0
        t.ndim = 1
        t.dtype.code = 1  # kDLUInt
        t.dtype.bits = 8
        t.dtype.lanes = 1
        t.shape = shape
        t.strides = NULL
        t.byte_offset = 0
        Py_INCREF(self)
        self._exports += 1
        if versioned:
            return PyCapsule_New(v, "dltensor_versioned", _dlpack_versioned_capsule_destructor)
        return PyCapsule_New(m, "dltensor", _dlpack_capsule_destructor)

    def free(self):
        """Free the pinned memory now; refused while numpy views or DLPack exports still use it."""
        if self._exports:
            raise BufferError(f"HostBuffer.free: {self._exports} view(s) of the buffer are still alive")
        cdef intptr_t p = self._ptr
        self._ptr = 0
        if p:
            free_host(p)

    close = free

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.free()

    def __dealloc__(self):
        if self._ptr:
            aclrtFreeHost(<void*>self._ptr)
        self._ptr = 0

    def __repr__(self):
        return f"<gert.HostBuffer {self.nbytes} bytes at 0x{self._ptr:x}>"


cdef void _dlpack_deleter(DLManagedTensor* m) noexcept with gil:
    cdef HostBuffer owner = <HostBuffer>m.manager_ctx
    owner._exports -= 1
    Py_DECREF(owner)
    c_free(m)


cdef void _dlpack_capsule_destructor(object capsule) noexcept:
    if PyCapsule_IsValid(capsule, "dltensor"):  # never consumed
        m = <DLManagedTensor*>PyCapsule_GetPointer(capsule, "dltensor")
        m.deleter(m)


cdef void _dlpack_versioned_deleter(DLManagedTensorVersioned* v) noexcept with gil:
    cdef HostBuffer owner = <HostBuffer>v.manager_ctx
    owner._exports -= 1
    Py_DECREF(owner)
    c_free(v)


cdef void _dlpack_versioned_capsule_destructor(object capsule) noexcept:
    if PyCapsule_IsValid(capsule, "dltensor_versioned"):  # never consumed
        v = <DLManagedTensorVersioned*>PyCapsule_GetPointer(capsule, "dltensor_versioned")
        v.deleter(v)


@dataclasses.dataclass(frozen=True)
class MemoryInfo:
    """Device memory of one device, in bytes (aclrtGetMemInfo)."""
    free: int
    total: int

    @property
    def used(self) -> int:
        return self.total - self.free


def memory_info(device=None) -> MemoryInfo:
    cdef uint64_t epoch
    _device_for(device, &epoch)
    f, t = get_mem_info(ACL_HBM_MEM)
    return MemoryInfo(free=f, total=t)
