# cython: language_level=3
# C declarations of gert/core/_split.pyx, for the compiled hot path (gert/core/_hotpath.pyx): HotPath.run_list splits
# a merged run's outputs with split(), the code Batcher.split (gert/core/batching.py) runs.

cpdef object take(object value, object axis, Py_ssize_t start, Py_ssize_t rows)
cpdef list split(object out, object rows, object axes)
