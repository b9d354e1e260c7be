// What the batch-job commands print (client/cli/job_output.h), from given
// Job protos: the `ipupod jobs` table, `job show`, events, JSON documents.
#include "client/cli/job_output.h"

#include <algorithm>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace ipupod::cli {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// 2026-11-26 12:00:00 UTC.
const absl::Time kNow = absl::FromUnixSeconds(1795694400);
constexpr int64_t kNowMs = int64_t{1795694400} * 1000;

v1::Job Running() {
  v1::Job job;
  job.set_id("17");
  job.set_name("mlp-train");
  job.set_user("alice");
  job.set_account("vision");
  job.set_qos("normal");
  job.set_state(v1::RUNNING);
  job.set_num_ipus(4);
  job.set_submitted_unix_ms(kNowMs - 3600 * 1000);  // 11:00:00
  job.set_started_unix_ms(kNowMs - 125 * 1000);     // 11:57:55
  job.add_ipus(0);
  job.add_ipus(1);
  job.add_ipus(2);
  job.add_ipus(3);
  job.set_session("s1-4");
  job.set_runs_done(3);
  job.set_runs_total(10);
  v1::JobSpec* spec = job.mutable_spec();
  spec->set_executable_sha256(std::string(64, 'a'));
  spec->mutable_inputs()->set_sha256(std::string(64, 'b'));
  spec->mutable_inputs()->set_format("npz");
  spec->set_train(true);
  spec->set_epochs(3);
  (*spec->mutable_optimizer())["lr"] = 0.05;
  spec->set_time_limit_seconds(5400);
  return job;
}

v1::Job Pending() {
  v1::Job job;
  job.set_id("18.2");
  job.set_name(std::string(40, 'n'));
  job.set_user("bob");
  job.set_account("speech");
  job.set_qos("scavenger");
  job.set_state(v1::PENDING);
  job.set_reason("Resources");
  job.set_queue_position(2);
  job.set_num_ipus(16);
  job.set_submitted_unix_ms(kNowMs - 2 * 86400 * 1000);  // two days ago
  return job;
}

v1::Job Failed() {
  v1::Job job;
  job.set_id("9");
  job.set_user("carol");
  job.set_state(v1::FAILED);
  job.set_reason("IPU 3 failed (unrecoverable) and the job was requeued 2 times, the limit");
  job.set_error_kind("unrecoverable");
  job.set_num_ipus(1);
  job.set_submitted_unix_ms(kNowMs - 600 * 1000);
  job.set_started_unix_ms(kNowMs - 500 * 1000);
  job.set_ended_unix_ms(kNowMs - 400 * 1000);
  job.set_wall_seconds(100);
  job.set_runs_done(2);
  job.set_runs_total(8);
  job.set_requeues(2);
  return job;
}

TEST(JobsTableTest, LooksLikeSqueue) {
  std::string table =
      JobsTable({Running(), Pending(), Failed()}, kNow, absl::UTCTimeZone(), "no jobs\n");
  EXPECT_EQ(table,
            "ID    NAME                      USER   ACCOUNT  QOS        STATE    REASON          "
            "                  IPUS  SUBMITTED    STARTED   ELAPSED  PROGRESS\n"
            "17    mlp-train                 alice  vision   normal     RUNNING  -               "
            "                     4  11:00:00     11:57:55    2m05s      3/10\n"
            "18.2  nnnnnnnnnnnnnnnnnnnnn...  bob    speech   scavenger  PENDING  Resources, #2 in"
            " queue              16  11-24 12:00  -               -         -\n"
            "9     -                         carol  -        -          FAILED   IPU 3 failed (un"
            "recoverable) ...     1  11:50:00     11:51:40    1m40s       2/8\n");
}

TEST(JobsTableTest, EmptyListPrintsTheGivenText) {
  EXPECT_EQ(JobsTable({}, kNow, absl::UTCTimeZone(), "no jobs\n"), "no jobs\n");
}

TEST(JobsTableTest, FinishedJobWithoutWallTimeUsesItsStartAndEnd) {
  v1::Job job = Failed();
  job.set_wall_seconds(0);
  EXPECT_THAT(JobsTable({job}, kNow, absl::UTCTimeZone(), ""), HasSubstr("  1m40s"));
}

TEST(JobJsonTest, EveryFieldUnderItsProtoName) {
  Json doc = JobJson(Running());
  std::vector<std::string> keys;
  for (auto it = doc.begin(); it != doc.end(); ++it) keys.push_back(it.key());
  EXPECT_EQ(keys, (std::vector<std::string>{"id",
                                            "name",
                                            "user",
                                            "account",
                                            "qos",
                                            "state",
                                            "reason",
                                            "num_ipus",
                                            "submitted_unix_ms",
                                            "started_unix_ms",
                                            "ended_unix_ms",
                                            "spec",
                                            "session",
                                            "ipus",
                                            "runs_done",
                                            "runs_total",
                                            "error_kind",
                                            "recovery_action",
                                            "requeues",
                                            "recoveries",
                                            "wall_seconds",
                                            "simulated_seconds",
                                            "ipu_seconds",
                                            "results",
                                            "results_purged",
                                            "results_expire_unix_ms",
                                            "queue_position",
                                            "details_hidden"}));
  EXPECT_EQ(doc["state"], "RUNNING");
  EXPECT_EQ(doc["ipus"], Json::array({0, 1, 2, 3}));
  EXPECT_EQ(doc["spec"]["optimizer"]["lr"], 0.05);
  EXPECT_EQ(doc["spec"]["inputs"]["format"], "npz");
  EXPECT_EQ(doc["spec"]["time_limit_seconds"], 5400);
  EXPECT_TRUE(JobJson(Pending())["spec"].is_null()) << "another user's job: no details";
  Json list = JobsJson({Running(), Pending()});
  ASSERT_EQ(list["jobs"].size(), 2u);
  EXPECT_EQ(list["jobs"][1]["id"], "18.2");
}

TEST(JobTextTest, ShowHasTheWholeRecord) {
  v1::Job job = Running();
  v1::ResultFile* result = job.add_results();
  result->set_name("checkpoint.npz");
  result->set_size_bytes(1500000);
  result->set_sha256(std::string(64, 'c'));
  job.set_results_expire_unix_ms(kNowMs + 7 * 86400 * 1000);
  const std::string text = JobText(job, kNow, absl::UTCTimeZone());
  for (const char* line :
       {"job:           17\n", "state:         RUNNING\n", "ipus:          4 (0-3)\n",
        "session:       s1-4\n", "submitted:     2026-11-26 11:00:00 UTC\n",
        "progress:      3/10 runs\n",
        "  training:    3 epochs; optimizer lr=0.05; host copy every run\n",
        "  time limit:  1h30m\n", "  weights:     the executable's own\n", "  outputs:     all\n",
        "  checkpoint.npz  1.5 MB  cccc", "  kept until 2026-12-03 12:00:00 UTC\n"}) {
    EXPECT_THAT(text, HasSubstr(line));
  }
  EXPECT_THAT(JobText(Pending(), kNow, absl::UTCTimeZone()),
              HasSubstr("spec:          (only its owner and admins see it)\n"));
  v1::Job purged = Failed();
  purged.set_results_purged(true);
  const std::string failed = JobText(purged, kNow, absl::UTCTimeZone());
  EXPECT_THAT(failed, HasSubstr("error kind:    unrecoverable, recovery action -\n"));
  EXPECT_THAT(failed, HasSubstr("purged by the server's retention period"));
  EXPECT_THAT(failed, HasSubstr("0 recovered in place, 2 requeues"));
}

// Another user's job (the server sends its queue line, details_hidden):
// `job show` says the details are hidden, never "none yet" or "-" for
// results and a start the job has.
TEST(JobTextTest, AHiddenJobSaysSoInsteadOfLookingEmpty) {
  v1::Job job;
  job.set_id("21");
  job.set_user("alice");
  job.set_account("vision");
  job.set_qos("normal");
  job.set_state(v1::COMPLETED);
  job.set_num_ipus(1);
  job.set_submitted_unix_ms(kNowMs - 600 * 1000);
  job.set_details_hidden(true);
  const std::string text = JobText(job, kNow, absl::UTCTimeZone());
  EXPECT_THAT(text, HasSubstr("state:         COMPLETED\n"));
  EXPECT_THAT(text, HasSubstr("details:       hidden: the job belongs to alice;"));
  EXPECT_THAT(text, Not(HasSubstr("none yet")));
  EXPECT_THAT(text, Not(HasSubstr("started:")));
  EXPECT_THAT(text, Not(HasSubstr("results:")));
  EXPECT_EQ(JobJson(job)["details_hidden"], true);
  const std::string table = JobsTable({Running(), job}, kNow, absl::UTCTimeZone(), "");
  EXPECT_THAT(table, HasSubstr("(hidden)"));
  EXPECT_THAT(table, HasSubstr("(hidden): another user's job; only its owner and admins see"));
  EXPECT_THAT(JobsTable({Running()}, kNow, absl::UTCTimeZone(), ""), Not(HasSubstr("hidden")));
}

// A job name, reason or event a user chose reaches an admin's terminal
// escaped: no ESC sequence, no forged line or table row.
TEST(JobTextTest, ControlCharactersInWhatUsersChoseAreEscaped) {
  v1::Job job = Running();
  job.set_name("x\x1b[2J\x1b]0;pwned\x07\n18     fake   root");
  job.set_reason(
      "cancelled by\r\xC2\x9B"
      "2Jeve");
  (*job.mutable_spec()->mutable_outputs()->Add()) = "y\nz";
  for (const std::string& text :
       {JobText(job, kNow, absl::UTCTimeZone()), JobsTable({job}, kNow, absl::UTCTimeZone(), ""),
        JobEndText(job)}) {
    EXPECT_EQ(text.find('\x1b'), std::string::npos) << text;
    EXPECT_EQ(text.find('\r'), std::string::npos) << text;
    EXPECT_EQ(text.find("\xc2\x9b"), std::string::npos) << text;
    EXPECT_EQ(text.find("\n18 "), std::string::npos) << "a forged line: " << text;
  }
  EXPECT_THAT(JobText(job, kNow, absl::UTCTimeZone()),
              HasSubstr("name:          x\\x1b[2J\\x1b]0;pwned\\x07\\n18     fake   root\n"));
  const std::string table = JobsTable({job}, kNow, absl::UTCTimeZone(), "");
  EXPECT_EQ(std::count(table.begin(), table.end(), '\n'), 2) << "a header and one row: " << table;
  v1::JobEvent event;
  event.set_kind("print\x1b[31m");
  event.set_text("loss\n2026-01-01 00:00:00  state  COMPLETED");
  const std::string line = JobEventText(event, absl::UTCTimeZone());
  EXPECT_EQ(std::count(line.begin(), line.end(), '\n'), 1) << line;
  EXPECT_EQ(line.find('\x1b'), std::string::npos) << line;
}

TEST(JobEventTest, RunEventsShowTheirLosses) {
  v1::JobEvent run;
  run.set_seq(4);
  run.set_unix_ms(kNowMs);
  run.set_kind("run");
  run.set_run(3);
  run.add_losses(0.693147f);
  run.add_losses(0.5f);
  EXPECT_EQ(JobEventText(run, absl::UTCTimeZone()),
            "2026-11-26 12:00:00  run         run 3; loss 0.693147 0.5\n");
  run.set_text("run 3 of 10");
  EXPECT_EQ(JobEventText(run, absl::UTCTimeZone()),
            "2026-11-26 12:00:00  run         run 3 of 10; loss 0.693147 0.5\n");
  Json doc = JobEventJson(run);
  EXPECT_EQ(doc["seq"], 4);
  EXPECT_EQ(doc["run"], 3);
  EXPECT_EQ(doc["losses"].size(), 2u);
  EXPECT_FALSE(doc.contains("state"));

  v1::JobEvent state;
  state.set_unix_ms(kNowMs);
  state.set_kind("state");
  state.set_state(v1::COMPLETED);
  EXPECT_EQ(JobEventText(state, absl::UTCTimeZone()),
            "2026-11-26 12:00:00  state       COMPLETED\n");
  EXPECT_EQ(JobEventJson(state)["state"], "COMPLETED");
  EXPECT_FALSE(JobEventJson(state).contains("losses"));
}

TEST(JobEndTextTest, SaysHowTheJobEnded) {
  EXPECT_EQ(JobEndText(Failed()),
            "job 9 FAILED: IPU 3 failed (unrecoverable) and the job was requeued 2 times, the "
            "limit (2/8 runs, wall 1m40s)\nkind: unrecoverable\n");
  v1::Job done = Running();
  done.set_state(v1::COMPLETED);
  done.set_runs_done(10);
  done.set_wall_seconds(300);
  EXPECT_EQ(JobEndText(done), "job 17 COMPLETED (10/10 runs, wall 5m00s)\n");
  EXPECT_EQ(JobEndText(Pending()), "job 18.2 is still PENDING (Resources)\n");
  EXPECT_EQ(SubmittedText({Running(), Pending()}), "submitted job 17\nsubmitted job 18.2\n");
}

TEST(JobStateTest, NamesAndFinishedStates) {
  EXPECT_EQ(JobStateText(v1::TIMEOUT), "TIMEOUT");
  EXPECT_EQ(JobStateText(v1::JOB_STATE_UNSPECIFIED), "UNKNOWN");
  for (v1::JobState s : {v1::COMPLETED, v1::FAILED, v1::CANCELLED, v1::TIMEOUT}) {
    EXPECT_TRUE(JobFinished(s)) << JobStateText(s);
  }
  for (v1::JobState s : {v1::PENDING, v1::RUNNING, v1::JOB_STATE_UNSPECIFIED}) {
    EXPECT_FALSE(JobFinished(s)) << JobStateText(s);
  }
  EXPECT_THAT(std::string(kJobStatesHelp), HasSubstr("Dependency"));
  EXPECT_THAT(std::string(kJobStatesHelp), Not(HasSubstr("\t")));
}

}  // namespace
}  // namespace ipupod::cli
