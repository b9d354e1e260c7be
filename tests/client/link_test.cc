// client_link_test: an application that embeds the client library, built
// against ipupod_client ALONE (no test framework, no source-root include
// path): proves the library is self-contained with proto, common, tensor and
// wire, and links no BLAS, ONNX, graph or compiler (client/CMakeLists.txt
// also checks that closure at configure time). Exits 0 on success.
#include <cstdio>
#include <memory>

#include "client/client.h"
#include "client/ipx_header.h"
#include "common/tensor/tensor_files.h"
#include "common/wire/tensor_stream.h"

namespace {

int Fail(const char* what) {
  std::fprintf(stderr, "client_link_test: %s\n", what);
  return 1;
}

}  // namespace

int main() {
  using namespace ipupod;
  tensor::NamedTensors tensors;
  tensors.emplace_back("x", tensor::Tensor::Scalar<float>(2.5f));
  absl::StatusOr<tensor::NamedTensors> back = tensor::ParseNpz(tensor::SerializeNpz(tensors));
  if (!back.ok() || *back != tensors) return Fail("npz round trip");

  wire::TensorAssembler assembler("outputs");
  absl::Status streamed = wire::StreamTensors(
      tensors, [&](const v1::TensorHeader& h) { return assembler.AddHeader(h).ok(); },
      [&](absl::string_view data) { return assembler.AddData(data).ok(); });
  absl::StatusOr<tensor::NamedTensors> assembled = assembler.Finish();
  if (!streamed.ok() || !assembled.ok() || *assembled != tensors) return Fail("wire round trip");

  if (client::IpxContentHash("not an ipx").ok()) return Fail("ipx header check");

  client::ClientOptions options;
  options.server = "unix:/nonexistent/ipupod-client-link-test.sock";
  options.rpc_timeout = absl::Seconds(5);
  absl::StatusOr<std::unique_ptr<client::Client>> c = client::Client::Connect(options);
  if (!c.ok()) return Fail("connect");
  absl::StatusOr<v1::GetPodInfoResponse> info = (*c)->GetPodInfo();
  if (info.ok() || info.status().code() != absl::StatusCode::kUnavailable) {
    return Fail("a call to no server is not UNAVAILABLE");
  }
  std::printf("client_link_test: ok\n");
  return 0;
}
