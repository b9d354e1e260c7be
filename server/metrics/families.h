// File: server/metrics/families.h
//
// Small helpers to build prometheus-cpp metric families by hand (the
// families a collector computes at scrape time) and to turn the code's
// enum names into label values.
//
// Thread safety: pure functions.
#ifndef IPUPOD_METRICS_FAMILIES_H_
#define IPUPOD_METRICS_FAMILIES_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include <prometheus/metric_family.h>
#include <prometheus/metric_type.h>

namespace ipupod::metrics {

using Labels = std::vector<prometheus::ClientMetric::Label>;

prometheus::MetricFamily NewFamily(std::string name, std::string help, prometheus::MetricType type);
// One sample of a counter or gauge family (by its type).
void AddValue(prometheus::MetricFamily& family, double value, Labels labels = {});

// "IPU_RESET" -> "ipu-reset", "PENDING" -> "pending": label values in the
// CLI's and config's spelling.
std::string LabelValue(absl::string_view name);

}  // namespace ipupod::metrics

#endif  // IPUPOD_METRICS_FAMILIES_H_
