// `ipupod partition ...`: named power-of-two partitions (PartitionService).
#include <memory>

#include "absl/strings/str_cat.h"
#include "client/cli/commands.h"

namespace ipupod::cli {
namespace {

struct PartitionArgs {
  std::string name;
  std::string size;
  bool force = false;
};

int RunCreate(Context& ctx, const PartitionArgs& args) {
  auto size = ParseIpuCount(args.size, "--size");
  if (!size.ok()) return ctx.UsageError(size.status().message());
  auto client = ctx.Connect();
  if (!client.ok()) return ctx.Fail(client.status());
  v1::CreatePartitionRequest request;
  request.set_name(args.name);
  request.set_size(*size);
  auto partition = (*client)->CreatePartition(request);
  if (!partition.ok()) return ctx.Fail(partition.status(), {.partition = args.name});
  return ctx.Print(PartitionJson(*partition), PartitionCreatedText(*partition));
}

int RunList(Context& ctx) {
  auto client = ctx.Connect();
  if (!client.ok()) return ctx.Fail(client.status());
  auto list = (*client)->ListPartitions();
  if (!list.ok()) return ctx.Fail(list.status());
  return ctx.Print(PartitionListJson(*list), PartitionsText(list->partitions()));
}

int RunShow(Context& ctx, const PartitionArgs& args) {
  auto client = ctx.Connect();
  if (!client.ok()) return ctx.Fail(client.status());
  v1::GetPartitionRequest request;
  request.set_name(args.name);
  auto partition = (*client)->GetPartition(request);
  if (!partition.ok()) return ctx.Fail(partition.status(), {.partition = args.name});
  return ctx.Print(PartitionJson(*partition), PartitionText(*partition));
}

int RunRemove(Context& ctx, const PartitionArgs& args) {
  auto client = ctx.Connect();
  if (!client.ok()) return ctx.Fail(client.status());
  v1::RemovePartitionRequest request;
  request.set_name(args.name);
  request.set_force(args.force);
  auto removed = (*client)->RemovePartition(request);
  if (!removed.ok()) return ctx.Fail(removed.status(), {.partition = args.name});
  return ctx.Print(RemovePartitionJson(args.name, *removed),
                   RemovePartitionText(args.name, *removed));
}

int RunReset(Context& ctx, const PartitionArgs& args) {
  auto client = ctx.Connect();
  if (!client.ok()) return ctx.Fail(client.status());
  v1::ResetPartitionRequest request;
  request.set_name(args.name);
  auto reset = (*client)->ResetPartition(request);
  if (!reset.ok()) return ctx.Fail(reset.status(), {.partition = args.name});
  return ctx.Print(ResetJson(*reset), ResetText(absl::StrCat("partition ", args.name), *reset));
}

CLI::App* AddNamed(CLI::App* group, const char* name, const char* description,
                   PartitionArgs& args) {
  CLI::App* sub = group->add_subcommand(name, description);
  sub->add_option("NAME", args.name, "Partition name")->type_name("NAME")->required();
  return sub;
}

}  // namespace

void AddPartitionCommands(CLI::App& app, Selection& selection) {
  CLI::App* group = app.add_subcommand("partition", "Create, list, show, remove, reset partitions");
  group->require_subcommand(1);
  group->footer(
      "A partition reserves an aligned block of IPUs (a power of two) under a name; only\n"
      "its owner (or an admin) attaches inside it with `ipupod attach --partition NAME`.\n"
      "\n"
      "Examples:\n"
      "  ipupod partition create p1 --size 4\n"
      "  ipupod partition list\n"
      "  ipupod partition remove p1 --force");
  auto args = std::make_shared<PartitionArgs>();

  CLI::App* create = AddNamed(group, "create", "Reserve N IPUs as a named partition", *args);
  create->add_option("--size", args->size, "Number of IPUs: a power of two (1, 2, 4, ...)")
      ->type_name("N")
      ->required();
  create->footer(
      "The server picks a free aligned block of that size, best fit: the one whose enclosing\n"
      "block of twice the size has the most IPUs in use (lowest start on ties), so large\n"
      "blocks stay whole; it keeps clear of blocks reserved for waiting attaches when it can.\n"
      "It reports the block's IPUs and its gc-info device id.\n\n"
      "Example:\n  ipupod partition create p1 --size 4");
  OnSelected(create, selection, "partition create",
             [args](Context& ctx) { return RunCreate(ctx, *args); });

  CLI::App* list = group->add_subcommand("list", "List every partition");
  list->footer("Example:\n  ipupod partition list --json | jq -r '.partitions[].name'");
  OnSelected(list, selection, "partition list", RunList);

  CLI::App* show = AddNamed(group, "show", "Show one partition", *args);
  show->footer("Example:\n  ipupod partition show p1");
  OnSelected(show, selection, "partition show",
             [args](Context& ctx) { return RunShow(ctx, *args); });

  CLI::App* remove = AddNamed(group, "remove", "Remove a partition, returning its IPUs", *args);
  remove->add_flag("--force", args->force, "Detach the partition's sessions first");
  remove->footer(
      "Without --force, removing a partition that has sessions fails; with --force those\n"
      "sessions are detached (their attach commands end with exit code 11).\n\n"
      "Example:\n  ipupod partition remove p1 --force");
  OnSelected(remove, selection, "partition remove",
             [args](Context& ctx) { return RunRemove(ctx, *args); });

  CLI::App* reset = AddNamed(group, "reset", "Reset a partition's IPUs and links", *args);
  reset->footer(
      "Clears IPU_RESET, LINK_RESET and PARTITION_RESET errors on the partition's IPUs.\n"
      "A reset clears device memory: sessions on it must load again.\n\n"
      "Example:\n  ipupod partition reset p1");
  OnSelected(reset, selection, "partition reset",
             [args](Context& ctx) { return RunReset(ctx, *args); });
}

}  // namespace ipupod::cli
