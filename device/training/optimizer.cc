#include "device/training/optimizer.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "device/kernels/shape_util.h"

namespace ipupod::training {
namespace {

using tensor::DType;
using tensor::Tensor;
using Slots = std::map<std::string, Tensor>;

struct AttrDefault {
  const char* name;
  double value;
  bool is_flag;  // changes the state layout: always a constant
};

// PopTorch's accum_type, first_order_momentum_accum_type and
// second_order_momentum_accum_type (seed 003, 4.5.3), as bits: 32 (float32,
// the default) or 16 (float16). They fix the state's types: constants.
constexpr AttrDefault kAccumType{"accum_type", 32, true};
constexpr AttrDefault kFirstOrderType{"first_order_momentum_accum_type", 32, true};
constexpr AttrDefault kSecondOrderType{"second_order_momentum_accum_type", 32, true};

const std::vector<AttrDefault>& Defaults(OptimizerKind kind) {
  static const auto* sgd = new std::vector<AttrDefault>{
      {"lr", 0.01, false},        {"momentum", 0, false}, {"dampening", 0, false},
      {"weight_decay", 0, false}, {"nesterov", 0, true},  {"velocity_scaling", 1, false}};
  static const auto* adam = new std::vector<AttrDefault>{{"lr", 1e-3, false},
                                                         {"beta1", 0.9, false},
                                                         {"beta2", 0.999, false},
                                                         {"eps", 1e-8, false},
                                                         {"weight_decay", 0, false},
                                                         {"amsgrad", 0, true},
                                                         kAccumType,
                                                         kFirstOrderType,
                                                         kSecondOrderType};
  static const auto* adamw = new std::vector<AttrDefault>{{"lr", 1e-3, false},
                                                          {"beta1", 0.9, false},
                                                          {"beta2", 0.999, false},
                                                          {"eps", 1e-8, false},
                                                          {"weight_decay", 1e-2, false},
                                                          {"amsgrad", 0, true},
                                                          kAccumType,
                                                          kFirstOrderType,
                                                          kSecondOrderType};
  static const auto* rmsprop = new std::vector<AttrDefault>{{"lr", 0.01, false},
                                                            {"alpha", 0.99, false},
                                                            {"eps", 1e-8, false},
                                                            {"weight_decay", 0, false},
                                                            {"momentum", 0, false},
                                                            {"centered", 0, true},
                                                            kAccumType,
                                                            kFirstOrderType,
                                                            kSecondOrderType};
  static const auto* lamb = new std::vector<AttrDefault>{
      {"lr", 1e-3, false},
      {"beta1", 0.9, false},
      {"beta2", 0.999, false},
      {"eps", 1e-8, false},
      {"weight_decay", 1e-2, false},
      {"bias_correction", 1, true},
      {"max_weight_norm", std::numeric_limits<double>::infinity(), false},
      kAccumType,
      kFirstOrderType,
      kSecondOrderType};
  // Every PopTorch optimizer also takes loss_scaling (OptimizerSpec::Create).
  switch (kind) {
    case OptimizerKind::kSgd:
      return *sgd;
    case OptimizerKind::kAdam:
      return *adam;
    case OptimizerKind::kAdamW:
      return *adamw;
    case OptimizerKind::kRmsprop:
      return *rmsprop;
    case OptimizerKind::kLamb:
      return *lamb;
  }
  return *sgd;
}

constexpr absl::string_view kGroupPrefix = "group/";

bool IsFlag(OptimizerKind kind, absl::string_view attr) {
  for (const AttrDefault& d : Defaults(kind)) {
    if (d.name == attr) return d.is_flag;
  }
  return false;
}

// Attributes every param group must share: the flags fix the state layout,
// and loss_scaling is one of PopTorch's float16 extras that it takes once
// per optimizer (seed 003, 4.5; velocity_scaling may differ).
bool SameForEveryGroup(OptimizerKind kind, absl::string_view attr) {
  return IsFlag(kind, attr) || attr == "loss_scaling";
}

// The attribute of a possibly qualified name: "lr" of "group/1/lr".
absl::string_view BaseName(absl::string_view name) {
  const size_t slash = name.rfind('/');
  return slash == absl::string_view::npos ? name : name.substr(slash + 1);
}

absl::Status Range(const OptimizerSpec& s, const char* attr, double lo, double hi, bool hi_open) {
  auto it = s.attributes().find(attr);
  if (it == s.attributes().end()) return absl::OkStatus();
  const double v = it->second.value;
  if (v >= lo && (hi_open ? v < hi : v <= hi)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(OptimizerKindName(s.kind()), " attribute '", attr,
                                                 "' is ", v, "; it must be in [", lo, ", ", hi,
                                                 hi_open ? ")" : "]"));
}

// The slot `name` of a weight shaped like `like`, zero-filled on first use.
absl::StatusOr<float*> Slot(Slots& slots, const std::string& name, const Tensor& like) {
  auto it = slots.find(name);
  if (it == slots.end()) {
    IPUPOD_ASSIGN_OR_RETURN(Tensor t, Tensor::Create(DType::kFloat32, like.shape()));
    it = slots.emplace(name, std::move(t)).first;
  }
  return it->second.mutable_data<float>();
}

// torch's per-parameter state['step'], a float scalar; returns the new value.
double BumpStep(Slots& slots) {
  auto it = slots.find("step");
  if (it == slots.end()) it = slots.emplace("step", Tensor::Scalar(0.0f)).first;
  float& step = it->second.mutable_data<float>()[0];
  step += 1.0f;
  return step;
}

// d = g + wd * w (torch: grad.add(param, alpha=weight_decay)). Without
// weight decay d is g itself: no copy of a gradient that may be megabytes.
class DecayedGrad {
 public:
  DecayedGrad(const Tensor& w, const Tensor& g, double weight_decay)
      : data_(g.data<float>()), size_(static_cast<size_t>(g.num_elements())) {
    if (weight_decay == 0) return;
    const float wd = static_cast<float>(weight_decay);
    const float* wp = w.data<float>();
    decayed_.resize(size_);
    for (size_t i = 0; i < size_; ++i) decayed_[i] = data_[i] + wd * wp[i];
    data_ = decayed_.data();
  }
  DecayedGrad(const DecayedGrad&) = delete;
  DecayedGrad& operator=(const DecayedGrad&) = delete;

  float operator[](size_t i) const { return data_[i]; }
  size_t size() const { return size_; }

 private:
  std::vector<float> decayed_;  // empty without weight decay
  const float* data_;           // g's elements or decayed_'s
  size_t size_;
};

absl::Status SgdUpdate(const OptimizerSpec& s, Tensor& w, const Tensor& g, Slots& slots) {
  const DecayedGrad d(w, g, s.value("weight_decay"));
  const float neg_lr = static_cast<float>(-s.value("lr"));
  float* wp = w.mutable_data<float>();
  const double momentum = s.value("momentum");
  if (momentum == 0) {
    for (size_t i = 0; i < d.size(); ++i) wp[i] = wp[i] + neg_lr * d[i];
    return absl::OkStatus();
  }
  const bool first = !slots.contains("momentum_buffer");
  IPUPOD_ASSIGN_OR_RETURN(float* buf, Slot(slots, "momentum_buffer", w));
  const float mom = static_cast<float>(momentum);
  const float keep = static_cast<float>(1.0 - s.value("dampening"));
  const bool nesterov = s.value("nesterov") != 0;
  for (size_t i = 0; i < d.size(); ++i) {
    buf[i] = first ? d[i] : buf[i] * mom + keep * d[i];
    const float step = nesterov ? d[i] + mom * buf[i] : buf[i];
    wp[i] = wp[i] + neg_lr * step;
  }
  return absl::OkStatus();
}

// exp_avg and exp_avg_sq as torch updates them.
absl::Status UpdateMoments(const OptimizerSpec& s, const Tensor& w, const DecayedGrad& d,
                           Slots& slots, float** m, float** v) {
  IPUPOD_ASSIGN_OR_RETURN(*m, Slot(slots, "exp_avg", w));
  IPUPOD_ASSIGN_OR_RETURN(*v, Slot(slots, "exp_avg_sq", w));
  const double beta1 = s.value("beta1"), beta2 = s.value("beta2");
  const float b1 = static_cast<float>(beta1), b2 = static_cast<float>(beta2);
  const float c1 = static_cast<float>(1 - beta1), c2 = static_cast<float>(1 - beta2);
  for (size_t i = 0; i < d.size(); ++i) {
    (*m)[i] = (*m)[i] * b1 + c1 * d[i];
    (*v)[i] = (*v)[i] * b2 + c2 * (d[i] * d[i]);
  }
  return absl::OkStatus();
}

absl::Status AdamUpdate(const OptimizerSpec& s, bool decoupled, Tensor& w, const Tensor& g,
                        Slots& slots) {
  const double lr = s.value("lr"), wd = s.value("weight_decay");
  float* wp = w.mutable_data<float>();
  if (decoupled) {  // AdamW: param.mul_(1 - lr * weight_decay)
    const float keep = static_cast<float>(1 - lr * wd);
    for (int64_t i = 0; i < w.num_elements(); ++i) wp[i] *= keep;
  }
  const double step = BumpStep(slots);
  const DecayedGrad d(w, g, decoupled ? 0.0 : wd);
  float *m = nullptr, *v = nullptr;
  IPUPOD_RETURN_IF_ERROR(UpdateMoments(s, w, d, slots, &m, &v));
  const float* second = v;
  if (s.value("amsgrad") != 0) {
    IPUPOD_ASSIGN_OR_RETURN(float* vmax, Slot(slots, "max_exp_avg_sq", w));
    for (size_t i = 0; i < d.size(); ++i) vmax[i] = std::max(vmax[i], v[i]);
    second = vmax;
  }
  const double bc1 = 1 - std::pow(s.value("beta1"), step);
  const float bc2_sqrt = static_cast<float>(std::sqrt(1 - std::pow(s.value("beta2"), step)));
  const float neg_step_size = static_cast<float>(-(lr / bc1));
  const float eps = static_cast<float>(s.value("eps"));
  for (size_t i = 0; i < d.size(); ++i) {
    const float denom = std::sqrt(second[i]) / bc2_sqrt + eps;
    wp[i] = wp[i] + neg_step_size * (m[i] / denom);
  }
  return absl::OkStatus();
}

absl::Status RmspropUpdate(const OptimizerSpec& s, Tensor& w, const Tensor& g, Slots& slots) {
  BumpStep(slots);
  const DecayedGrad d(w, g, s.value("weight_decay"));
  IPUPOD_ASSIGN_OR_RETURN(float* sq, Slot(slots, "square_avg", w));
  const float a = static_cast<float>(s.value("alpha"));
  const float ca = static_cast<float>(1 - s.value("alpha"));
  const bool centered = s.value("centered") != 0;
  float* ga = nullptr;
  if (centered) {
    IPUPOD_ASSIGN_OR_RETURN(ga, Slot(slots, "grad_avg", w));
  }
  const double momentum = s.value("momentum");
  float* buf = nullptr;
  if (momentum > 0) {
    IPUPOD_ASSIGN_OR_RETURN(buf, Slot(slots, "momentum_buffer", w));
  }
  const float eps = static_cast<float>(s.value("eps"));
  const float neg_lr = static_cast<float>(-s.value("lr"));
  float* wp = w.mutable_data<float>();
  for (size_t i = 0; i < d.size(); ++i) {
    sq[i] = sq[i] * a + ca * (d[i] * d[i]);
    float avg = sq[i];
    if (centered) {
      ga[i] = ga[i] * a + ca * d[i];
      avg = sq[i] + -1.0f * (ga[i] * ga[i]);
    }
    avg = std::sqrt(avg) + eps;
    if (buf != nullptr) {
      buf[i] = buf[i] * static_cast<float>(momentum) + d[i] / avg;
      wp[i] = wp[i] + neg_lr * buf[i];
    } else {
      wp[i] = wp[i] + neg_lr * (d[i] / avg);
    }
  }
  return absl::OkStatus();
}

double Norm(const float* p, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; ++i) s += double{p[i]} * p[i];
  return std::sqrt(s);
}

absl::Status LambUpdate(const OptimizerSpec& s, Tensor& w, const Tensor& g, Slots& slots) {
  const double step = BumpStep(slots);
  const DecayedGrad d(w, g, 0.0);
  float *m = nullptr, *v = nullptr;
  IPUPOD_RETURN_IF_ERROR(UpdateMoments(s, w, d, slots, &m, &v));
  const bool correct = s.value("bias_correction") != 0;
  const float bc1 = correct ? static_cast<float>(1 - std::pow(s.value("beta1"), step)) : 1.0f;
  const float bc2 = correct ? static_cast<float>(1 - std::pow(s.value("beta2"), step)) : 1.0f;
  const float eps = static_cast<float>(s.value("eps"));
  const float wd = static_cast<float>(s.value("weight_decay"));
  float* wp = w.mutable_data<float>();
  std::vector<float> u(d.size());
  for (size_t i = 0; i < d.size(); ++i) {
    u[i] = (m[i] / bc1) / (std::sqrt(v[i] / bc2) + eps) + wd * wp[i];
  }
  const double r1 = std::min(Norm(wp, d.size()), s.value("max_weight_norm"));
  const double r2 = Norm(u.data(), u.size());
  const double ratio = r1 > 0 && r2 > 0 ? r1 / r2 : 1.0;
  const float scale = static_cast<float>(-s.value("lr") * ratio);
  for (size_t i = 0; i < d.size(); ++i) wp[i] = wp[i] + scale * u[i];
  return absl::OkStatus();
}

absl::Status UpdateWith(const OptimizerSpec& s, Tensor& w, const Tensor& g, Slots& slots) {
  switch (s.kind()) {
    case OptimizerKind::kSgd:
      return SgdUpdate(s, w, g, slots);
    case OptimizerKind::kAdam:
      return AdamUpdate(s, false, w, g, slots);
    case OptimizerKind::kAdamW:
      return AdamUpdate(s, true, w, g, slots);
    case OptimizerKind::kRmsprop:
      return RmspropUpdate(s, w, g, slots);
    case OptimizerKind::kLamb:
      return LambUpdate(s, w, g, slots);
  }
  return absl::InternalError("unknown optimizer");
}

std::vector<std::string> SlotNames(const OptimizerSpec& s) {
  switch (s.kind()) {
    case OptimizerKind::kSgd:
      return {"momentum_buffer"};
    case OptimizerKind::kAdam:
    case OptimizerKind::kAdamW:
      return {"exp_avg", "exp_avg_sq", "max_exp_avg_sq", "step"};
    case OptimizerKind::kRmsprop:
      return {"square_avg", "momentum_buffer", "grad_avg", "step"};
    case OptimizerKind::kLamb:
      return {"exp_avg", "exp_avg_sq", "step"};
  }
  return {};
}

}  // namespace

absl::StatusOr<OptimizerKind> ParseOptimizerKind(absl::string_view name) {
  for (OptimizerKind k : {OptimizerKind::kSgd, OptimizerKind::kAdam, OptimizerKind::kAdamW,
                          OptimizerKind::kRmsprop, OptimizerKind::kLamb}) {
    if (OptimizerKindName(k) == name) return k;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("optimizer '", name, "' is not one of sgd, adam, adamw, rmsprop, lamb"));
}

absl::string_view OptimizerKindName(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::kSgd:
      return "sgd";
    case OptimizerKind::kAdam:
      return "adam";
    case OptimizerKind::kAdamW:
      return "adamw";
    case OptimizerKind::kRmsprop:
      return "rmsprop";
    case OptimizerKind::kLamb:
      return "lamb";
  }
  return "unknown";
}

std::string GroupAttributeName(size_t group, absl::string_view attr) {
  return absl::StrCat(kGroupPrefix, group, "/", attr);
}

OptimizerSpec::OptimizerSpec() : kind_(OptimizerKind::kSgd) {
  for (const AttrDefault& d : Defaults(kind_)) attrs_[d.name] = {d.value, false};
  attrs_["loss_scaling"] = {1.0, false};
  attrs_["lr"].is_variable = true;
}

absl::StatusOr<OptimizerSpec> OptimizerSpec::Create(
    OptimizerKind kind, const std::map<std::string, double>& explicit_attrs,
    const std::vector<ParamGroupOptions>& groups) {
  OptimizerSpec spec;
  spec.kind_ = kind;
  spec.attrs_.clear();
  for (const AttrDefault& d : Defaults(kind)) spec.attrs_[d.name] = {d.value, false};
  spec.attrs_["loss_scaling"] = {1.0, false};  // seed 003, 4.5.1: every optimizer has it
  spec.attrs_["lr"].is_variable = true;        // PopTorch: lr is always a variable
  for (const auto& [name, value] : explicit_attrs) {
    IPUPOD_ASSIGN_OR_RETURN(OptimizerAttribute * a, spec.Find(name));
    a->value = value;
    a->is_variable = !IsFlag(kind, name);
  }
  for (const ParamGroupOptions& group : groups) IPUPOD_RETURN_IF_ERROR(spec.AddGroup(group));
  IPUPOD_RETURN_IF_ERROR(spec.Validate());
  return spec;
}

absl::Status OptimizerSpec::AddGroup(const ParamGroupOptions& options) {
  const size_t index = groups_.size();
  ParamGroup group;
  for (const auto& [name, value] : options.attributes) {
    if (absl::StrContains(name, '/')) {
      return absl::InvalidArgumentError(absl::StrCat("param group ", index, " sets '", name,
                                                     "'; a group's attributes are plain names"));
    }
    IPUPOD_ASSIGN_OR_RETURN(const OptimizerAttribute* wide, Find(name));
    if (!SameForEveryGroup(kind_, name)) {
      group.attributes[name] = {value, true};
    } else if (value != wide->value) {
      return absl::InvalidArgumentError(absl::StrCat(
          "param group ", index, " sets '", name, "' to ", value, " but the optimizer has ",
          wide->value, "; '", name,
          "' must be the same for every param group (it is a flag fixing the optimizer's state, "
          "or a PopTorch float16 attribute other than velocity_scaling): set it for the whole "
          "optimizer"));
    }
  }
  for (const std::string& weight : options.weights) {
    if (weight.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("param group ", index, " has an empty name"));
    }
    auto [it, added] = group_of_.emplace(weight, index);
    if (added) continue;
    return absl::InvalidArgumentError(
        it->second == index
            ? absl::StrCat("weight '", weight, "' is named twice in param group ", index,
                           "; name each weight once")
            : absl::StrCat("weight '", weight, "' is in param group ", it->second,
                           " and in param group ", index, "; a weight belongs to one group"));
  }
  group.weights = options.weights;
  groups_.push_back(std::move(group));
  return absl::OkStatus();
}

std::map<std::string, OptimizerAttribute> OptimizerSpec::QualifiedAttributes() const {
  std::map<std::string, OptimizerAttribute> out = attrs_;
  for (size_t i = 0; i < groups_.size(); ++i) {
    for (const auto& [name, a] : groups_[i].attributes) out[GroupAttributeName(i, name)] = a;
  }
  return out;
}

OptimizerSpec OptimizerSpec::GroupSpec(size_t group) const {
  OptimizerSpec out;
  out.kind_ = kind_;
  out.attrs_ = attrs_;
  for (const auto& [name, a] : groups_[group].attributes) out.attrs_[name] = a;
  return out;
}

int64_t OptimizerSpec::GroupOf(absl::string_view weight) const {
  auto it = group_of_.find(std::string(weight));
  return it == group_of_.end() ? -1 : static_cast<int64_t>(it->second);
}

// A plain name is an optimizer-wide attribute; "group/<i>/<attr>" is group
// i's own value of <attr>, which it has only if it sets it.
absl::StatusOr<OptimizerAttribute*> OptimizerSpec::Find(absl::string_view name) {
  if (!absl::StartsWith(name, kGroupPrefix)) return FindWide(name);
  const absl::string_view rest = name.substr(kGroupPrefix.size());
  const size_t slash = rest.find('/');
  size_t group = 0;
  if (slash == absl::string_view::npos || !absl::SimpleAtoi(rest.substr(0, slash), &group) ||
      group >= groups_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", name, "' names no param group: this optimizer has ", groups_.size(),
                     " (group/0/<attr> to group/", groups_.size(), "-1/<attr>)"));
  }
  const absl::string_view attr = rest.substr(slash + 1);
  IPUPOD_RETURN_IF_ERROR(FindWide(attr).status());
  auto it = groups_[group].attributes.find(std::string(attr));
  if (it == groups_[group].attributes.end()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "param group ", group, " does not set '", attr,
        "' (its weights take the optimizer's value); give it in the group when compiling to "
        "make it a variable of the group"));
  }
  return &it->second;
}

absl::StatusOr<OptimizerAttribute*> OptimizerSpec::FindWide(absl::string_view attr) {
  auto it = attrs_.find(std::string(attr));
  if (it != attrs_.end()) return &it->second;
  std::vector<std::string> names;
  for (const auto& [name, a] : attrs_) names.push_back(name);
  return absl::InvalidArgumentError(absl::StrCat(OptimizerKindName(kind_), " has no attribute '",
                                                 attr, "'; its attributes are ",
                                                 absl::StrJoin(names, ", ")));
}

double OptimizerSpec::value(absl::string_view attr) const {
  return attrs_.at(std::string(attr)).value;
}

absl::Status OptimizerSpec::MarkAsConstant(absl::string_view attr) {
  IPUPOD_ASSIGN_OR_RETURN(OptimizerAttribute * a, Find(attr));
  if (BaseName(attr) == "lr") {
    return absl::InvalidArgumentError("lr is always a variable (as in PopTorch)");
  }
  a->is_variable = false;
  return absl::OkStatus();
}

absl::Status OptimizerSpec::MarkAsVariable(absl::string_view attr) {
  IPUPOD_ASSIGN_OR_RETURN(OptimizerAttribute * a, Find(attr));
  if (IsFlag(kind_, BaseName(attr))) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", attr, "' changes the optimizer's state layout and is always a constant"));
  }
  a->is_variable = true;
  return absl::OkStatus();
}

absl::Status OptimizerSpec::Validate() const {
  IPUPOD_RETURN_IF_ERROR(ValidateOne());
  for (size_t i = 0; i < groups_.size(); ++i) {
    if (absl::Status valid = GroupSpec(i).ValidateOne(); !valid.ok()) {
      return absl::Status(valid.code(), absl::StrCat("param group ", i, ": ", valid.message()));
    }
  }
  return absl::OkStatus();
}

absl::Status OptimizerSpec::ValidateOne() const {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  IPUPOD_RETURN_IF_ERROR(Range(*this, "lr", 0, kInf, true));
  IPUPOD_RETURN_IF_ERROR(Range(*this, "momentum", 0, kInf, true));
  IPUPOD_RETURN_IF_ERROR(Range(*this, "dampening", 0, 1, false));
  IPUPOD_RETURN_IF_ERROR(Range(*this, "weight_decay", 0, kInf, true));
  IPUPOD_RETURN_IF_ERROR(Range(*this, "beta1", 0, 1, true));
  IPUPOD_RETURN_IF_ERROR(Range(*this, "beta2", 0, 1, true));
  IPUPOD_RETURN_IF_ERROR(Range(*this, "eps", 0, kInf, true));
  IPUPOD_RETURN_IF_ERROR(Range(*this, "alpha", 0, kInf, true));
  IPUPOD_RETURN_IF_ERROR(Range(*this, "max_weight_norm", 0, kInf, false));
  for (const char* type :
       {"accum_type", "first_order_momentum_accum_type", "second_order_momentum_accum_type"}) {
    if (attrs_.contains(type) && value(type) != 16 && value(type) != 32) {
      return absl::InvalidArgumentError(absl::StrCat(OptimizerKindName(kind_), " attribute '", type,
                                                     "' is ", value(type),
                                                     "; it must be 32 (float32) or 16 (float16)"));
    }
  }
  if (attrs_.contains("velocity_scaling") && !(value("velocity_scaling") > 0)) {
    return absl::InvalidArgumentError(absl::StrCat("sgd attribute 'velocity_scaling' is ",
                                                   value("velocity_scaling"), "; it must be > 0"));
  }
  if (!(value("loss_scaling") > 0 && value("loss_scaling") <= tensor::kFloat16Max)) {
    return absl::InvalidArgumentError(
        absl::StrCat(OptimizerKindName(kind_), " attribute 'loss_scaling' is ",
                     value("loss_scaling"), "; it must be in (0, 65504], float16's range"));
  }
  for (const char* flag : {"nesterov", "amsgrad", "centered", "bias_correction"}) {
    IPUPOD_RETURN_IF_ERROR(Range(*this, flag, 0, 1, false));
  }
  if (kind_ == OptimizerKind::kSgd && value("nesterov") != 0 &&
      (value("momentum") <= 0 || value("dampening") != 0)) {
    return absl::InvalidArgumentError("nesterov momentum requires momentum > 0 and dampening 0");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Optimizer>> Optimizer::Create(OptimizerSpec spec) {
  IPUPOD_RETURN_IF_ERROR(spec.Validate());
  return std::unique_ptr<Optimizer>(new Optimizer(std::move(spec)));
}

Optimizer::Optimizer(OptimizerSpec spec) : spec_(std::move(spec)) { ResolveGroups(); }

void Optimizer::ResolveGroups() {
  group_specs_.clear();
  for (size_t i = 0; i < spec_.groups().size(); ++i) group_specs_.push_back(spec_.GroupSpec(i));
}

const OptimizerSpec& Optimizer::SpecOf(const std::string& weight) const {
  const int64_t group = spec_.GroupOf(weight);
  return group < 0 ? spec_ : group_specs_[static_cast<size_t>(group)];
}

absl::Status Optimizer::SetVariable(absl::string_view attr, double value) {
  if (!std::isfinite(value)) {  // every variable, whether or not its range is checked below
    return absl::InvalidArgumentError(absl::StrCat(OptimizerKindName(spec_.kind()), " attribute '",
                                                   attr, "' is ", value,
                                                   "; it must be a finite number"));
  }
  OptimizerSpec changed = spec_;
  IPUPOD_ASSIGN_OR_RETURN(OptimizerAttribute * a, changed.Find(attr));
  if (!a->is_variable) {
    return absl::FailedPreconditionError(absl::StrCat(
        OptimizerKindName(spec_.kind()), " attribute '", attr,
        "' is a constant of the compiled program (it was not passed explicitly); pass it when "
        "compiling to make it a variable"));
  }
  a->value = value;
  IPUPOD_RETURN_IF_ERROR(changed.Validate());
  spec_ = std::move(changed);
  ResolveGroups();
  if (attr == "loss_scaling") scale_ = value;
  return absl::OkStatus();
}

// The fused update applies one lr to every weight: only when every group
// is plain SGD at the optimizer's lr.
std::optional<double> Optimizer::PlainSgdLearningRate() const {
  if (spec_.kind() != OptimizerKind::kSgd || spec_.value("loss_scaling") != 1 || auto_scale_) {
    return std::nullopt;
  }
  const double lr = spec_.value("lr");
  const auto plain = [lr](const OptimizerSpec& s) {
    return s.value("momentum") == 0 && s.value("weight_decay") == 0 && s.value("lr") == lr;
  };
  if (!plain(spec_)) return std::nullopt;
  for (const OptimizerSpec& s : group_specs_) {
    if (!plain(s)) return std::nullopt;
  }
  return lr;
}

absl::Status Optimizer::CheckStep(const TensorMap& weights, const TensorMap& gradients) const {
  for (const auto& [name, g] : gradients) {
    auto w = weights.find(name);
    if (w == weights.end()) {
      return absl::InvalidArgumentError(absl::StrCat("gradient for unknown weight '", name, "'"));
    }
    if (g.dtype() != DType::kFloat32 || !tensor::IsFloat(w->second.dtype()) ||
        g.shape() != w->second.shape()) {
      return absl::InvalidArgumentError(
          absl::StrCat("gradient of '", name, "' is ", DTypeName(g.dtype()),
                       kernels::ShapeString(g.shape()), " but the weight is ",
                       DTypeName(w->second.dtype()), kernels::ShapeString(w->second.shape())));
    }
    auto st = state_.find(name);
    if (st == state_.end()) continue;
    for (const auto& [slot, t] : st->second) {
      if (slot != "step" && t.shape() != g.shape()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "optimizer state '", name, "/", slot, "' is ", kernels::ShapeString(t.shape()),
            " but the weight is ", kernels::ShapeString(g.shape())));
      }
    }
  }
  return absl::OkStatus();
}

// PopTorch (seed 003, 4.5.1) multiplies the gradients by the inverse loss
// scale before updating the optimizer state. A float16 weight is updated in
// float32 (its state is float32) and rounded back to float16.
namespace {

// Whether `slot` of a weight of `weight_dtype` holds float16 values: SGD's
// velocity has the weight's type; the others' slots their accum types.
bool HalfSlot(const OptimizerSpec& s, const std::string& slot, DType weight_dtype) {
  if (slot == "step") return false;
  if (s.kind() == OptimizerKind::kSgd) return weight_dtype == DType::kFloat16;
  const bool second = slot == "exp_avg_sq" || slot == "max_exp_avg_sq" || slot == "square_avg";
  return s.value(second ? "second_order_momentum_accum_type" : "first_order_momentum_accum_type") ==
         16;
}

void ScaleValues(Tensor& t, double factor) {
  for (float& v : absl::MakeSpan(t.mutable_data<float>(), static_cast<size_t>(t.num_elements()))) {
    v = static_cast<float>(v * factor);
  }
}

}  // namespace

// SGD keeps its velocity multiplied by velocity_scaling (seed 003, 4.5.2);
// a float16 slot is rounded to float16 after every update (4.5.3).
absl::Status Optimizer::UpdateScaled(const OptimizerSpec& s, Tensor& w, const Tensor& g,
                                     double scale, Slots& slots) {
  const double velocity =
      s.attributes().contains("velocity_scaling") ? s.value("velocity_scaling") : 1.0;
  auto buffer = slots.find("momentum_buffer");
  if (velocity != 1 && buffer != slots.end()) ScaleValues(buffer->second, 1.0 / velocity);
  IPUPOD_RETURN_IF_ERROR(UpdateUnscaled(s, w, g, scale, slots));
  buffer = slots.find("momentum_buffer");
  if (velocity != 1 && buffer != slots.end()) ScaleValues(buffer->second, velocity);
  for (auto& [name, t] : slots) {
    if (!HalfSlot(s, name, w.dtype())) continue;
    tensor::RoundThroughFloat16(
        absl::MakeSpan(t.mutable_data<float>(), static_cast<size_t>(t.num_elements())));
  }
  return absl::OkStatus();
}

absl::Status Optimizer::UpdateUnscaled(const OptimizerSpec& s, Tensor& w, const Tensor& g,
                                       double scale, Slots& slots) {
  if (scale == 1 && w.dtype() == DType::kFloat32) return UpdateWith(s, w, g, slots);
  Tensor unscaled = g;
  const float inverse = static_cast<float>(1.0 / scale);
  for (float& v : absl::MakeSpan(unscaled.mutable_data<float>(),
                                 static_cast<size_t>(unscaled.num_elements()))) {
    v *= inverse;
  }
  IPUPOD_ASSIGN_OR_RETURN(Tensor wide, w.WidenedToFloat32());
  IPUPOD_RETURN_IF_ERROR(UpdateWith(s, wide, unscaled, slots));
  IPUPOD_ASSIGN_OR_RETURN(w, wide.ConvertedTo(w.dtype()));
  return absl::OkStatus();
}

void Optimizer::EnableAutomaticLossScaling() {
  auto_scale_ = true;
  scale_ = spec_.value("loss_scaling");
}

double Optimizer::loss_scale() const { return auto_scale_ ? scale_ : spec_.value("loss_scaling"); }

bool Optimizer::AdjustLossScale(const TensorMap& gradients) {
  constexpr double kUpperBinEdge = tensor::kFloat16Max / 8.0;
  constexpr double kUpperProportion = 1e-7;
  int64_t total = 0, upper = 0;
  bool finite = true;
  for (const auto& [name, g] : gradients) {
    for (float v : g.values<float>()) {
      finite = finite && std::isfinite(v);
      upper += std::abs(v) >= kUpperBinEdge;
    }
    total += g.num_elements();
  }
  const bool down = !finite || static_cast<double>(upper) > kUpperProportion * total;
  scale_ = std::clamp(down ? scale_ / 2 : scale_ * 2, std::ldexp(1.0, -14), std::ldexp(1.0, 15));
  return !finite;
}

absl::Status Optimizer::Step(TensorMap& weights, const TensorMap& gradients) {
  IPUPOD_RETURN_IF_ERROR(CheckStep(weights, gradients));
  const double scale = loss_scale();
  skipped_ = auto_scale_ && AdjustLossScale(gradients);
  for (const auto& [name, g] : gradients) {
    if (skipped_) break;
    IPUPOD_RETURN_IF_ERROR(UpdateScaled(SpecOf(name), weights.at(name), g, scale, state_[name]));
  }
  ++step_;
  return absl::OkStatus();
}

TensorMap Optimizer::ExportState() const {
  TensorMap out;
  for (const auto& [weight, slots] : state_) {
    for (const auto& [slot, t] : slots) out.emplace(absl::StrCat(weight, "/", slot), t);
  }
  out.emplace("step", Tensor::Scalar(step_));
  if (auto_scale_) out.emplace("loss_scaling", Tensor::Scalar(static_cast<float>(scale_)));
  return out;
}

absl::Status Optimizer::CheckSlotName(absl::string_view slot) const {
  for (const std::string& s : SlotNames(spec_)) {
    if (s == slot) return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(OptimizerKindName(spec_.kind()), " has no state '",
                                                 slot, "'; its state is ",
                                                 absl::StrJoin(SlotNames(spec_), ", ")));
}

absl::Status Optimizer::ImportState(const TensorMap& state) {
  std::map<std::string, Slots> next;
  int64_t step = -1;
  double scale = loss_scale();
  for (const auto& [name, t] : state) {
    if (name == "loss_scaling" && auto_scale_) {
      if (t.dtype() != DType::kFloat32 || t.num_elements() != 1 || !(t.data<float>()[0] > 0)) {
        return absl::InvalidArgumentError(
            "optimizer state 'loss_scaling' must be a positive float32 scalar");
      }
      scale = t.data<float>()[0];
      continue;
    }
    if (name == "step") {
      if (t.dtype() != DType::kInt64 || t.num_elements() != 1 || t.IntAt(0) < 0) {
        return absl::InvalidArgumentError("optimizer state 'step' must be a non-negative int64");
      }
      step = t.IntAt(0);
      continue;
    }
    const size_t slash = name.rfind('/');
    if (slash == std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("optimizer state '", name, "' is not named <weight>/<state>"));
    }
    const std::string slot = name.substr(slash + 1);
    IPUPOD_RETURN_IF_ERROR(CheckSlotName(slot));
    if (t.dtype() != DType::kFloat32 || (slot == "step" && t.num_elements() != 1)) {
      return absl::InvalidArgumentError(absl::StrCat("optimizer state '", name, "' must be float32",
                                                     slot == "step" ? " with one element" : ""));
    }
    next[name.substr(0, slash)].emplace(slot, t);
  }
  if (step < 0) return absl::InvalidArgumentError("optimizer state lacks 'step'");
  state_ = std::move(next);
  step_ = step;
  if (auto_scale_) scale_ = scale;
  return absl::OkStatus();
}

}  // namespace ipupod::training
