#include "sim/tests/test_traces.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <utility>

#include "sim/policy.h"
#include "sim/stage_sim.h"
#include "traces/storage_plan.h"

namespace ssdtrain::sim::testing {

traces::TensorId TraceBuilder::Tensor(const std::string& name, int64_t bytes,
                                      traces::TensorKind kind, int layer, bool saved,
                                      bool offloadable) {
  traces::Tensor t;
  t.id = static_cast<traces::TensorId>(trace_.tensors.size());
  t.name = name;
  t.bytes = bytes;
  t.shape = {bytes / 2};
  t.kind = kind;
  t.layer = layer;
  t.saved_for_backward = saved;
  t.offloadable = offloadable;
  trace_.tensors.push_back(t);
  return t.id;
}

traces::OpId TraceBuilder::Op(const std::string& name, traces::OpKind kind, traces::Phase phase,
                              int layer, std::vector<traces::TensorId> inputs,
                              std::vector<traces::TensorId> outputs, int64_t measured_ns) {
  traces::Op op;
  op.id = static_cast<traces::OpId>(trace_.ops.size());
  op.name = name;
  op.kind = kind;
  op.phase = phase;
  op.layer = layer;
  op.inputs = std::move(inputs);
  op.outputs = std::move(outputs);
  op.measured_ns = measured_ns;
  op.flops = 1000;
  for (traces::TensorId t : op.inputs)
    trace_.tensors[static_cast<size_t>(t)].consumers.push_back(op.id);
  for (traces::TensorId t : op.outputs) trace_.tensors[static_cast<size_t>(t)].producer = op.id;
  trace_.ops.push_back(op);
  return op.id;
}

traces::Trace ChainTrace(int layers, int64_t act_bytes, int64_t fwd_ns, int64_t bwd_ns,
                         int64_t weight_bytes) {
  using traces::OpKind;
  using traces::Phase;
  using traces::TensorKind;
  TraceBuilder b;
  const traces::TensorId w =
      b.Tensor("w", weight_bytes, TensorKind::kWeight, traces::kNoLayer, false, false);
  const traces::TensorId input =
      b.Tensor("input", 1000, TensorKind::kInput, traces::kNoLayer, false, false);
  std::vector<traces::TensorId> acts;
  traces::TensorId prev = input;
  for (int i = 0; i < layers; ++i) {
    const traces::TensorId a =
        b.Tensor("act" + std::to_string(i), act_bytes, TensorKind::kActivation, i, true, true);
    b.Op("fwd" + std::to_string(i), OpKind::kGemm, Phase::kForward, i, {prev, w}, {a}, fwd_ns);
    acts.push_back(a);
    prev = a;
  }
  for (int i = layers - 1; i >= 0; --i) {
    b.Op("bwd" + std::to_string(i), OpKind::kGemm, Phase::kBackward, i,
         {acts[static_cast<size_t>(i)], w}, {}, bwd_ns);
  }
  traces::Trace t = std::move(b.trace());
  t.header.model = "chain";
  t.header.family = "gpt";
  t.header.layers = layers;
  t.header.seq_len = 1;
  t.header.micro_batch = 1;
  t.header.stage_layers = layers;
  return t;
}

HardwareOptions TestHardware(double ssd_write_GBps, double ssd_read_GBps, double pcie_GBps) {
  HardwareOptions hw;
  hw.name = "test";
  hw.gpus_per_node = 1;
  hw.gpu.name = "test-gpu";
  hw.gpu.peak_tflops_fp16 = 100;
  hw.gpu.peak_tflops_bf16 = 100;
  hw.gpu.peak_tflops_fp32 = 10;
  hw.gpu.memory_GBps = 1000;
  hw.gpu.memory_GiB = 80;
  hw.host_link.d2h_GBps = pcie_GBps;
  hw.host_link.h2d_GBps = pcie_GBps;
  hw.host_memory.GiB = 512;
  hw.host_memory.pinned_GiB = 256;
  hw.host_memory.bandwidth_GBps = 1e6;
  hw.storage.arrays_drives = {1};
  hw.storage.gds = true;
  hw.storage.max_inflight_tensors = 2;
  hw.storage.drive.read_GBps = ssd_read_GBps;
  hw.storage.drive.write_GBps = ssd_write_GBps;
  hw.storage.drive.capacity_TB = 1;
  hw.storage.drive.endurance_TBW = 1000;
  // Every GPU a node of its own (domains of one): every group's ranks talk
  // over the 10 GB/s network; a tensor-parallel test that wants NVLink sets
  // its own domain.
  hw.gpus_per_node = 1;
  hw.interconnect.domain_gpus = 1;
  hw.interconnect.scale_up = LinkTier{100, 0, 0};
  hw.interconnect.scale_out = LinkTier{10, 0, 0};
  return hw;
}

traces::Plan PlanWith(const traces::Trace& trace, std::vector<traces::Placement> placements) {
  traces::Plan plan = BasePlan(trace);
  plan.policy = "test";
  plan.placements = std::move(placements);
  return plan;
}

void ExpectPeaksAreTheStaticWalks(const traces::Trace& t, const traces::Plan& plan,
                                  const HardwareOptions& hw) {
  Result<StageResult> r = SimulateStage(t, plan, hw);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  Result<traces::StoragePlan> sp = traces::ResolvePlan(t, plan, "plan");
  ASSERT_TRUE(sp.ok()) << sp.status().ToString();
  const traces::StaticPeaks walk =
      traces::ComputeStaticPeaks(t, *sp, std::max<int64_t>(1, hw.gpu.allocation_alignment_bytes));
  EXPECT_EQ(r->peak_gpu_bytes, walk.device_bytes);
  EXPECT_EQ(r->peak_activation_bytes, walk.activation_bytes);
}

}  // namespace ssdtrain::sim::testing
