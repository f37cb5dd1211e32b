/* gert host NPU: the compute provider that host NPU GE graphs run on.
 * The host NPU parses, validates, compiles (as far as shapes go), loads and schedules graphs itself and calls a
 * registered provider to compute them. gert's Cython layer registers one that runs ONNX Runtime with inputs and
 * outputs bound to the device buffers (no copies). Kept apart from the CANN names; not part of CANN. */
#ifndef GERT_HOST_GRAPH_PROVIDER_H_
#define GERT_HOST_GRAPH_PROVIDER_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GERT_HOST_MAX_DIMS 25

/* One graph input or output: a dtype (ge::DataType value), a shape (-1 = not known yet) and, when running,
 * the address of its data. */
typedef struct gertHostTensorRef {
  void *data;
  uint64_t nbytes;  /* bytes available at data */
  int32_t dtype;
  int32_t ndim;
  int64_t dims[GERT_HOST_MAX_DIMS];
} gertHostTensorRef;

/* Allocates nbytes of device memory for an output the provider produced itself (outputs[i].data == NULL). */
typedef void *(*gertHostOutputAlloc)(void *alloc_ctx, uint64_t nbytes);

typedef struct gertHostGraphProvider {
  void *ctx;
  /* Prepares the model for inputs of the given dtypes and shapes (-1 dims are dynamic) by shape inference and
   * constant folding, never by running it. Fills outputs' dtype and shape: -1 for a dim not known from the input
   * shapes, a single -2 dim for an unknown rank. Sets *unknown_shape to 1 when any tensor of the graph (outputs or
   * intermediates) has a dim not known from the input shapes (a value-dependent shape: GE's unknown-shape graph).
   * ``group`` is the GE Session: graphs of one group are launched one at a time, so the provider may share compute
   * state (e.g. thread pools) among them. Returns 0, or non-zero with err filled. */
  int (*compile)(void *ctx, uint64_t group, const void *model, size_t model_size, int32_t n_inputs,
                 const char *const *input_names,
                 const gertHostTensorRef *inputs, int32_t n_outputs, const char *const *output_names,
                 gertHostTensorRef *outputs, int32_t *unknown_shape, void **executable, char *err, size_t err_len);
  /* Optional: get ready to run with this many compute threads, alone on the device or not (called by LoadGraph). */
  int (*prepare)(void *executable, int32_t threads, int32_t alone, char *err, size_t err_len);
  /* Runs once. inputs[i].data and outputs[i].data are host-addressable. An output whose dims are all known and
   * whose data is set is written in place; otherwise the provider computes it, copies it into data when it fits in
   * nbytes (and fails when not), or into memory from alloc(alloc_ctx, nbytes) when data == NULL, and fills its data,
   * nbytes and dims. ``threads``: the compute threads the run gets (its share of the device's cube cores);
   * ``alone``: 1 when no other run has used the device lately, so the run's threads may spin (busy-wait) between
   * its parallel sections without taking a core from another run. Returns 0 or non-zero + err. */
  int (*run)(void *executable, int32_t threads, int32_t alone, int32_t n_inputs, const gertHostTensorRef *inputs,
             int32_t n_outputs, gertHostTensorRef *outputs, gertHostOutputAlloc alloc, void *alloc_ctx, char *err,
             size_t err_len);
  void (*release)(void *executable);
  /* Optional, for GE's compile cache (ge.graph_compiler_cache_dir): save serializes a compiled executable (what
   * makes its compile slow, e.g. the optimized model) into memory from alloc(alloc_ctx, n), setting *data and
   * *nbytes; load rebuilds an executable from those bytes for the given group without compiling again. Both return
   * 0, or non-zero with err filled (a load fails on bytes it cannot read). */
  int (*save)(void *executable, gertHostOutputAlloc alloc, void *alloc_ctx, void **data, uint64_t *nbytes, char *err,
              size_t err_len);
  int (*load)(void *ctx, uint64_t group, const void *data, size_t size, void **executable, char *err, size_t err_len);
} gertHostGraphProvider;

/* Registers the provider used by graphs compiled from now on (NULL unregisters). */
void gertHostSetGraphProvider(const gertHostGraphProvider *provider);

#ifdef __cplusplus
}
#endif

#endif
