// `ipupod priority` (like Slurm's sprio) and `ipupod shares` (like sshare):
// how the queue is ordered and why.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/cli/commands.h"

namespace ipupod::cli {
namespace {

std::string Factor(double x) { return absl::StrFormat("%.4f", x); }

Json PriorityJson(const v1::ListQueueResponse& queue) {
  Json entries = Json::array();
  for (const v1::QueueEntry& e : queue.entries()) {
    entries.push_back({{"position", e.position()},
                       {"ticket", e.ticket()},
                       {"user", e.user()},
                       {"account", e.account()},
                       {"qos", e.qos()},
                       {"num_ipus", e.num_ipus()},
                       {"priority", e.priority()},
                       {"age", e.age_factor()},
                       {"fair_share", e.fair_share_factor()},
                       {"size", e.size_factor()},
                       {"qos_factor", e.qos_factor()},
                       {"reason", e.reason()}});
  }
  return {{"entries", std::move(entries)}};
}

std::string PriorityText(const v1::ListQueueResponse& queue) {
  if (queue.entries().empty()) return "nothing is waiting\n";
  Table table({{"POS", Table::Align::kRight},
               {"TICKET"},
               {"USER"},
               {"ACCOUNT"},
               {"QOS"},
               {"IPUS", Table::Align::kRight},
               {"PRIORITY", Table::Align::kRight},
               {"AGE", Table::Align::kRight},
               {"FAIRSHARE", Table::Align::kRight},
               {"SIZE", Table::Align::kRight},
               {"QOSF", Table::Align::kRight},
               {"REASON"}});
  for (const v1::QueueEntry& e : queue.entries()) {
    table.AddRow({absl::StrCat(e.position()), e.ticket(), e.user(), e.account(), e.qos(),
                  absl::StrCat(e.num_ipus()), absl::StrFormat("%.1f", e.priority()),
                  Factor(e.age_factor()), Factor(e.fair_share_factor()), Factor(e.size_factor()),
                  Factor(e.qos_factor()), e.reason().empty() ? "-" : e.reason()});
  }
  return table.Render();
}

Json SharesJson(const v1::GetSharesResponse& shares) {
  Json accounts = Json::array();
  for (const v1::AccountShare& a : shares.accounts()) {
    accounts.push_back(
        {{"account", a.account()},
         {"users", Json(std::vector<std::string>(a.users().begin(), a.users().end()))},
         {"shares", a.shares()},
         {"shares_fraction", a.shares_fraction()},
         {"usage_ipu_seconds", a.usage_ipu_seconds()},
         {"usage_fraction", a.usage_fraction()},
         {"fair_share_factor", a.fair_share_factor()},
         {"ipus_held", a.ipus_held()},
         {"window_ipu_hours", a.window_ipu_hours()}});
  }
  return {{"accounts", std::move(accounts)},
          {"order", shares.order()},
          {"usage_half_life_hours", shares.usage_half_life_hours()}};
}

std::string SharesText(const v1::GetSharesResponse& shares) {
  std::string text = absl::StrFormat("queue order: %s; usage decays with a half-life of %g h\n",
                                     shares.order(), shares.usage_half_life_hours());
  if (shares.accounts().empty()) return absl::StrCat(text, "no account has used anything yet\n");
  Table table({{"ACCOUNT"},
               {"USERS"},
               {"SHARES", Table::Align::kRight},
               {"NORM", Table::Align::kRight},
               {"USAGE(IPU-h)", Table::Align::kRight},
               {"NORM", Table::Align::kRight},
               {"FAIRSHARE", Table::Align::kRight},
               {"HELD", Table::Align::kRight}});
  for (const v1::AccountShare& a : shares.accounts()) {
    table.AddRow({a.account(), absl::StrJoin(a.users(), ","), absl::StrFormat("%g", a.shares()),
                  Factor(a.shares_fraction()),
                  absl::StrFormat("%.3f", a.usage_ipu_seconds() / 3600), Factor(a.usage_fraction()),
                  Factor(a.fair_share_factor()), absl::StrCat(a.ipus_held())});
  }
  return absl::StrCat(text, table.Render());
}

int RunPriority(Context& ctx) {
  auto client = ctx.Connect();
  if (!client.ok()) return ctx.Fail(client.status());
  auto queue = (*client)->ListQueue();
  if (!queue.ok()) return ctx.Fail(queue.status());
  return ctx.Print(PriorityJson(*queue), PriorityText(*queue));
}

int RunShares(Context& ctx) {
  auto client = ctx.Connect();
  if (!client.ok()) return ctx.Fail(client.status());
  auto shares = (*client)->GetShares();
  if (!shares.ok()) return ctx.Fail(shares.status());
  return ctx.Print(SharesJson(*shares), SharesText(*shares));
}

}  // namespace

void AddSharingCommands(CLI::App& app, Selection& selection) {
  CLI::App* priority =
      app.add_subcommand("priority", "Show each waiting request's priority and its factors");
  priority->footer(
      "Like Slurm's sprio. Requests are walked in this order (highest first):\n"
      "  priority = W_age*age + W_fairshare*fairshare + W_size*size + W_qos*qos\n"
      "each factor in [0, 1]: age = waited / age_max; fairshare = 2^(-usage/shares) of the\n"
      "account; size = IPUs / pod IPUs; qos = the QoS's priority / the highest. REASON says\n"
      "why it waits: Priority (others go first), Resources, Fragmentation, or a limit\n"
      "(UserMaxIpus, QosMaxIpusPerUser, AccountMaxIpuHours, ...). See docs/scheduling.md.\n"
      "\n"
      "Examples:\n"
      "  ipupod priority\n"
      "  ipupod priority --json | jq '.entries[] | {user, priority, reason}'");
  OnSelected(priority, selection, "priority", [](Context& ctx) { return RunPriority(ctx); });

  CLI::App* shares =
      app.add_subcommand("shares", "Show each account's shares, usage and fair-share factor");
  shares->footer(
      "Like Slurm's sshare. NORM columns are fractions of all shares and of all usage;\n"
      "usage is in IPU-hours, decayed with the configured half-life; FAIRSHARE is\n"
      "2^(-usage norm / shares norm): 1 for an account that used nothing, 0.5 at exactly\n"
      "its share. Without configured accounts every user is an account of its own.\n"
      "\n"
      "Examples:\n"
      "  ipupod shares\n"
      "  ipupod shares --json");
  OnSelected(shares, selection, "shares", [](Context& ctx) { return RunShares(ctx); });
}

}  // namespace ipupod::cli
