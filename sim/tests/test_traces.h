// Hand-built traces and hardware for the sim tests (no dependency on models).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sim/hardware.h"
#include "traces/plan.h"
#include "traces/trace.h"

namespace ssdtrain::sim::testing {

class TraceBuilder {
 public:
  traces::TensorId Tensor(const std::string& name, int64_t bytes, traces::TensorKind kind,
                          int layer, bool saved, bool offloadable);
  // Adds an op with a measured duration (so tests pin exact times).
  traces::OpId Op(const std::string& name, traces::OpKind kind, traces::Phase phase, int layer,
                  std::vector<traces::TensorId> inputs, std::vector<traces::TensorId> outputs,
                  int64_t measured_ns);
  traces::Trace& trace() { return trace_; }

 private:
  traces::Trace trace_;
};

// A chain of `layers` blocks. Forward op i reads activation i−1 and writes
// activation i (`act_bytes`, saved and offloadable); backward ops run in reverse,
// op i consuming activation i. Forward ops take fwd_ns, backward ops bwd_ns.
// A weight of `weight_bytes` is read by every op.
traces::Trace ChainTrace(int layers, int64_t act_bytes, int64_t fwd_ns, int64_t bwd_ns,
                         int64_t weight_bytes = 1000);

// The unnamed plan template of `trace` (sim::BasePlan) under policy "test",
// with `placements`.
traces::Plan PlanWith(const traces::Trace& trace, std::vector<traces::Placement> placements);

// Round-number hardware: GDS, no latencies, one drive per GPU, 80 GiB GPU.
HardwareOptions TestHardware(double ssd_write_GBps, double ssd_read_GBps, double pcie_GBps);

// Simulates `plan` on `t` alone (SimulateStage) and expects its device and
// activation peaks to equal the static walk's (traces::ComputeStaticPeaks at
// the GPU's allocation alignment) to the byte.
void ExpectPeaksAreTheStaticWalks(const traces::Trace& t, const traces::Plan& plan,
                                  const HardwareOptions& hw);

}  // namespace ssdtrain::sim::testing
