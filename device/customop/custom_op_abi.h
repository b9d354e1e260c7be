/* File: device/customop/custom_op_abi.h
 *
 * The C ABI of an ipupod custom op library (PopTorch user guide 4.9; the model is ONNX
 * Runtime's custom ops: a library hands the runtime a versioned table of ops, each with
 * its name, domain, version range, operand counts and types, a shape function and a
 * compute function). Installed as <ipupod/custom_op_abi.h>; plain C99, nothing of C++
 * crosses the boundary, so a library may be written in C, C++ (extern "C") or anything
 * that can export a C function.
 *
 * A library exports one symbol, IPUPOD_CUSTOM_OP_ENTRY_POINT:
 *
 *   const IpupodCustomOpLibrary* IpupodCustomOpLibraryGet(uint32_t host_abi_version);
 *
 * returning a table that lives as long as the library (a static). ipupodd never calls a
 * library in its own process: each is loaded by `ipupod-custom-op-host`, a helper process
 * ipupodd starts (docs/operations.md, "Custom op libraries"), with limits on its memory and
 * CPU time and a deadline on every call; a library that crashes, hangs or writes past its
 * outputs fails the op that called it, never the server.
 *
 * Ownership: every pointer the host passes is valid for the duration of the call only;
 * input buffers are read-only; output buffers are the host's, zero-filled, exactly as
 * large as the shape function said (writing past them is detected and fails the op).
 * Thread safety: the host calls a library from one thread, one call at a time; a library
 * may start threads of its own inside a call, and must have joined them when it returns.
 * Errors: a function returns 0 on success; anything else fails the op, and the text it
 * wrote into `error` (at most error_size bytes, NUL-terminated) is the message the user
 * sees ("custom op com.acme::Cube: <text>"). A library should check what it is given
 * (counts, dtypes, ranks, attributes) and say what is wrong rather than guess.
 *
 * Semantics: values are dense, row-major, of the element types below (ONNX's codes).
 * float16 never reaches a library: a float16 operand arrives widened to float32 and a
 * float32 output of a float16 model is rounded back by ipupod (device/graph/ops.h, RunOp).
 * Compute must be a pure function of its inputs and attributes: ipupod may call it again
 * (a restarted host, a replica, a recomputation) and expects the same result.
 */
#ifndef IPUPOD_CUSTOM_OP_ABI_H_
#define IPUPOD_CUSTOM_OP_ABI_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The version of this header. A library sets IpupodCustomOpLibrary.abi_version to the
 * version it was built against; the host refuses a table of another version, naming
 * both. IpupodCustomOpLibraryGet receives the host's version and may return NULL to say
 * it cannot serve that host. */
#define IPUPOD_CUSTOM_OP_ABI_VERSION 1u

/* The symbol every library exports. */
#define IPUPOD_CUSTOM_OP_ENTRY_POINT "IpupodCustomOpLibraryGet"

/* Most dims a value may have. */
#define IPUPOD_MAX_RANK 8

/* Element types, by their ONNX TensorProto.DataType codes. */
typedef enum IpupodDType {
  IPUPOD_DTYPE_UNDEFINED = 0, /* in IpupodCustomOp.input_types: any type */
  IPUPOD_DTYPE_FLOAT32 = 1,
  IPUPOD_DTYPE_INT32 = 6,
  IPUPOD_DTYPE_INT64 = 7,
  IPUPOD_DTYPE_BOOL = 9 /* one byte per element, 0 or 1 */
} IpupodDType;

/* Attribute types, by their ONNX AttributeProto.AttributeType codes: the six PopTorch
 * passes (user guide, Table 4.1). */
typedef enum IpupodAttributeType {
  IPUPOD_ATTRIBUTE_FLOAT = 1,
  IPUPOD_ATTRIBUTE_INT = 2,
  IPUPOD_ATTRIBUTE_STRING = 3,
  IPUPOD_ATTRIBUTE_FLOATS = 6,
  IPUPOD_ATTRIBUTE_INTS = 7,
  IPUPOD_ATTRIBUTE_STRINGS = 8
} IpupodAttributeType;

/* The dtype and shape of a value. */
typedef struct IpupodTensorType {
  int32_t dtype; /* an IpupodDType */
  int32_t rank;  /* 0 (a scalar) .. IPUPOD_MAX_RANK */
  int64_t dims[IPUPOD_MAX_RANK];
} IpupodTensorType;

/* A value the library reads. */
typedef struct IpupodTensor {
  IpupodTensorType type;
  int64_t num_elements;
  const void* data; /* NULL only when num_elements is 0 */
} IpupodTensor;

/* A value the library writes: zero-filled by the host, exactly num_elements long. */
typedef struct IpupodMutableTensor {
  IpupodTensorType type;
  int64_t num_elements;
  void* data; /* NULL when num_elements is 0, or (gradients) when none is wanted */
} IpupodMutableTensor;

/* One attribute of the ONNX node. Scalars: count 1 and the one pointer of their type;
 * lists: count elements; a string is `count` bytes (not NUL-terminated, may hold any
 * byte), a list of strings has `count` strings of string_lengths[i] bytes each. */
typedef struct IpupodAttribute {
  const char* name; /* NUL-terminated */
  int32_t type;     /* an IpupodAttributeType */
  int64_t count;
  const float* floats;           /* FLOAT, FLOATS */
  const int64_t* ints;           /* INT, INTS */
  const char* string;            /* STRING: `count` bytes */
  const char* const* strings;    /* STRINGS: `count` strings... */
  const int64_t* string_lengths; /* ...of these lengths */
} IpupodAttribute;

typedef struct IpupodAttributes {
  const IpupodAttribute* items;
  int64_t count;
} IpupodAttributes;

/* Output types from input types (and attributes): fill outputs[0..num_outputs) with each
 * output's dtype, rank and dims. Called when a model is compiled and loaded; a value's
 * shape never changes between calls (ipupod compiles static shapes). */
typedef int (*IpupodShapeFn)(const IpupodAttributes* attributes, const IpupodTensorType* inputs,
                             int32_t num_inputs, IpupodTensorType* outputs, int32_t num_outputs,
                             char* error, size_t error_size);

/* The outputs from the inputs. outputs[i] has the type the shape function gave. */
typedef int (*IpupodComputeFn)(const IpupodAttributes* attributes, const IpupodTensor* inputs,
                               int32_t num_inputs, IpupodMutableTensor* outputs,
                               int32_t num_outputs, char* error, size_t error_size);

/* The gradient: with the forward's inputs and outputs and the gradient of the loss with
 * respect to each output (float32, the output's shape; zeros where none flows), write the
 * gradient with respect to each input whose input_grads[i].data is not NULL (float32, the
 * input's shape, zero-filled: a float input on the path from a trained weight to the loss).
 * Optional: an op without one cannot lie on that path in a training model (the compile
 * says so). */
typedef int (*IpupodGradientFn)(const IpupodAttributes* attributes, const IpupodTensor* inputs,
                                int32_t num_inputs, const IpupodTensor* outputs,
                                int32_t num_outputs, const IpupodTensor* output_grads,
                                IpupodMutableTensor* input_grads, char* error, size_t error_size);

/* One op. `domain` and `name` are the ONNX node's domain and op_type ("com.acme",
 * "Cube"); a model's version of the domain (its opset_import) selects the entry with the
 * highest since_version <= that version whose end_version (0: none) is >= it. */
typedef struct IpupodCustomOp {
  const char* domain;
  const char* name;
  int32_t since_version; /* >= 1 */
  int32_t end_version;   /* 0: every version from since_version on */
  int32_t num_inputs;    /* exact counts: 1 .. 64 inputs, 1 .. 64 outputs */
  int32_t num_outputs;
  /* num_inputs entries; IPUPOD_DTYPE_UNDEFINED (or a NULL array) accepts any type and
   * leaves the check to the shape function. */
  const int32_t* input_types;
  /* The attributes the op reads, NULL-terminated; a node with any other attribute is
   * refused when the model is compiled. A NULL array accepts every attribute. */
  const char* const* attributes;
  IpupodShapeFn infer_shapes; /* required */
  IpupodComputeFn compute;    /* required */
  IpupodGradientFn gradient;  /* optional: NULL = not differentiable */
} IpupodCustomOp;

typedef struct IpupodCustomOpLibrary {
  uint32_t abi_version; /* IPUPOD_CUSTOM_OP_ABI_VERSION the library was built with */
  const char* name;     /* for messages and logs, e.g. "acme-ops 1.2" */
  int32_t num_ops;      /* 1 .. 1024 */
  const IpupodCustomOp* ops;
} IpupodCustomOpLibrary;

typedef const IpupodCustomOpLibrary* (*IpupodCustomOpLibraryGetFn)(uint32_t host_abi_version);

/* Helpers for libraries (static inline: nothing to link). */

/* The attribute `name`, or NULL. */
static inline const IpupodAttribute* IpupodFindAttribute(const IpupodAttributes* attributes,
                                                         const char* name) {
  int64_t i;
  for (i = 0; i < attributes->count; ++i) {
    const char* a = attributes->items[i].name;
    const char* b = name;
    while (*a != '\0' && *a == *b) {
      ++a;
      ++b;
    }
    if (*a == *b) return &attributes->items[i];
  }
  return NULL;
}

/* The elements of a value of `type`. */
static inline int64_t IpupodNumElements(const IpupodTensorType* type) {
  int64_t n = 1;
  int32_t i;
  for (i = 0; i < type->rank; ++i) n *= type->dims[i];
  return n;
}

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* IPUPOD_CUSTOM_OP_ABI_H_ */
