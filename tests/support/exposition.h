// File: tests/support/exposition.h
//
// Reads one sample out of Prometheus' text exposition format, as a test of
// the metrics needs it: SampleValue(text, R"(ipupod_ipus{state="idle"})")
// is the value on the line that starts with that series and a space.
// Label order is the serializer's (prometheus-cpp sorts a family's labels
// by name).
//
// Thread safety: pure functions.
#ifndef IPUPOD_TESTS_SUPPORT_EXPOSITION_H_
#define IPUPOD_TESTS_SUPPORT_EXPOSITION_H_

#include <cstdlib>
#include <optional>
#include <sstream>
#include <string>

namespace ipupod::test_support {

inline std::optional<double> SampleValue(const std::string& text, const std::string& series) {
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.size() > series.size() && line.compare(0, series.size(), series) == 0 &&
        line[series.size()] == ' ') {
      return std::strtod(line.c_str() + series.size() + 1, nullptr);
    }
  }
  return std::nullopt;
}

}  // namespace ipupod::test_support

#endif  // IPUPOD_TESTS_SUPPORT_EXPOSITION_H_
