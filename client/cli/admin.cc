// `ipupod ipu reset|repair`, `ipupod pod reset`, `ipupod fault inject`
// (PodService; repair, pod reset and faults are admin operations).
#include <memory>

#include "absl/strings/str_cat.h"
#include "client/cli/commands.h"

namespace ipupod::cli {
namespace {

struct AdminArgs {
  std::string ipu;
  std::string kind;
};

int RunIpuReset(Context& ctx, const AdminArgs& args) {
  auto id = ParseIpuId(args.ipu, "IPU id");
  if (!id.ok()) return ctx.UsageError(id.status().message());
  auto client = ctx.Connect();
  if (!client.ok()) return ctx.Fail(client.status());
  v1::ResetIpuRequest request;
  request.set_ipu(*id);
  auto reset = (*client)->ResetIpu(request);
  if (!reset.ok()) return ctx.Fail(reset.status());
  return ctx.Print(ResetJson(*reset), ResetText(absl::StrCat("IPU ", *id), *reset));
}

int RunIpuRepair(Context& ctx, const AdminArgs& args) {
  auto id = ParseIpuId(args.ipu, "IPU id");
  if (!id.ok()) return ctx.UsageError(id.status().message());
  auto client = ctx.Connect();
  if (!client.ok()) return ctx.Fail(client.status());
  v1::RepairIpuRequest request;
  request.set_ipu(*id);
  auto repaired = (*client)->RepairIpu(request);
  if (!repaired.ok()) return ctx.Fail(repaired.status());
  return ctx.Print(RepairJson(*repaired), RepairText(*repaired));
}

int RunPodReset(Context& ctx) {
  auto client = ctx.Connect();
  if (!client.ok()) return ctx.Fail(client.status());
  auto reset = (*client)->ResetPod();
  if (!reset.ok()) return ctx.Fail(reset.status());
  return ctx.Print(ResetJson(*reset), ResetText("the pod", *reset));
}

int RunFaultInject(Context& ctx, const AdminArgs& args) {
  auto id = ParseIpuId(args.ipu, "--ipu");
  if (!id.ok()) return ctx.UsageError(id.status().message());
  auto kind = ParseFaultKind(args.kind);
  if (!kind.ok()) return ctx.UsageError(kind.status().message());
  auto client = ctx.Connect();
  if (!client.ok()) return ctx.Fail(client.status());
  v1::InjectFaultRequest request;
  request.set_ipu(*id);
  request.set_kind(*kind);
  auto injected = (*client)->InjectFault(request);
  if (!injected.ok()) return ctx.Fail(injected.status());
  return ctx.Print(InjectFaultJson(*injected), InjectFaultText(*id, args.kind, *injected));
}

}  // namespace

void AddAdminCommands(CLI::App& app, Selection& selection) {
  auto args = std::make_shared<AdminArgs>();

  CLI::App* ipu = app.add_subcommand("ipu", "Reset or repair one IPU");
  ipu->require_subcommand(1);
  ipu->footer("Examples:\n  ipupod ipu reset 3\n  ipupod --user admin ipu repair 5");
  CLI::App* reset = ipu->add_subcommand("reset", "Reset one IPU (clears IPU_RESET errors)");
  reset->add_option("ID", args->ipu, "IPU id, as in `ipupod info`")->type_name("ID")->required();
  reset->footer(
      "Allowed for the owner of the IPU's session or partition, and for admins. A reset\n"
      "clears the IPU's memory: its session must load again.\n\n"
      "Example:\n  ipupod ipu reset 3");
  OnSelected(reset, selection, "ipu reset",
             [args](Context& ctx) { return RunIpuReset(ctx, *args); });
  CLI::App* repair = ipu->add_subcommand("repair", "Admin: return a failed IPU to service");
  repair->add_option("ID", args->ipu, "IPU id, as in `ipupod info`")->type_name("ID")->required();
  repair->footer(
      "An IPU with an unrecoverable error is `failed` and out of service until an admin\n"
      "repairs it.\n\nExample:\n  ipupod ipu repair 5");
  OnSelected(repair, selection, "ipu repair",
             [args](Context& ctx) { return RunIpuRepair(ctx, *args); });

  CLI::App* pod = app.add_subcommand("pod", "Admin: reset the whole pod");
  pod->require_subcommand(1);
  pod->footer("Example:\n  ipupod --user admin pod reset");
  CLI::App* pod_reset = pod->add_subcommand("reset", "Admin: reset every IPU (FULL_RESET)");
  pod_reset->footer(
      "Clears every recoverable error on every IPU; all sessions must load again.\n\n"
      "Example:\n  ipupod pod reset");
  OnSelected(pod_reset, selection, "pod reset", RunPodReset);

  CLI::App* fault = app.add_subcommand("fault", "Admin: inject device faults (testing)");
  fault->require_subcommand(1);
  fault->footer("Example:\n  ipupod --user admin fault inject --ipu 3 --kind ipu-reset");
  CLI::App* inject = fault->add_subcommand("inject", "Admin: inject a fault on one IPU");
  inject->add_option("--ipu", args->ipu, "IPU id")->type_name("ID")->required();
  inject
      ->add_option("--kind", args->kind,
                   "ipu-reset | link-reset | partition-reset | full-reset | unrecoverable")
      ->type_name("KIND")
      ->required();
  inject->footer(
      "Sessions on the affected IPUs see the error on their next operation, with the\n"
      "recovery action of the kind (unrecoverable: the IPU fails and leaves service).\n\n"
      "Examples:\n"
      "  ipupod fault inject --ipu 3 --kind ipu-reset\n"
      "  ipupod fault inject --ipu 5 --kind unrecoverable");
  OnSelected(inject, selection, "fault inject",
             [args](Context& ctx) { return RunFaultInject(ctx, *args); });
}

}  // namespace ipupod::cli
