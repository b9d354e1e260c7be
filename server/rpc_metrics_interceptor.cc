#include "server/rpc_metrics_interceptor.h"

#include <atomic>

#include <google/protobuf/descriptor.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace ipupod::server {
namespace {

using grpc::experimental::InterceptionHookPoints;

// The services of proto/ipupod/v1 (a test checks the files define no other).
constexpr const char* kServices[] = {"ipupod.v1.PodService",     "ipupod.v1.PartitionService",
                                     "ipupod.v1.SessionService", "ipupod.v1.ExecutionService",
                                     "ipupod.v1.JobService",     "ipupod.v1.AccountingService",
                                     "ipupod.v1.CompileService"};

class RpcMetricsInterceptor : public grpc::experimental::Interceptor {
 public:
  RpcMetricsInterceptor(metrics::RpcMetrics* rpcs, metrics::RpcMetrics::Method* method)
      : rpcs_(rpcs), method_(method), start_(absl::Now()) {}

  ~RpcMetricsInterceptor() override {
    if (!recorded_.load())
      rpcs_->Record(method_, grpc::StatusCode::CANCELLED, absl::Now() - start_);
  }

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_STATUS) &&
        !recorded_.exchange(true)) {
      rpcs_->Record(method_, methods->GetSendStatus().error_code(), absl::Now() - start_);
    }
    methods->Proceed();
  }

 private:
  metrics::RpcMetrics* const rpcs_;
  metrics::RpcMetrics::Method* const method_;
  const absl::Time start_;
  std::atomic<bool> recorded_{false};  // hooks of one call may run on different threads
};

}  // namespace

std::vector<std::string> KnownRpcMethods() {
  std::vector<std::string> methods;
  const google::protobuf::DescriptorPool* pool = google::protobuf::DescriptorPool::generated_pool();
  for (const char* name : kServices) {
    const google::protobuf::ServiceDescriptor* service = pool->FindServiceByName(name);
    if (service == nullptr) continue;  // not linked into this program
    for (int i = 0; i < service->method_count(); ++i) {
      methods.push_back(absl::StrCat("/", name, "/", service->method(i)->name()));
    }
  }
  methods.push_back("/grpc.health.v1.Health/Check");
  methods.push_back("/grpc.health.v1.Health/Watch");
  methods.push_back("/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo");
  return methods;
}

grpc::experimental::Interceptor* RpcMetricsFactory::CreateServerInterceptor(
    grpc::experimental::ServerRpcInfo* info) {
  const char* method = info->method();
  return new RpcMetricsInterceptor(rpcs_, rpcs_->Find(method != nullptr ? method : ""));
}

}  // namespace ipupod::server
