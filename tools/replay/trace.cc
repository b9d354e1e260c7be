#include "tools/replay/trace.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/format.h"

namespace ipupod::replay {
namespace {

namespace fs = std::filesystem;

constexpr const char* kTimeFormat = "%Y-%m-%d %H:%M:%S";

// Column positions found in the header.
struct Columns {
  size_t count = 0;
  size_t timestamp = 0;
  size_t duration = 0;
  size_t gpus = 0;
  size_t cluster = 0;
};

bool ValidClusterName(absl::string_view name) {
  if (name.empty() || name.size() > 64 || !absl::ascii_isalnum(name[0])) return false;
  for (char c : name) {
    if (!absl::ascii_isalnum(c) && c != '.' && c != '_' && c != '-') return false;
  }
  return true;
}

std::vector<absl::string_view> SplitFields(absl::string_view line) {
  std::vector<absl::string_view> fields = absl::StrSplit(line, ',');
  for (absl::string_view& f : fields) f = absl::StripAsciiWhitespace(f);
  return fields;
}

absl::StatusOr<Columns> ParseHeader(absl::string_view line, absl::string_view source) {
  const std::vector<absl::string_view> names = SplitFields(line);
  Columns c;
  c.count = names.size();
  std::vector<std::string> missing;
  auto find = [&](absl::string_view name, size_t* out) {
    for (size_t i = 0; i < names.size(); ++i) {
      if (names[i] == name) {
        *out = i;
        return;
      }
    }
    missing.emplace_back(name);
  };
  find("timestamp", &c.timestamp);
  find("duration", &c.duration);
  find("num_gpus", &c.gpus);
  find("cluster", &c.cluster);
  if (missing.empty()) return c;
  return absl::InvalidArgumentError(absl::StrFormat(
      "%s line 1: the header has no column %s; a trace's first line names its columns, "
      "at least timestamp,duration,num_gpus,cluster (got \"%s\")",
      source, absl::StrJoin(missing, ", "), EchoName(line)));
}

// The problem with one row, or nullopt when it parsed into `job`.
std::optional<std::string> ParseRow(absl::string_view line, const Columns& c, TraceJob& job) {
  const std::vector<absl::string_view> f = SplitFields(line);
  if (f.size() != c.count) {
    return absl::StrFormat("%d fields where the header has %d", f.size(), c.count);
  }
  std::string error;
  if (!absl::ParseTime(kTimeFormat, f[c.timestamp], absl::UTCTimeZone(), &job.submit, &error)) {
    return absl::StrFormat("timestamp \"%s\" is not YYYY-MM-DD HH:MM:SS", EchoName(f[c.timestamp]));
  }
  if (!absl::SimpleAtod(f[c.duration], &job.duration_seconds) ||
      !std::isfinite(job.duration_seconds) || job.duration_seconds < 0) {
    return absl::StrFormat("duration \"%s\" is not a number of seconds >= 0",
                           EchoName(f[c.duration]));
  }
  if (!absl::SimpleAtoi(f[c.gpus], &job.gpus) || job.gpus < 0) {
    return absl::StrFormat("num_gpus \"%s\" is not a whole number >= 0", EchoName(f[c.gpus]));
  }
  if (!ValidClusterName(f[c.cluster])) {
    return absl::StrFormat(
        "cluster \"%s\" is not 1-64 characters of [A-Za-z0-9._-] starting with a letter or digit",
        EchoName(f[c.cluster]));
  }
  job.cluster = std::string(f[c.cluster]);
  return std::nullopt;
}

absl::Status RowErrors(absl::string_view source, const std::vector<std::string>& errors,
                       int64_t bad_rows) {
  std::string more;
  if (bad_rows > static_cast<int64_t>(errors.size())) {
    more =
        absl::StrFormat("; and %d more bad rows", bad_rows - static_cast<int64_t>(errors.size()));
  }
  return absl::InvalidArgumentError(
      absl::StrFormat("%s: %d bad rows: %s%s; fix or remove them (columns: timestamp "
                      "YYYY-MM-DD HH:MM:SS UTC, duration in seconds, num_gpus, cluster)",
                      source, bad_rows, absl::StrJoin(errors, "; "), more));
}

}  // namespace

absl::StatusOr<std::vector<TraceJob>> ParseTrace(absl::string_view text, absl::string_view source) {
  std::vector<absl::string_view> lines = absl::StrSplit(text, '\n');
  std::optional<Columns> columns;
  std::vector<TraceJob> jobs;
  std::vector<std::string> errors;
  int64_t bad_rows = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    absl::string_view line = absl::StripTrailingAsciiWhitespace(lines[i]);
    if (line.empty()) continue;
    if (!columns) {
      absl::StatusOr<Columns> header = ParseHeader(line, source);
      if (!header.ok()) return header.status();
      columns = *header;
      continue;
    }
    if (static_cast<int64_t>(jobs.size()) >= kTraceRowsMax) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "%s has more than %d jobs; replay a part of it (split the file)", source, kTraceRowsMax));
    }
    TraceJob job;
    job.line = static_cast<int64_t>(i) + 1;
    if (std::optional<std::string> problem = ParseRow(line, *columns, job)) {
      if (++bad_rows <= kMaxReportedRowErrors) {
        errors.push_back(absl::StrFormat("line %d: %s", job.line, *problem));
      }
      continue;
    }
    jobs.push_back(std::move(job));
  }
  if (!columns) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s is empty; a trace starts with the header timestamp,duration,num_gpus,cluster", source));
  }
  if (bad_rows > 0) return RowErrors(source, errors, bad_rows);
  return jobs;
}

absl::StatusOr<std::vector<TraceJob>> ReadTrace(const std::string& path) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (!fs::exists(st)) {
    return absl::NotFoundError(absl::StrFormat("cannot open trace '%s': no such file", path));
  }
  if (!fs::is_regular_file(st)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("trace '%s' is not a regular file; pass a CSV file", path));
  }
  std::ifstream file(path, std::ios::binary | std::ios::ate);
  if (!file) {
    return absl::InternalError(
        absl::StrFormat("cannot open trace '%s': %s", path, std::strerror(errno)));
  }
  const std::streamoff size = file.tellg();
  if (size < 0) return absl::InternalError(absl::StrFormat("cannot read trace '%s'", path));
  if (size > kTraceBytesMax) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "trace '%s' holds %d bytes, over the limit of %d; split it", path, size, kTraceBytesMax));
  }
  std::string text(static_cast<size_t>(size), '\0');
  file.seekg(0);
  if (!file.read(text.data(), size)) {
    return absl::InternalError(absl::StrFormat("error reading trace '%s'", path));
  }
  return ParseTrace(text, path);
}

absl::StatusOr<absl::Time> ParseTraceDate(absl::string_view value, absl::string_view flag) {
  const std::string v(absl::StripAsciiWhitespace(value));
  absl::Time t;
  std::string error;
  for (const char* format : {"%Y-%m-%d", kTimeFormat, "%Y-%m-%dT%H:%M:%S"}) {
    if (absl::ParseTime(format, v, absl::UTCTimeZone(), &t, &error)) return t;
  }
  return absl::InvalidArgumentError(
      absl::StrFormat("%s \"%s\" is not a date: use YYYY-MM-DD or \"YYYY-MM-DD HH:MM:SS\" (UTC), "
                      "e.g. %s 2017-10-01",
                      flag, EchoName(value), flag));
}

std::string FormatTraceTime(absl::Time t) {
  return absl::FormatTime(kTimeFormat, t, absl::UTCTimeZone());
}

}  // namespace ipupod::replay
