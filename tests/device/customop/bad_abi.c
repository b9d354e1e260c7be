/* A custom op library built against another ABI version (the host refuses its table). */
#include "device/customop/custom_op_abi.h"

static int Shape(const IpupodAttributes* a, const IpupodTensorType* in, int32_t n,
                 IpupodTensorType* out, int32_t m, char* e, size_t s) {
  (void)a, (void)in, (void)n, (void)out, (void)m, (void)e, (void)s;
  return 0;
}

static int Compute(const IpupodAttributes* a, const IpupodTensor* in, int32_t n,
                   IpupodMutableTensor* out, int32_t m, char* e, size_t s) {
  (void)a, (void)in, (void)n, (void)out, (void)m, (void)e, (void)s;
  return 0;
}

static const IpupodCustomOp kOps[] = {
    {"com.acme", "Old", 1, 0, 1, 1, NULL, NULL, Shape, Compute, NULL}};
static const IpupodCustomOpLibrary kLibrary = {99, "from the future", 1, kOps};

const IpupodCustomOpLibrary* IpupodCustomOpLibraryGet(uint32_t host_abi_version) {
  (void)host_abi_version;
  return &kLibrary;
}
