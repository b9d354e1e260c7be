// `ipupod info`: the whole pod in one call (GetPodInfo).
#include "absl/time/clock.h"
#include "client/cli/commands.h"

namespace ipupod::cli {
namespace {

int RunInfo(Context& ctx) {
  auto client = ctx.Connect();
  if (!client.ok()) return ctx.Fail(client.status());
  auto info = (*client)->GetPodInfo();
  if (!info.ok()) return ctx.Fail(info.status());
  return ctx.Print(PodInfoJson(*info), PodInfoText(*info, absl::Now()));
}

}  // namespace

void AddInfoCommand(CLI::App& app, Selection& selection) {
  CLI::App* info = app.add_subcommand("info", "Show the pod: every IPU, partition and session");
  info->footer(
      "Prints a summary of the pod, then one row per IPU (state, the recovery action of a\n"
      "faulted IPU, its partition, session, owner and device memory), the partitions and\n"
      "the sessions. IPU states: idle, attached, busy, error, resetting, failed.\n"
      "\n"
      "Examples:\n"
      "  ipupod info\n"
      "  ipupod info --json | jq '.ipus[] | select(.state == \"idle\") | .id'");
  OnSelected(info, selection, "info", RunInfo);
}

}  // namespace ipupod::cli
