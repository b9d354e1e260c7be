// File: tests/common/driver/fake_executable.h
//
// FakeExecutable: an in-process driver::SessionExecutable for the driver
// tests. Its "model" is one weight `w` that every RunStep increases by the
// step's first input value plus one, and an `optimizer/step` counter; the
// step outputs `y` = that input value. Faults are scripted per call: the
// n-th RunStep (ReadCheckpoint, Load) call, 1-based, fails with the scripted
// error, and a recoverable fault leaves the device in error (every later
// call fails with it) until Reset clears it; Reset also clears what was
// loaded, as a real reset does, so a driver must Load and WriteWeights
// again. Every call is logged.
//
// Thread safety: none (one test thread).
#ifndef IPUPOD_TESTS_DRIVER_FAKE_EXECUTABLE_H_
#define IPUPOD_TESTS_DRIVER_FAKE_EXECUTABLE_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/driver/session_executable.h"
#include "common/driver/steps.h"
#include "common/errors.h"

namespace ipupod::driver::testing {

class FakeExecutable : public SessionExecutable {
 public:
  FakeExecutable();

  std::string session() const override { return "s1-1"; }
  absl::Status Load() override;
  absl::Status WriteWeights(const tensor::NamedTensors& weights) override;
  absl::StatusOr<tensor::NamedTensors> ReadWeights() override;
  absl::StatusOr<tensor::NamedTensors> ReadCheckpoint() override;
  absl::StatusOr<std::string> SetOptimizer(const std::map<std::string, double>& variables) override;
  absl::StatusOr<StepResult> RunStep(const tensor::NamedTensors& inputs) override;
  absl::Status Reset(const absl::Status& fault) override;

  // Scripts `error` for the n-th (1-based) call of RunStep / ReadCheckpoint
  // / Load.
  std::map<int, absl::Status> run_faults;
  std::map<int, absl::Status> checkpoint_faults;
  std::map<int, absl::Status> load_faults;

  float w() const { return w_; }
  int64_t step() const { return step_; }
  // The first input value of every successful RunStep, in order.
  const std::vector<float>& data_seen() const { return data_seen_; }
  // The faults Reset was called with.
  const std::vector<absl::Status>& resets() const { return resets_; }
  int loads() const { return loads_; }

 private:
  absl::Status Health() const;

  float w_ = 0;
  int64_t step_ = 0;
  bool loaded_ = true;
  std::optional<absl::Status> error_;  // a recoverable fault not yet reset
  int run_calls_ = 0;
  int checkpoint_calls_ = 0;
  int load_calls_ = 0;
  int loads_ = 0;
  std::vector<float> data_seen_;
  std::vector<absl::Status> resets_;
};

// A recoverable fault with `action` (ABORTED + payloads).
absl::Status Fault(RecoveryAction action);

// `steps` data steps of one sample each; step k holds the value k.
inline StepPlan Data(int64_t steps) {
  std::vector<float> values;
  for (int64_t k = 0; k < steps; ++k) values.push_back(static_cast<float>(k));
  return {{{"x", *tensor::Tensor::FromValues<float>({steps, 1}, values)}}, steps, 1, steps, {}};
}

}  // namespace ipupod::driver::testing

#endif  // IPUPOD_TESTS_DRIVER_FAKE_EXECUTABLE_H_
