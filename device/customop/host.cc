#include "device/customop/host.h"

#include <cerrno>
#include <cstring>
#include <exception>
#include <memory>
#include <optional>
#include <set>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "device/customop/custom_op_abi.h"
#include "device/customop/host_calls.h"
#include "device/customop/host_sandbox.h"
#include <dlfcn.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace ipupod::customop {
namespace {

// Sanitizers reserve terabytes of address space for their shadow memory: a host built
// with one cannot run under RLIMIT_AS (the tests of such builds know it).
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#else
constexpr bool kSanitized = false;
#endif

constexpr size_t kNameBytesMax = 256;
constexpr int kAttributeNamesMax = 256;

absl::Status BadTable(absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("its op table ", why));
}

// A NUL-terminated string of at most kNameBytesMax bytes, or nullopt.
std::optional<std::string> BoundedName(const char* s) {
  if (s == nullptr) return std::nullopt;
  const size_t n = strnlen(s, kNameBytesMax + 1);
  if (n == 0 || n > kNameBytesMax) return std::nullopt;
  return std::string(s, n);
}

absl::StatusOr<OpInfo> CheckOp(const IpupodCustomOp& op, int index) {
  const std::string at = absl::StrCat("op ", index);
  OpInfo info;
  std::optional<std::string> domain = BoundedName(op.domain);
  std::optional<std::string> name = BoundedName(op.name);
  if (!domain || !name) {
    return BadTable(
        absl::StrCat("gives ", at, " no domain or name (1 to ", kNameBytesMax, " bytes each)"));
  }
  info.domain = *domain;
  info.name = *name;
  const std::string op_name = absl::StrCat(info.domain, "::", info.name);
  if (op.since_version < 1 || (op.end_version != 0 && op.end_version < op.since_version)) {
    return BadTable(absl::StrCat("gives ", op_name, " the versions ", op.since_version, "..",
                                 op.end_version, "; since_version >= 1, end_version 0 or >= it"));
  }
  if (op.num_inputs < 0 || op.num_inputs > kOperandsMax || op.num_outputs < 1 ||
      op.num_outputs > kOperandsMax) {
    return BadTable(absl::StrCat("gives ", op_name, " ", op.num_inputs, " inputs and ",
                                 op.num_outputs, " outputs; 0..", kOperandsMax, " and 1..",
                                 kOperandsMax, " are allowed"));
  }
  if (op.infer_shapes == nullptr || op.compute == nullptr) {
    return BadTable(absl::StrCat("gives ", op_name, " no shape or no compute function"));
  }
  info.since_version = op.since_version;
  info.end_version = op.end_version;
  info.num_inputs = op.num_inputs;
  info.num_outputs = op.num_outputs;
  info.has_gradient = op.gradient != nullptr;
  for (int32_t i = 0; i < op.num_inputs; ++i) {
    const int32_t t = op.input_types != nullptr ? op.input_types[i] : IPUPOD_DTYPE_UNDEFINED;
    if (t != IPUPOD_DTYPE_UNDEFINED && DTypeBytes(t) < 0) {
      return BadTable(absl::StrCat("gives input ", i, " of ", op_name, " the unknown dtype ", t));
    }
    info.input_types.push_back(t);
  }
  info.any_attribute = op.attributes == nullptr;
  for (int k = 0; op.attributes != nullptr && op.attributes[k] != nullptr; ++k) {
    std::optional<std::string> attr = BoundedName(op.attributes[k]);
    if (!attr || k >= kAttributeNamesMax) {
      return BadTable(absl::StrCat("lists an attribute of ", op_name, " that is empty, longer ",
                                   "than ", kNameBytesMax, " bytes, or past the ",
                                   kAttributeNamesMax, "th"));
    }
    info.attributes.push_back(*attr);
  }
  return info;
}

// Ends the process when ipupodd ends, whatever the library is doing: a thread that waits
// on a pidfd of the parent (PR_SET_PDEATHSIG would follow the *thread* that started the
// host, and ipupodd's request threads come and go).
absl::Status WatchParent(pid_t parent) {
  const int pidfd = static_cast<int>(syscall(SYS_pidfd_open, parent, 0));
  if (pidfd < 0 || getppid() != parent) return absl::AbortedError("the parent is gone");
  std::thread([pidfd] {
    pollfd fd{pidfd, POLLIN, 0};
    while (poll(&fd, 1, -1) < 0 && errno == EINTR) {
    }
    _exit(3);
  }).detach();
  return absl::OkStatus();
}

// Confines the process before the library is loaded (host.h).
absl::Status Confine(const HostOptions& options) {
  if (options.parent != 0) IPUPOD_RETURN_IF_ERROR(WatchParent(options.parent));
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
    return absl::InternalError("PR_SET_NO_NEW_PRIVS");
  }
  const rlimit no_core{0, 0};
  setrlimit(RLIMIT_CORE, &no_core);
  if (options.address_space_bytes > 0 && !kSanitized) {
    const rlim_t bytes = static_cast<rlim_t>(options.address_space_bytes);
    const rlimit as{bytes, bytes};
    if (setrlimit(RLIMIT_AS, &as) != 0) {
      return absl::InternalError(absl::StrCat("RLIMIT_AS: ", std::strerror(errno)));
    }
  }
  return absl::OkStatus();
}

struct Loaded {
  const IpupodCustomOpLibrary* table = nullptr;
  LibraryInfo info;
};

absl::StatusOr<Loaded> LoadLibrary(const std::string& path) {
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    return absl::FailedPreconditionError(
        absl::StrCat("dlopen failed: ", why != nullptr ? why : "unknown error"));
  }
  auto get =
      reinterpret_cast<IpupodCustomOpLibraryGetFn>(dlsym(handle, IPUPOD_CUSTOM_OP_ENTRY_POINT));
  if (get == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("it exports no ", IPUPOD_CUSTOM_OP_ENTRY_POINT,
                     " (a custom op library's entry point, device/customop/custom_op_abi.h)"));
  }
  Loaded loaded;
  try {
    loaded.table = get(IPUPOD_CUSTOM_OP_ABI_VERSION);
  } catch (...) {
    return absl::FailedPreconditionError(
        absl::StrCat(IPUPOD_CUSTOM_OP_ENTRY_POINT, " threw a C++ exception"));
  }
  IPUPOD_ASSIGN_OR_RETURN(loaded.info, CheckLibraryTable(loaded.table));
  return loaded;  // the handle stays open for the process's life
}

// Reads exactly n bytes; false at EOF or on an error.
bool ReadAll(int fd, char* out, size_t n) {
  while (n > 0) {
    const ssize_t got = recv(fd, out, n, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    out += got;
    n -= static_cast<size_t>(got);
  }
  return true;
}

bool WriteFrame(int fd, const std::string& payload) {
  const std::string frame = FrameHeader(payload.size()) + payload;
  const char* p = frame.data();
  size_t n = frame.size();
  while (n > 0) {
    const ssize_t sent = send(fd, p, n, MSG_NOSIGNAL);
    if (sent < 0 && errno == EINTR) continue;
    if (sent <= 0) return false;
    p += sent;
    n -= static_cast<size_t>(sent);
  }
  return true;
}

std::optional<std::string> ReadFrame(int fd) {
  char header[kFrameHeaderBytes];
  if (!ReadAll(fd, header, sizeof(header))) return std::nullopt;
  uint32_t n = 0;
  std::memcpy(&n, header, sizeof(n));
  std::string payload(n, '\0');
  if (!ReadAll(fd, payload.data(), n)) return std::nullopt;
  return payload;
}

// Re-arms RLIMIT_CPU so that the coming call may use `seconds` more CPU seconds.
void ArmCpuLimit(int64_t seconds) {
  if (seconds <= 0) return;
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  const int64_t used = usage.ru_utime.tv_sec + usage.ru_stime.tv_sec + 1;
  rlimit cpu{};
  getrlimit(RLIMIT_CPU, &cpu);
  cpu.rlim_cur = static_cast<rlim_t>(used + seconds);
  if (cpu.rlim_max != RLIM_INFINITY && cpu.rlim_cur > cpu.rlim_max) cpu.rlim_cur = cpu.rlim_max;
  setrlimit(RLIMIT_CPU, &cpu);
}

// Serves requests until the socket closes; the exit code.
int Serve(const Loaded& loaded, const HostOptions& options) {
  HostCalls calls(loaded.table,
                  options.cpu_seconds_per_call > 0
                      ? [seconds = options.cpu_seconds_per_call] { ArmCpuLimit(seconds); }
                      : std::function<void()>());
  while (true) {
    std::optional<std::string> request = ReadFrame(kHostSocketFd);
    if (!request.has_value()) return 0;  // ipupodd closed its end
    bool fatal = false;
    const std::string reply = calls.Handle(*request, fatal);
    if (!WriteFrame(kHostSocketFd, reply)) return 5;
    if (fatal) return 4;
  }
}

}  // namespace

absl::StatusOr<LibraryInfo> CheckLibraryTable(const void* table) {
  const auto* lib = static_cast<const IpupodCustomOpLibrary*>(table);
  if (lib == nullptr) return BadTable("is missing: the entry point returned NULL");
  if (lib->abi_version != IPUPOD_CUSTOM_OP_ABI_VERSION) {
    return BadTable(absl::StrCat("is of ABI version ", lib->abi_version, "; this ipupod reads ",
                                 IPUPOD_CUSTOM_OP_ABI_VERSION, ": rebuild the library against ",
                                 "this ipupod's custom_op_abi.h"));
  }
  if (lib->num_ops < 1 || lib->num_ops > kOpsMax || lib->ops == nullptr) {
    return BadTable(absl::StrCat("has ", lib->num_ops, " ops; 1 to ", kOpsMax, " are allowed"));
  }
  LibraryInfo info;
  info.abi_version = lib->abi_version;
  info.name = BoundedName(lib->name).value_or("(unnamed)");
  std::set<std::tuple<std::string, std::string, int32_t>> seen;
  for (int32_t i = 0; i < lib->num_ops; ++i) {
    IPUPOD_ASSIGN_OR_RETURN(OpInfo op, CheckOp(lib->ops[i], i));
    if (!seen.insert({op.domain, op.name, op.since_version}).second) {
      return BadTable(absl::StrCat("lists ", op.domain, "::", op.name, " version ",
                                   op.since_version, " twice"));
    }
    info.ops.push_back(std::move(op));
  }
  return info;
}

absl::StatusOr<HostOptions> ParseHostArgs(int argc, const char* const* argv) {
  HostOptions options;
  for (int i = 1; i < argc; ++i) {
    const absl::string_view flag = argv[i];
    if (i + 1 >= argc) return absl::InvalidArgumentError(absl::StrCat(flag, " needs a value"));
    const char* value = argv[++i];
    int64_t number = 0;
    const bool numeric = absl::SimpleAtoi(value, &number) && number >= 0;
    if (flag == "--library") {
      options.library = value;
    } else if (flag == "--address-space-mb" && numeric) {
      options.address_space_bytes = number << 20;
    } else if (flag == "--cpu-seconds" && numeric) {
      options.cpu_seconds_per_call = number;
    } else if (flag == "--parent" && numeric) {
      options.parent = static_cast<pid_t>(number);
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown argument or bad value: ", flag, " ", value));
    }
  }
  if (options.library.empty() || options.library[0] != '/') {
    return absl::InvalidArgumentError("--library PATH (absolute) is required");
  }
  return options;
}

int RunHost(const HostOptions& options) {
  const absl::Status confined = Confine(options);
  if (absl::IsAborted(confined)) return 3;
  if (!confined.ok()) {
    WriteFrame(kHostSocketFd, EncodeHelloError(absl::StrCat("the host could not confine itself: ",
                                                            confined.message())));
    return 0;
  }
  absl::StatusOr<Loaded> loaded = LoadLibrary(options.library);
  if (loaded.ok() && !kSanitized) {  // a sanitizer's runtime opens files and forks itself
    const absl::Status sandboxed = DenyEscapes();
    if (!sandboxed.ok()) {
      loaded = absl::FailedPreconditionError(
          absl::StrCat("the helper cannot take system calls away from it (", sandboxed.message(),
                       "), and ipupod does not run a library it cannot contain"));
    }
  }
  if (!loaded.ok()) {
    return WriteFrame(kHostSocketFd, EncodeHelloError(loaded.status().message())) ? 0 : 5;
  }
  if (!WriteFrame(kHostSocketFd, EncodeHelloOk(loaded->info))) return 5;
  return Serve(*loaded, options);
}

}  // namespace ipupod::customop
