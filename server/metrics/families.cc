#include "server/metrics/families.h"

#include <utility>

#include "absl/strings/ascii.h"

namespace ipupod::metrics {

prometheus::MetricFamily NewFamily(std::string name, std::string help,
                                   prometheus::MetricType type) {
  prometheus::MetricFamily family;
  family.name = std::move(name);
  family.help = std::move(help);
  family.type = type;
  return family;
}

void AddValue(prometheus::MetricFamily& family, double value, Labels labels) {
  prometheus::ClientMetric metric;
  metric.label = std::move(labels);
  if (family.type == prometheus::MetricType::Counter) {
    metric.counter.value = value;
  } else {
    metric.gauge.value = value;
  }
  family.metric.push_back(std::move(metric));
}

std::string LabelValue(absl::string_view name) {
  std::string value = absl::AsciiStrToLower(name);
  for (char& c : value) {
    if (c == '_') c = '-';
  }
  return value;
}

}  // namespace ipupod::metrics
