/* The custom op library of the tests (built by tests/device/customop/CMakeLists.txt as
 * libipupod_test_custom_ops.so), written in plain C99 against device/customop/custom_op_abi.h
 * to show that nothing but C crosses the boundary.
 *
 * Well-behaved ops (PopTorch user guide 4.9's examples):
 *   com.acme::Cube(x, bias) -> (x^3 + bias, x^3)          float32, same shapes; gradient
 *   com.acme::LeakyRelu(x) -> x >= 0 ? x : alpha * x      attribute alpha (float, 0.01);
 *                                                         gradient
 *   com.acme::NoGrad(x) -> x                              no gradient function
 *   test.poptorch::ManyAttributeOp(x) -> x + 1 when every attribute has the value of the
 *       guide's Listing 4.26 (strs may also be "\x01" "\x02" "\x03", PopTorch's own test),
 *       else x
 * Misbehaving ones, domain test.bad, each (x float32) -> x's shape:
 *   Segfault   writes through a null pointer
 *   Spin       never returns
 *   Overrun    writes past the end of its output (the wrong output size)
 *   HugeAlloc  allocates and touches 64 MiB blocks until malloc fails (or 16 GiB), frees
 *              them and fails saying how much it got
 *   BadShape   its shape function returns rank 9
 *   Fails      returns an error: "x must not be empty" style
 *   Abort      calls abort()
 *   Escape     tries what its attribute `what` names - "open" a file, make a "socket",
 *              "fork", "exec" a program, signal its "parent" (signal 0: only the
 *              permission is checked), start a "thread" - and fails saying how it went
 *              ("open: Permission denied", "thread: done")
 */
#define _POSIX_C_SOURCE 200809L /* fork, kill, getppid: the Escape op */

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "device/customop/custom_op_abi.h"

static int Fail(char* error, size_t size, const char* message) {
  snprintf(error, size, "%s", message);
  return 1;
}

/* Every output takes the type of input 0. */
static int SameAsInput0(const IpupodAttributes* attributes, const IpupodTensorType* inputs,
                        int32_t num_inputs, IpupodTensorType* outputs, int32_t num_outputs,
                        char* error, size_t error_size) {
  int32_t i;
  (void)attributes;
  if (num_inputs < 1 || inputs[0].dtype != IPUPOD_DTYPE_FLOAT32) {
    return Fail(error, error_size, "input 0 must be float32");
  }
  for (i = 1; i < num_inputs; ++i) {
    if (IpupodNumElements(&inputs[i]) != IpupodNumElements(&inputs[0])) {
      return Fail(error, error_size, "every input must have as many elements as input 0");
    }
  }
  for (i = 0; i < num_outputs; ++i) outputs[i] = inputs[0];
  return 0;
}

/* ---- com.acme::Cube ---- */

static int CubeCompute(const IpupodAttributes* attributes, const IpupodTensor* inputs,
                       int32_t num_inputs, IpupodMutableTensor* outputs, int32_t num_outputs,
                       char* error, size_t error_size) {
  const float* x = (const float*)inputs[0].data;
  const float* bias = (const float*)inputs[1].data;
  float* out = (float*)outputs[0].data;
  float* cube = (float*)outputs[1].data;
  int64_t i;
  (void)attributes, (void)num_inputs, (void)num_outputs, (void)error, (void)error_size;
  for (i = 0; i < inputs[0].num_elements; ++i) {
    cube[i] = x[i] * x[i] * x[i];
    out[i] = cube[i] + bias[i];
  }
  return 0;
}

/* d/dx = 3 x^2 (g0 + g1), d/dbias = g0. */
static int CubeGradient(const IpupodAttributes* attributes, const IpupodTensor* inputs,
                        int32_t num_inputs, const IpupodTensor* outputs, int32_t num_outputs,
                        const IpupodTensor* output_grads, IpupodMutableTensor* input_grads,
                        char* error, size_t error_size) {
  const float* x = (const float*)inputs[0].data;
  const float* g0 = (const float*)output_grads[0].data;
  const float* g1 = (const float*)output_grads[1].data;
  int64_t i;
  (void)attributes, (void)num_inputs, (void)outputs, (void)num_outputs, (void)error,
      (void)error_size;
  for (i = 0; i < inputs[0].num_elements; ++i) {
    if (input_grads[0].data != NULL) {
      ((float*)input_grads[0].data)[i] = 3.0f * x[i] * x[i] * (g0[i] + g1[i]);
    }
    if (input_grads[1].data != NULL) ((float*)input_grads[1].data)[i] = g0[i];
  }
  return 0;
}

/* ---- com.acme::LeakyRelu ---- */

static float Alpha(const IpupodAttributes* attributes) {
  const IpupodAttribute* a = IpupodFindAttribute(attributes, "alpha");
  return a != NULL && a->type == IPUPOD_ATTRIBUTE_FLOAT ? a->floats[0] : 0.01f;
}

static int LeakyReluCompute(const IpupodAttributes* attributes, const IpupodTensor* inputs,
                            int32_t num_inputs, IpupodMutableTensor* outputs,
                            int32_t num_outputs, char* error, size_t error_size) {
  const float alpha = Alpha(attributes);
  const float* x = (const float*)inputs[0].data;
  float* y = (float*)outputs[0].data;
  int64_t i;
  (void)num_inputs, (void)num_outputs, (void)error, (void)error_size;
  for (i = 0; i < inputs[0].num_elements; ++i) y[i] = x[i] >= 0.0f ? x[i] : alpha * x[i];
  return 0;
}

static int LeakyReluGradient(const IpupodAttributes* attributes, const IpupodTensor* inputs,
                             int32_t num_inputs, const IpupodTensor* outputs,
                             int32_t num_outputs, const IpupodTensor* output_grads,
                             IpupodMutableTensor* input_grads, char* error, size_t error_size) {
  const float alpha = Alpha(attributes);
  const float* x = (const float*)inputs[0].data;
  const float* g = (const float*)output_grads[0].data;
  float* dx = (float*)input_grads[0].data;
  int64_t i;
  (void)num_inputs, (void)outputs, (void)num_outputs, (void)error, (void)error_size;
  for (i = 0; dx != NULL && i < inputs[0].num_elements; ++i) {
    dx[i] = x[i] >= 0.0f ? g[i] : alpha * g[i];
  }
  return 0;
}

/* ---- com.acme::NoGrad ---- */

static int CopyCompute(const IpupodAttributes* attributes, const IpupodTensor* inputs,
                       int32_t num_inputs, IpupodMutableTensor* outputs, int32_t num_outputs,
                       char* error, size_t error_size) {
  (void)attributes, (void)num_inputs, (void)num_outputs, (void)error, (void)error_size;
  memcpy(outputs[0].data, inputs[0].data, (size_t)inputs[0].num_elements * sizeof(float));
  return 0;
}

/* ---- test.poptorch::ManyAttributeOp ---- */

static int FloatsAre(const IpupodAttributes* attributes, const char* name, const float* want,
                     int64_t n, int32_t type) {
  const IpupodAttribute* a = IpupodFindAttribute(attributes, name);
  int64_t i;
  if (a == NULL || a->type != type || a->count != n) return 0;
  for (i = 0; i < n; ++i) {
    if (a->floats[i] != want[i]) return 0;
  }
  return 1;
}

static int IntsAre(const IpupodAttributes* attributes, const char* name, const int64_t* want,
                   int64_t n, int32_t type) {
  const IpupodAttribute* a = IpupodFindAttribute(attributes, name);
  int64_t i;
  if (a == NULL || a->type != type || a->count != n) return 0;
  for (i = 0; i < n; ++i) {
    if (a->ints[i] != want[i]) return 0;
  }
  return 1;
}

static int StringsAre(const IpupodAttributes* attributes, const char* name,
                      const char* const* want) {
  const IpupodAttribute* a = IpupodFindAttribute(attributes, name);
  int64_t i;
  if (a == NULL || a->type != IPUPOD_ATTRIBUTE_STRINGS || a->count != 3) return 0;
  for (i = 0; i < 3; ++i) {
    if (a->string_lengths[i] != (int64_t)strlen(want[i]) ||
        memcmp(a->strings[i], want[i], strlen(want[i])) != 0) {
      return 0;
    }
  }
  return 1;
}

static int AllAttributesRight(const IpupodAttributes* attributes) {
  static const float one = 1.0f, minus_two = -2.0f;
  static const float floats[] = {1.0f, 2.0f, 3.0f}, minus_floats[] = {-1.0f, -2.0f, -3.0f};
  static const int64_t zero = 0, minus_five = -5;
  static const int64_t ints[] = {1, 2, 3}, minus_ints[] = {-1, -2, -3};
  static const char* const letters[] = {"abc", "def", "ghi"};
  static const char* const controls[] = {"\x01", "\x02", "\x03"};
  static const char text[] = "string with quotes and slash \" ' \\ end";
  const IpupodAttribute* s = IpupodFindAttribute(attributes, "a_string");
  return FloatsAre(attributes, "float_one", &one, 1, IPUPOD_ATTRIBUTE_FLOAT) &&
         FloatsAre(attributes, "float_minus_two", &minus_two, 1, IPUPOD_ATTRIBUTE_FLOAT) &&
         IntsAre(attributes, "int_zero", &zero, 1, IPUPOD_ATTRIBUTE_INT) &&
         IntsAre(attributes, "int_minus_five", &minus_five, 1, IPUPOD_ATTRIBUTE_INT) &&
         FloatsAre(attributes, "floats_one_two_three", floats, 3, IPUPOD_ATTRIBUTE_FLOATS) &&
         FloatsAre(attributes, "floats_minus_one_two_three", minus_floats, 3,
                   IPUPOD_ATTRIBUTE_FLOATS) &&
         IntsAre(attributes, "ints_one_two_three", ints, 3, IPUPOD_ATTRIBUTE_INTS) &&
         IntsAre(attributes, "ints_minus_one_two_three", minus_ints, 3, IPUPOD_ATTRIBUTE_INTS) &&
         s != NULL && s->type == IPUPOD_ATTRIBUTE_STRING &&
         s->count == (int64_t)(sizeof(text) - 1) && memcmp(s->string, text, sizeof(text) - 1) == 0 &&
         (StringsAre(attributes, "strs", letters) || StringsAre(attributes, "strs", controls));
}

static int ManyAttributeCompute(const IpupodAttributes* attributes, const IpupodTensor* inputs,
                                int32_t num_inputs, IpupodMutableTensor* outputs,
                                int32_t num_outputs, char* error, size_t error_size) {
  const float add = AllAttributesRight(attributes) ? 1.0f : 0.0f;
  const float* x = (const float*)inputs[0].data;
  float* y = (float*)outputs[0].data;
  int64_t i;
  (void)num_inputs, (void)num_outputs, (void)error, (void)error_size;
  for (i = 0; i < inputs[0].num_elements; ++i) y[i] = x[i] + add;
  return 0;
}

/* ---- test.bad ---- */

static int SegfaultCompute(const IpupodAttributes* attributes, const IpupodTensor* inputs,
                           int32_t num_inputs, IpupodMutableTensor* outputs,
                           int32_t num_outputs, char* error, size_t error_size) {
  volatile float* nowhere = NULL;
  (void)attributes, (void)inputs, (void)num_inputs, (void)outputs, (void)num_outputs,
      (void)error, (void)error_size;
  *nowhere = 1.0f;
  return 0;
}

static int SpinCompute(const IpupodAttributes* attributes, const IpupodTensor* inputs,
                       int32_t num_inputs, IpupodMutableTensor* outputs, int32_t num_outputs,
                       char* error, size_t error_size) {
  volatile unsigned long spins = 0;
  (void)attributes, (void)inputs, (void)num_inputs, (void)outputs, (void)num_outputs,
      (void)error, (void)error_size;
  for (;;) ++spins;
  return 0;
}

static int OverrunCompute(const IpupodAttributes* attributes, const IpupodTensor* inputs,
                          int32_t num_inputs, IpupodMutableTensor* outputs, int32_t num_outputs,
                          char* error, size_t error_size) {
  float* y = (float*)outputs[0].data;
  int64_t i;
  (void)attributes, (void)num_inputs, (void)num_outputs, (void)error, (void)error_size;
  for (i = 0; i < inputs[0].num_elements + 4; ++i) y[i] = 7.0f; /* 4 too many */
  return 0;
}

static int HugeAllocCompute(const IpupodAttributes* attributes, const IpupodTensor* inputs,
                            int32_t num_inputs, IpupodMutableTensor* outputs,
                            int32_t num_outputs, char* error, size_t error_size) {
  enum { kBlock = 64 << 20, kBlocksMax = 256 };
  void* blocks[kBlocksMax];
  int n = 0, i;
  (void)attributes, (void)inputs, (void)num_inputs, (void)outputs, (void)num_outputs;
  for (; n < kBlocksMax; ++n) {
    blocks[n] = malloc(kBlock);
    if (blocks[n] == NULL) break;
    memset(blocks[n], 1, kBlock);
  }
  for (i = 0; i < n; ++i) free(blocks[i]);
  snprintf(error, error_size, "allocated %d MiB before malloc failed", n * 64);
  return 1;
}

static int BadShape(const IpupodAttributes* attributes, const IpupodTensorType* inputs,
                    int32_t num_inputs, IpupodTensorType* outputs, int32_t num_outputs,
                    char* error, size_t error_size) {
  (void)attributes, (void)inputs, (void)num_inputs, (void)num_outputs, (void)error,
      (void)error_size;
  outputs[0].dtype = IPUPOD_DTYPE_FLOAT32;
  outputs[0].rank = 9;
  return 0;
}

static int FailsCompute(const IpupodAttributes* attributes, const IpupodTensor* inputs,
                        int32_t num_inputs, IpupodMutableTensor* outputs, int32_t num_outputs,
                        char* error, size_t error_size) {
  (void)attributes, (void)inputs, (void)num_inputs, (void)outputs, (void)num_outputs;
  return Fail(error, error_size, "this op always fails: x is not to its liking");
}

static int AbortCompute(const IpupodAttributes* attributes, const IpupodTensor* inputs,
                        int32_t num_inputs, IpupodMutableTensor* outputs, int32_t num_outputs,
                        char* error, size_t error_size) {
  (void)attributes, (void)inputs, (void)num_inputs, (void)outputs, (void)num_outputs,
      (void)error, (void)error_size;
  abort();
}

static void* Nothing(void* arg) { return arg; }

/* The outcome of trying `what`: 0 or -1 with errno. */
static int Try(const char* what) {
  if (strcmp(what, "open") == 0) {
    int fd = open("/etc/hostname", O_RDONLY);
    if (fd >= 0) close(fd);
    return fd >= 0 ? 0 : -1;
  }
  if (strcmp(what, "socket") == 0) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd >= 0) close(fd);
    return fd >= 0 ? 0 : -1;
  }
  if (strcmp(what, "fork") == 0) {
    pid_t pid = fork();
    if (pid == 0) _exit(0);
    if (pid > 0) waitpid(pid, NULL, 0);
    return pid > 0 ? 0 : -1;
  }
  if (strcmp(what, "exec") == 0) {
    char* const argv[] = {NULL};
    execv("/nonexistent/program", argv); /* ENOENT if it were allowed */
    return -1;
  }
  if (strcmp(what, "parent") == 0) return kill(getppid(), 0);
  if (strcmp(what, "thread") == 0) {
    pthread_t thread;
    int rc = pthread_create(&thread, NULL, Nothing, NULL);
    if (rc != 0) {
      errno = rc;
      return -1;
    }
    pthread_join(thread, NULL);
    return 0;
  }
  errno = EINVAL;
  return -1;
}

static int EscapeCompute(const IpupodAttributes* attributes, const IpupodTensor* inputs,
                         int32_t num_inputs, IpupodMutableTensor* outputs, int32_t num_outputs,
                         char* error, size_t error_size) {
  const IpupodAttribute* a = IpupodFindAttribute(attributes, "what");
  char what[32] = "";
  (void)inputs, (void)num_inputs, (void)outputs, (void)num_outputs;
  if (a != NULL && a->type == IPUPOD_ATTRIBUTE_STRING && a->count < (int64_t)sizeof(what)) {
    memcpy(what, a->string, (size_t)a->count);
  }
  if (Try(what) == 0) {
    snprintf(error, error_size, "%s: done", what);
  } else {
    snprintf(error, error_size, "%s: %s", what, strerror(errno));
  }
  return 1;
}

/* ---- the table ---- */

static const int32_t kFloat[] = {IPUPOD_DTYPE_FLOAT32, IPUPOD_DTYPE_FLOAT32};
static const char* const kAlpha[] = {"alpha", NULL};
static const char* const kNone[] = {NULL};
static const char* const kWhat[] = {"what", NULL};
static const char* const kMany[] = {"float_one",
                                    "float_minus_two",
                                    "int_zero",
                                    "int_minus_five",
                                    "floats_one_two_three",
                                    "floats_minus_one_two_three",
                                    "ints_one_two_three",
                                    "ints_minus_one_two_three",
                                    "a_string",
                                    "strs",
                                    NULL};

#define BAD_OP(name, shape, compute) \
  {"test.bad", name, 1, 0, 1, 1, kFloat, kNone, shape, compute, NULL}

static const IpupodCustomOp kOps[] = {
    {"com.acme", "Cube", 1, 0, 2, 2, kFloat, kNone, SameAsInput0, CubeCompute, CubeGradient},
    {"com.acme", "LeakyRelu", 1, 0, 1, 1, kFloat, kAlpha, SameAsInput0, LeakyReluCompute,
     LeakyReluGradient},
    {"com.acme", "NoGrad", 1, 0, 1, 1, kFloat, kNone, SameAsInput0, CopyCompute, NULL},
    {"test.poptorch", "ManyAttributeOp", 1, 0, 1, 1, kFloat, kMany, SameAsInput0,
     ManyAttributeCompute, NULL},
    BAD_OP("Segfault", SameAsInput0, SegfaultCompute),
    BAD_OP("Spin", SameAsInput0, SpinCompute),
    BAD_OP("Overrun", SameAsInput0, OverrunCompute),
    BAD_OP("HugeAlloc", SameAsInput0, HugeAllocCompute),
    BAD_OP("BadShape", BadShape, CopyCompute),
    BAD_OP("Fails", SameAsInput0, FailsCompute),
    BAD_OP("Abort", SameAsInput0, AbortCompute),
    {"test.bad", "Escape", 1, 0, 1, 1, kFloat, kWhat, SameAsInput0, EscapeCompute, NULL},
};

static const IpupodCustomOpLibrary kLibrary = {IPUPOD_CUSTOM_OP_ABI_VERSION,
                                               "ipupod test ops", sizeof(kOps) / sizeof(kOps[0]),
                                               kOps};

const IpupodCustomOpLibrary* IpupodCustomOpLibraryGet(uint32_t host_abi_version) {
  return host_abi_version == IPUPOD_CUSTOM_OP_ABI_VERSION ? &kLibrary : NULL;
}
