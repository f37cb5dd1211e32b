# cython: language_level=3, embedsignature=True
# distutils: language = c++
# gert._cann with the host NPU built in (setup.py's default build): CANN's API (_cann.pyx) plus the host NPU's own
# features, which gert.hostnpu finds here. A build against a toolkit compiles _cann.pyx alone.
include "_cann.pyx"
include "_host.pxi"
include "_provider.pxi"
