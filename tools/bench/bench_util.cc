#include "tools/bench/bench_util.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "device/kernels/threads.h"
#include "server/config.h"
#include <unistd.h>

namespace ipupod::bench {

namespace fs = std::filesystem;

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

std::string RunCommand(const std::string& command, bool* ok) {
  std::string out;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) {
    *ok = false;
    return out;
  }
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof buffer, pipe)) > 0) out.append(buffer, n);
  *ok = pclose(pipe) == 0;
  return out;
}

std::string RunTorchReference(absl::string_view args, bool* ok) {
  return RunCommand(absl::StrCat("/usr/bin/python3 ", IPUPOD_SOURCE_DIR,
                                 "/tools/bench/torch_reference.py ", args),
                    ok);
}

std::string RoundRatios(const std::vector<double>& ours, const std::vector<double>& reference) {
  std::string out;
  for (size_t i = 0; i < ours.size() && i < reference.size(); ++i) {
    absl::StrAppend(&out, i == 0 ? "" : ", ", absl::StrFormat("%.2fx", ours[i] / reference[i]));
  }
  return out;
}

absl::StatusOr<std::string> ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path.string()));
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

absl::StatusOr<Pod> StartPod(const fs::path& work, int compute_threads) {
  Pod pod;
  pod.state_dir = work / "state";
  server::ServerConfig config;
  config.listen = "127.0.0.1:0";
  config.state_dir = pod.state_dir.string();
  config.log_level = "warn";
  config.compute_threads = compute_threads;
  IPUPOD_ASSIGN_OR_RETURN(pod.server, server::PodServer::Start(config));
  client::ClientOptions options;
  options.server = pod.server->address();
  options.user = "bench";
  IPUPOD_ASSIGN_OR_RETURN(pod.client, client::Client::Connect(options));
  return pod;
}

absl::StatusOr<Loaded> CompileAndLoad(Pod& pod, const fs::path& onnx,
                                      absl::string_view config_update,
                                      const compiler::CompileOptions& options) {
  IPUPOD_ASSIGN_OR_RETURN(std::string model, ReadFile(onnx));
  compiler::IpuConfig config;
  IPUPOD_RETURN_IF_ERROR(compiler::UpdateFromString(config, config_update));
  IPUPOD_ASSIGN_OR_RETURN(compiler::Executable executable,
                          compiler::Compile(model, config, options));
  IPUPOD_ASSIGN_OR_RETURN(std::string ipx, compiler::WriteExecutable(executable));
  Loaded loaded;
  v1::AttachRequest request;
  request.set_num_ipus(static_cast<uint32_t>(executable.ipus.reserved));
  loaded.call = pod.client->StartAttach(request);
  IPUPOD_ASSIGN_OR_RETURN(v1::SessionInfo session, loaded.call->WaitForGrant(nullptr));
  loaded.session = session.session();
  IPUPOD_RETURN_IF_ERROR(pod.client->UploadExecutable(ipx).status());
  IPUPOD_ASSIGN_OR_RETURN(loaded.program,
                          pod.client->Load(loaded.session, executable.content_hash));
  return loaded;
}

RoundFlags ParseRoundFlags(int argc, char** argv, RoundFlags defaults,
                           const std::function<void(const std::string&, int)>& other) {
  RoundFlags flags = defaults;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const int value = std::atoi(argv[i + 1]);
    if (flag == "--steps") {
      flags.steps = value;
    } else if (flag == "--rounds") {
      flags.rounds = value;
    } else if (flag == "--threads") {
      flags.threads = value;
    } else if (other) {
      other(flag, value);
    }
  }
  flags.steps = std::max(flags.steps, 1);
  flags.rounds = std::max(flags.rounds, 1);
  if (flags.threads <= 0) flags.threads = kernels::MaxBlasThreads();
  return flags;
}

int RunModelBench(const char* name, int threads,
                  const std::function<absl::Status(Pod&, const fs::path&)>& body) {
  if (absl::Status s = kernels::SetBlasThreads(threads); !s.ok()) {
    std::fprintf(stderr, "%s: %s\n", name, std::string(s.message()).c_str());
    return 2;
  }
  const fs::path work = fs::temp_directory_path() / absl::StrCat("ipupod-", name, "-", getpid());
  fs::create_directories(work);
  absl::StatusOr<Pod> pod = StartPod(work, threads);
  absl::Status status = pod.ok() ? body(*pod, work) : pod.status();
  fs::remove_all(work);
  if (!status.ok()) {
    std::fprintf(stderr, "%s: %s\n", name, status.ToString().c_str());
    return 1;
  }
  return 0;
}

}  // namespace ipupod::bench
