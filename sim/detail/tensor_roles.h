// Which tensors of a trace live all step. A trace marks both weight gradients
// and activation gradients (logits.grad, L3.fc2.in.grad, ...) as kind
// "gradient"; only weight gradients persist (they accumulate over the
// micro-batches and feed the optimizer and the data-parallel all-reduce).
// Activation gradients are transient, like activations.
#pragma once

#include "traces/trace.h"

namespace ssdtrain::sim::detail {

// A gradient with a consumer in the optimizer phase, or with no consumer at
// all (a gradient nothing reads is the step's result).
inline bool IsWeightGradient(const traces::Trace& trace, const traces::Tensor& t) {
  if (t.kind != traces::TensorKind::kGradient) return false;
  if (t.consumers.empty()) return true;
  for (traces::OpId c : t.consumers) {
    if (trace.op(c).phase == traces::Phase::kOptimizer) return true;
  }
  return false;
}

// Resident all step: step inputs without a producer, weights, weight
// gradients and optimizer state.
inline bool IsPersistent(const traces::Trace& trace, const traces::Tensor& t) {
  return t.producer == traces::kNoOp || t.kind == traces::TensorKind::kWeight ||
         t.kind == traces::TensorKind::kOptimizerState || IsWeightGradient(trace, t);
}

}  // namespace ssdtrain::sim::detail
