// `ipupod detach | queue | session show | session reset` (SessionService);
// `ipupod attach` lives in attach.cc.
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/cli/commands.h"

namespace ipupod::cli {
namespace {

struct SessionArgs {
  std::string session;
};

// `ipupod queue`: text shows the head of a long queue, JSON every entry,
// unless told otherwise.
inline constexpr uint32_t kQueueRowsShown = 100;
struct QueueArgs {
  bool all = false;
  uint32_t limit = 0;  // 0: kQueueRowsShown for text, all for --json
};

int RunDetach(Context& ctx, const SessionArgs& args) {
  auto client = ctx.Connect();
  if (!client.ok()) return ctx.Fail(client.status());
  v1::DetachRequest request;
  request.set_session(args.session);
  auto detached = (*client)->Detach(request);
  if (!detached.ok()) return ctx.Fail(detached.status(), {.session = args.session});
  return ctx.Print(DetachJson(args.session, *detached), DetachText(args.session, *detached));
}

int RunQueue(Context& ctx, const QueueArgs& args) {
  auto client = ctx.Connect();
  if (!client.ok()) return ctx.Fail(client.status());
  v1::ListQueueRequest request;
  if (!args.all) request.set_limit(args.limit > 0 ? args.limit : ctx.json() ? 0 : kQueueRowsShown);
  auto queue = (*client)->ListQueue(request);
  if (!queue.ok()) return ctx.Fail(queue.status());
  return ctx.Print([&] { return QueueJson(*queue); }, [&] { return QueueText(*queue); });
}

int RunShow(Context& ctx, const SessionArgs& args) {
  auto client = ctx.Connect();
  if (!client.ok()) return ctx.Fail(client.status());
  v1::GetSessionRequest request;
  request.set_session(args.session);
  auto session = (*client)->GetSession(request);
  if (!session.ok()) return ctx.Fail(session.status(), {.session = args.session});
  Json doc = SessionJson(*session);
  std::string text = SessionText(*session, absl::Now());
  // What the session has loaded, if anything (any error reads as nothing).
  absl::StatusOr<v1::LoadedProgram> loaded = (*client)->GetLoaded(args.session);
  if (loaded.ok()) {
    const v1::RunShape& shape = loaded->run_shape();
    doc["loaded"] = {{"sha256", loaded->executable().sha256()},
                     {"samples_per_step", shape.samples_per_step()},
                     {"pipeline_stages", shape.pipeline_stages()},
                     {"runs", loaded->runs()}};
    absl::StrAppend(&text, "loaded: executable ", loaded->executable().sha256().substr(0, 16), ", ",
                    shape.samples_per_step(), " samples per step, ", loaded->runs(), " runs\n");
  } else {
    doc["loaded"] = nullptr;
    absl::StrAppend(&text, "loaded: nothing\n");
  }
  return ctx.Print(doc, text);
}

int RunReset(Context& ctx, const SessionArgs& args) {
  auto client = ctx.Connect();
  if (!client.ok()) return ctx.Fail(client.status());
  v1::ResetSessionRequest request;
  request.set_session(args.session);
  auto reset = (*client)->ResetSession(request);
  if (!reset.ok()) return ctx.Fail(reset.status(), {.session = args.session});
  return ctx.Print(ResetJson(*reset), ResetText(absl::StrCat("session ", args.session), *reset));
}

}  // namespace

void AddSessionCommands(CLI::App& app, Selection& selection) {
  AddAttachCommand(app, selection);
  auto args = std::make_shared<SessionArgs>();

  CLI::App* detach = app.add_subcommand("detach", "End a session and release its IPUs");
  detach->add_option("SESSION", args->session, "Session id, e.g. s1-2")
      ->type_name("SESSION")
      ->required();
  detach->footer(
      "Ends a session (your own, or any as an admin). Its `ipupod attach` sees the\n"
      "session end (exit code 11) and stops the command it runs.\n\n"
      "Example:\n  ipupod detach s1-2");
  OnSelected(detach, selection, "detach", [args](Context& ctx) { return RunDetach(ctx, *args); });

  CLI::App* queue = app.add_subcommand("queue", "Show the attach wait queue");
  auto queue_args = std::make_shared<QueueArgs>();
  queue->add_flag("--all", queue_args->all, "Every waiting request (text shows the first 100)");
  queue->add_option("--limit", queue_args->limit, "The first N waiting requests")
      ->type_name("N")
      ->check(CLI::Range(1u, 1000000u));
  queue->footer(
      "One row per waiting `ipupod attach --wait`, first to be served first: ticket, user,\n"
      "IPUs requested, partition, time waited and wait timeout. A long queue shows its\n"
      "first 100 and how many more wait (--all or --limit N for more); --json has every\n"
      "entry unless --limit is given.\n\n"
      "Examples:\n  ipupod queue\n  ipupod queue --all\n  ipupod --json queue --limit 10");
  OnSelected(queue, selection, "queue",
             [queue_args](Context& ctx) { return RunQueue(ctx, *queue_args); });

  CLI::App* group = app.add_subcommand("session", "Show or reset a session");
  group->require_subcommand(1);
  group->footer(
      "A session is the IPUs one `ipupod attach` holds; its id (s1-2) is printed at the\n"
      "grant and given to the command as IPUPOD_SESSION.\n\n"
      "Examples:\n  ipupod session show s1-2\n  ipupod session reset s1-2");
  CLI::App* show = group->add_subcommand("show", "Show a session (fails with its device error)");
  show->add_option("SESSION", args->session, "Session id, e.g. s1-2")
      ->type_name("SESSION")
      ->required();
  show->footer(
      "Prints the session's IPUs, device id, owner and loaded executable. If one of its IPUs "
      "faulted the\n"
      "command fails with the device error (exit codes 20-24) and says how to recover.\n\n"
      "Example:\n  ipupod session show s1-2");
  OnSelected(show, selection, "session show", [args](Context& ctx) { return RunShow(ctx, *args); });
  CLI::App* reset = group->add_subcommand("reset", "Reset a session's IPUs as one device");
  reset->add_option("SESSION", args->session, "Session id, e.g. s1-2")
      ->type_name("SESSION")
      ->required();
  reset->footer(
      "Clears IPU_RESET, LINK_RESET and PARTITION_RESET errors on the session's IPUs;\n"
      "device memory is cleared, so load again afterwards.\n\n"
      "Example:\n  ipupod session reset s1-2");
  OnSelected(reset, selection, "session reset",
             [args](Context& ctx) { return RunReset(ctx, *args); });
}

}  // namespace ipupod::cli
