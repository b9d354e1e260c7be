// `ipupod attach`: wait for IPUs, print the grant, then hold them until
// Ctrl-C or while COMMAND runs.
//
// Signals: a SignalWatcher (sigtimedwait on its own thread) receives SIGINT,
// SIGTERM, SIGHUP and SIGCHLD; it is created before the gRPC channel so
// every thread has them blocked. While queued, an interrupt cancels the
// attach stream from the watcher thread, so WaitForGrant returns CANCELLED
// at once and the request leaves the queue. After the grant the main thread
// polls (every kPollInterval) the watcher, the child and the stream.
#include "client/cli/attach.h"

#include <cstdio>
#include <filesystem>
#include <memory>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/cli/commands.h"
#include "client/cli/exit_codes.h"
#include "client/cli/signal_watcher.h"
#include <signal.h>
#include <unistd.h>

namespace ipupod::cli {
namespace {

constexpr absl::Duration kPollInterval = absl::Milliseconds(50);
// After the session ended under COMMAND: SIGTERM, then SIGKILL after this.
constexpr absl::Duration kCommandStopGrace = absl::Seconds(10);
constexpr size_t kClientLabelMax = 200;

int ReleaseSession(Context& ctx, client::AttachCall& call, const v1::SessionInfo& session,
                   int exit_code) {
  absl::Status released = call.Release();
  if (!released.ok()) return ctx.FailLate(released, {.session = session.session()});
  ctx.Note({{"released", {{"session", session.session()}, {"exit_code", exit_code}}}},
           absl::StrCat("released session ", session.session(), "\n"));
  return exit_code;
}

// Shows the preemption notice once, when it arrives; true that time.
bool NotePreemption(Context& ctx, client::AttachCall& call, bool& noted) {
  if (noted) return false;
  std::optional<v1::Preemption> notice = call.preempted();
  if (!notice) return false;
  noted = true;
  ctx.Note({{"preempted",
             {{"session", notice->session()},
              {"by_user", notice->by_user()},
              {"by_qos", notice->by_qos()},
              {"deadline_unix_ms", notice->deadline_unix_ms()},
              {"grace_seconds", notice->grace_seconds()}}}},
           absl::StrCat("preempted: ", notice->message(), "\n"));
  return true;
}

int Hold(Context& ctx, client::AttachCall& call, SignalWatcher& signals,
         const v1::SessionInfo& session) {
  ctx.Note(nullptr, absl::StrCat("holding session ", session.session(),
                                 "; press Ctrl-C to release it (or run `ipupod detach ",
                                 session.session(), "` elsewhere)\n"));
  bool noted = false;
  while (true) {
    SignalWatcher::Events events = signals.Wait(kPollInterval);
    if (events.interrupt_signal != 0) return ReleaseSession(ctx, call, session, kExitOk);
    // Holding nothing but the IPUs: a preempted hold gives them back at once.
    if (NotePreemption(ctx, call, noted)) return ReleaseSession(ctx, call, session, kExitOk);
    if (call.Ended()) {
      return ctx.FailLate(call.WaitForEnd(absl::ZeroDuration()), {.session = session.session()});
    }
  }
}

// Waits (bounded) for the child to exit; SIGKILL after the grace period.
int StopChild(SignalWatcher& signals, ChildProcess& child) {
  child.Signal(SIGTERM);
  absl::Time deadline = absl::Now() + kCommandStopGrace;
  while (!child.Poll() && absl::Now() < deadline) signals.Wait(kPollInterval);
  if (child.Poll()) return *child.Poll();
  child.Signal(SIGKILL);
  deadline = absl::Now() + kCommandStopGrace;
  while (!child.Poll() && absl::Now() < deadline) signals.Wait(kPollInterval);
  return child.Poll().value_or(128 + SIGKILL);
}

int SessionEndedUnderCommand(Context& ctx, client::AttachCall& call, SignalWatcher& signals,
                             ChildProcess& child, const v1::SessionInfo& session) {
  absl::Status ended = call.WaitForEnd(absl::ZeroDuration());
  int exit_code = ctx.FailLate(ended, {.session = session.session()});
  int child_code = StopChild(signals, child);
  ctx.Note({{"stopped_command", {{"exit_code", child_code}}}},
           absl::StrCat("stopped `", absl::StrJoin(ctx.command(), " "),
                        "` because its session ended (its exit code was ", child_code, ")\n"));
  return exit_code;
}

int RunCommand(Context& ctx, client::AttachCall& call, SignalWatcher& signals,
               const v1::SessionInfo& session) {
  ctx.Note(nullptr, absl::StrCat("running `", absl::StrJoin(ctx.command(), " "),
                                 "` with IPUPOD_SESSION=", session.session(), "\n"));
  std::fflush(nullptr);  // the child shares stdout/stderr: our lines come first
  absl::StatusOr<ChildProcess> child =
      ChildProcess::Spawn(ctx.command(), SessionEnvironment(ctx.options(), session));
  if (!child.ok()) {
    (void)call.Release();
    ctx.FailLate(child.status(), {.session = session.session()});
    return ExitCodeForSpawnError(child.status());
  }
  bool noted = false;
  while (true) {
    SignalWatcher::Events events = signals.Wait(kPollInterval);
    if (std::optional<int> code = child->Poll()) {
      return ReleaseSession(ctx, call, session, *code);
    }
    // Preempted: COMMAND gets SIGTERM at once so it can save its work and
    // exit within the grace; the IPUs are released when it does.
    if (NotePreemption(ctx, call, noted)) child->Signal(SIGTERM);
    // A terminal's Ctrl-C already reached COMMAND (same process group); a
    // signal sent to ipupod alone is passed on so COMMAND can clean up.
    if (events.interrupt_signal != 0 && events.interrupt_from_user) {
      child->Signal(events.interrupt_signal);
    }
    if (call.Ended()) return SessionEndedUnderCommand(ctx, call, signals, *child, session);
  }
}

int RunAttach(Context& ctx, const AttachArgs& args) {
  absl::StatusOr<v1::AttachRequest> request =
      BuildAttachRequest(args, ClientLabel(HostName(), getpid(), ctx.command()));
  if (!request.ok()) return ctx.UsageError(request.status().message());
  SignalWatcher signals;  // before the channel creates gRPC's threads
  auto client = ctx.Connect();
  if (!client.ok()) return ctx.Fail(client.status());
  std::unique_ptr<client::AttachCall> call = (*client)->StartAttach(*request);
  absl::StatusOr<v1::SessionInfo> grant = AwaitGrant(ctx, *call, signals);
  if (signals.Interrupted()) {
    (void)call->Release();  // a grant that raced with Ctrl-C is given back
    return ctx.Fail(absl::CancelledError("interrupted while waiting for IPUs; left the queue"));
  }
  if (!grant.ok()) {
    return ctx.Fail(grant.status(),
                    {.partition = args.partition, .attach_without_wait = !request->wait()});
  }
  ctx.Print(SessionJson(*grant), GrantText(*grant));
  if (ctx.command().empty()) return Hold(ctx, *call, signals, *grant);
  return RunCommand(ctx, *call, signals, *grant);
}

}  // namespace

std::string HostName() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "localhost";
  return name;
}

absl::StatusOr<v1::SessionInfo> AwaitGrant(Context& ctx, client::AttachCall& call,
                                           SignalWatcher& signals) {
  signals.SetInterruptHandler([&call](int, bool) { call.Cancel(); });
  absl::StatusOr<v1::SessionInfo> grant = call.WaitForGrant(
      [&ctx](const v1::QueuePosition& q) { ctx.Note(QueuedJson(q), QueuedText(q)); });
  signals.SetInterruptHandler(nullptr);
  return grant;
}

absl::StatusOr<v1::AttachRequest> BuildAttachRequest(const AttachArgs& args,
                                                     absl::string_view client_label) {
  absl::StatusOr<uint32_t> ipus = ParseIpuCount(args.ipus, "--ipus");
  if (!ipus.ok()) return ipus.status();
  v1::AttachRequest request;
  request.set_num_ipus(*ipus);
  request.set_partition(args.partition);
  request.set_wait(args.wait || !args.wait_timeout.empty());
  if (!args.wait_timeout.empty()) {
    absl::StatusOr<double> seconds = ParseSeconds(args.wait_timeout, "--wait-timeout", true);
    if (!seconds.ok()) return seconds.status();
    request.set_wait_timeout_seconds(*seconds);
  }
  request.set_auto_round(args.auto_round);
  request.set_client(std::string(client_label));
  request.set_account(args.account);
  request.set_qos(args.qos);
  if (!args.time_limit.empty()) {
    absl::StatusOr<absl::Duration> limit =
        ParseDuration(args.time_limit, "--time-limit", kTimeLimitMax);
    if (!limit.ok()) return limit.status();
    request.set_time_limit_seconds(absl::ToDoubleSeconds(*limit));
  }
  return request;
}

void AddAssociationOptions(CLI::App* command, AttachArgs& args) {
  command->add_option("--account", args.account, "Charge this account (default: your default)")
      ->type_name("ACCOUNT");
  command->add_option("--qos", args.qos, "Quality of service: normal (default), high, scavenger")
      ->type_name("QOS");
  command
      ->add_option("--time-limit", args.time_limit,
                   "Hold the IPUs at most this long (90s, 30m, 2h); the session ends there "
                   "(TIMEOUT). Lets backfill start you sooner")
      ->type_name("DURATION");
}

std::string ClientLabel(absl::string_view host, int pid, const std::vector<std::string>& command) {
  // The program's name only: arguments carry paths, and sometimes secrets (--db-password=...).
  absl::string_view program = command.empty() ? "hold" : absl::string_view(command[0]);
  const size_t slash = program.rfind('/');
  if (slash != absl::string_view::npos) program.remove_prefix(slash + 1);
  std::string label = absl::StrCat(host, " pid ", pid, ": ", program);
  if (label.size() > kClientLabelMax) label.resize(kClientLabelMax);
  return label;
}

ChildProcess::EnvVars SessionEnvironment(const client::ClientOptions& options,
                                         const v1::SessionInfo& session) {
  ChildProcess::EnvVars env = {
      {"IPUPOD_SESSION", session.session()},
      {"IPUPOD_SERVER", options.server},
      {"IPUPOD_IPUS", absl::StrJoin(session.ipus(), ",")},
      {"IPUPOD_DEVICE_ID", absl::StrCat(session.device_id())},
      {"IPUPOD_USER", options.user},
  };
  if (!options.token.empty()) env.emplace_back("IPUPOD_TOKEN", options.token);
  // The TLS files, absolute: COMMAND's own ipupod calls connect as this one
  // does even if it changes directory.
  const std::pair<const char*, const std::string*> tls[] = {{"IPUPOD_TLS_CA", &options.tls_ca},
                                                            {"IPUPOD_TLS_CERT", &options.tls_cert},
                                                            {"IPUPOD_TLS_KEY", &options.tls_key}};
  for (const auto& [name, path] : tls) {
    std::error_code error;
    const std::filesystem::path absolute = std::filesystem::absolute(*path, error);
    if (!path->empty()) env.emplace_back(name, error ? *path : absolute.string());
  }
  return env;
}

void AddAttachCommand(CLI::App& app, Selection& selection) {
  auto args = std::make_shared<AttachArgs>();
  CLI::App* attach = app.add_subcommand("attach", "Reserve IPUs; hold them or run a command");
  attach->add_option("--ipus", args->ipus, "Number of IPUs (a power of two unless --auto-round)")
      ->type_name("N")
      ->required();
  attach->add_option("--partition", args->partition, "Attach inside this partition you own")
      ->type_name("NAME");
  attach->add_flag("--wait", args->wait, "Queue until the IPUs are free (default: fail at once)");
  attach
      ->add_option("--wait-timeout", args->wait_timeout,
                   "Give up waiting after S seconds (implies --wait; 0 = no limit)")
      ->type_name("S");
  attach->add_flag("--auto-round", args->auto_round,
                   "Round --ipus up to a power of two; the extra IPUs stay reserved but idle");
  AddAssociationOptions(attach, *args);
  attach->footer(
      "Prints the grant as soon as the IPUs are yours (stdout): `attached session s1-2: IPUs\n"
      "4-7 (device 25)`, or with --json one line {\"session\",\"ipus\",\"device_id\",...}.\n"
      "While queued, positions are reported on stderr (JSON lines {\"queued\": ...} with\n"
      "--json); Ctrl-C leaves the queue at once (exit code 130).\n"
      "\n"
      "Without COMMAND the IPUs are held until Ctrl-C (or SIGTERM), then released (exit 0).\n"
      "With `-- COMMAND ARGS...` the command runs with IPUPOD_SESSION, IPUPOD_SERVER,\n"
      "IPUPOD_IPUS and IPUPOD_DEVICE_ID set (and IPUPOD_TOKEN, IPUPOD_TLS_CA,\n"
      "IPUPOD_TLS_CERT, IPUPOD_TLS_KEY when given, so its own ipupod calls connect\n"
      "as this one does), the IPUs are released when it exits, and\n"
      "ipupod exits with its exit code (128+N if killed by signal N; 127 if not found).\n"
      "If the session ends under it (detached by an admin, server lost), the command gets\n"
      "SIGTERM and ipupod exits with the error's code (11 detached, 8 server lost).\n"
      "A --qos scavenger session may be preempted for a request of a higher class: the\n"
      "notice is printed (stderr), COMMAND gets SIGTERM at once and has the server's\n"
      "grace (30 s by default) to exit; a hold without COMMAND releases at once.\n"
      "With --json, stdout holds exactly one document: the grant, or the error if there\n"
      "was no grant; later events (released, errors) are JSON lines on stderr.\n"
      "\n"
      "Examples:\n"
      "  ipupod attach --ipus 4 --wait -- python train.py --epochs 3\n"
      "  ipupod attach --ipus 3 --auto-round --partition p1\n"
      "  ipupod attach --ipus 8 --wait-timeout 600 --json -- ./bench.sh\n"
      "  ipupod attach --ipus 2 --wait --qos scavenger --time-limit 30m -- ./sweep.sh\n"
      "\n"
      "The queue is ordered by priority (see `ipupod priority`, `ipupod shares`); a\n"
      "request with --time-limit may start ahead of larger ones when it will be done\n"
      "before their IPUs free up. A session ends when its --time-limit runs out, or\n"
      "without one when its QoS's max wall time does (if the server sets one): COMMAND\n"
      "gets SIGTERM and ipupod exits 6 (deadline exceeded).");
  OnSelected(
      attach, selection, "attach", [args](Context& ctx) { return RunAttach(ctx, *args); },
      /*takes_command=*/true);
}

}  // namespace ipupod::cli
