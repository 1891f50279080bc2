// Predicted against measured: step time, per-lane busy time, exposed I/O, peak
// memory, and the ops with the largest absolute timing error.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "traces/report.h"
#include "traces/status.h"

namespace ssdtrain::analysis {

struct MetricRow {
  std::string name;  // "step_time_ns", "busy.compute", "peak_device_bytes", ...
  std::string unit;  // "ns" or "bytes"
  double predicted = 0;
  double measured = 0;
  // (predicted - measured) / measured; 0 when both are 0; +inf when only measured is 0.
  double relative_error = 0;
};

struct OpErrorRow {
  traces::OpId op = traces::kNoOp;
  std::string name;          // the trace's op name, from either report; empty when neither has it
  int64_t predicted_ns = 0;  // duration
  int64_t measured_ns = 0;
  int64_t abs_error_ns = 0;
};

struct Comparison {
  std::string model;
  std::string policy;
  std::vector<MetricRow> metrics;
  std::vector<OpErrorRow> worst_ops;  // largest absolute duration error first
};

// Fails with FailedPrecondition when the two files describe different traces
// (model or trace fingerprint differ), or when the kinds are not a prediction
// and a run. `worst` is how many op rows to keep.
Result<Comparison> Compare(const traces::StepReport& predicted, const traces::StepReport& measured,
                           size_t worst = 10);

double RelativeError(double predicted, double measured);
void PrintComparison(const Comparison& c, std::ostream& out);
// One row per metric then per op: kind,name,unit,predicted,measured,relative_error.
void WriteCsv(const Comparison& c, std::ostream& out);

}  // namespace ssdtrain::analysis
