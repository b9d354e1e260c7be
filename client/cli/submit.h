// File: client/cli/submit.h
//
// The pure part of `ipupod submit`, exposed for tests: the command line's
// values checked and turned into a SubmitJobRequest before anything is
// uploaded. Everything that can be known without the server is checked here
// (flag combinations, numbers, durations, the sweep's shape, the job id of
// --after, the files' formats from their extensions); the rest (the
// executable loads on this pod, the inputs match it, the IPU count) is the
// server's, at submit. The command itself is registered by
// AddSubmitCommand (client/cli/commands.h).
//
// Thread safety: pure functions.
// Errors: INVALID_ARGUMENT naming the flag and saying what is accepted (the
// CLI reports it as a usage error, exit code 2).
#ifndef IPUPOD_CLIENT_CLI_SUBMIT_H_
#define IPUPOD_CLIENT_CLI_SUBMIT_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ipupod/v1/jobs.pb.h"

namespace ipupod::cli {

namespace v1 = ::ipupod::v1;

// The most characters of --name (the server's bound).
inline constexpr size_t kJobNameCharsMax = 64;

// The values as given (text, so that every message names its flag).
struct SubmitArgs {
  std::string executable;  // MODEL.ipx
  std::string inputs;      // --inputs
  std::string weights;     // --weights
  std::string outputs;     // --outputs NAME,NAME
  bool train = false;
  std::string epochs;
  std::string steps;
  std::string lr;
  std::string checkpoint_every;
  std::string ipus;  // as `attach --ipus`; "" = the executable's own count
  std::string partition;
  bool auto_round = false;
  std::string name;        // "" = the executable's file name
  std::string time_limit;  // DURATION
  std::string after;       // a job id
  std::string sweep;       // NAME=V1,V2,...
  std::string account;     // "" = the user's default account
  std::string qos;         // "" = the default QoS
};

// The request with everything but the blobs' hashes (filled in after the
// uploads): the formats of inputs and weights, the training fields, the
// placement, the time limit, the dependency and the sweep.
absl::StatusOr<v1::SubmitJobRequest> BuildSubmitRequest(const SubmitArgs& args);

// The blob format of a tensor file from its extension
// (tensor::TensorFileFormatOf): inputs "npz" or "safetensors", as `run`
// takes them; weights "npz", "safetensors"
// or "onnx" (a model's initializers). INVALID_ARGUMENT naming the flag and
// the accepted extensions otherwise.
enum class TensorFileRole { kInputs, kWeights };
absl::StatusOr<std::string> BlobFormatOf(absl::string_view path, TensorFileRole role);

}  // namespace ipupod::cli

#endif  // IPUPOD_CLIENT_CLI_SUBMIT_H_
