// The tensor stream assembler (wire::TensorAssembler) fed a sequence of
// messages: each is one byte (even: a TensorHeader, odd: a data chunk), a
// 3-byte little-endian length and that many bytes (a serialized
// TensorHeader, or the chunk). Tensors that assemble must stream back to
// the same headers and bytes.
#include "common/wire/tensor_stream.h"
#include "tools/fuzz/fuzzer.h"

namespace {

namespace wire = ipupod::wire;

// Splits the input into (is_header, payload) messages.
bool NextMessage(absl::string_view& in, bool& is_header, absl::string_view& payload) {
  if (in.size() < 4) return false;
  is_header = (static_cast<unsigned char>(in[0]) & 1) == 0;
  const size_t n = static_cast<unsigned char>(in[1]) | static_cast<unsigned char>(in[2]) << 8 |
                   static_cast<size_t>(static_cast<unsigned char>(in[3])) << 16;
  in.remove_prefix(4);
  payload = in.substr(0, n);
  in.remove_prefix(payload.size());
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::string_view in = ipupod::fuzz::AsText(data, size);
  wire::TensorAssembler assembler("fuzz", ipupod::fuzz::kFuzzTensorBytesMax);
  bool is_header = false;
  absl::string_view payload;
  while (NextMessage(in, is_header, payload)) {
    absl::Status s;
    if (is_header) {
      ipupod::v1::TensorHeader header;
      if (!header.ParseFromArray(payload.data(), static_cast<int>(payload.size()))) return 0;
      s = assembler.AddHeader(header);
    } else {
      s = assembler.AddData(payload);
    }
    if (!s.ok()) return 0;
  }
  auto tensors = assembler.Finish();
  if (!tensors.ok()) return 0;
  wire::TensorAssembler again("again");
  absl::Status streamed = wire::StreamTensors(
      *tensors, [&](const ipupod::v1::TensorHeader& h) { return again.AddHeader(h).ok(); },
      [&](absl::string_view chunk) { return again.AddData(chunk).ok(); });
  FUZZ_CHECK(streamed.ok());
  auto back = again.Finish();
  FUZZ_CHECK(back.ok() && *back == *tensors);
  return 0;
}
