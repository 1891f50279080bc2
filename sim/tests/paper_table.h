// The SSDTrain paper's evaluation (arXiv 2408.10013 v3 §III-D, §IV) on its own
// setup, computed by the simulator: the nine-model table (Fig. 6), the ROK
// sweep (Fig. 7), the write-bandwidth trend (Table III) and the lifespan rows.
// Shared by `sim_paper_table` (scripts/paper.sh prints it) and the test that
// keeps it from drifting (paper_table_test.cc). Cross-module: the traces come
// from models::BuildTrace.
//
// Two activation peaks:
// - ours (`activation`): the peak of resident activation-kind storages, the
//   simulator's StepMetrics::peak_activation_bytes;
// - the paper's (`paper_activation`): the device peak during forward and
//   backward above what is resident all step (weights, gradients, optimizer
//   state; traces::StoragePlan's persistent storages), so activation
//   gradients, temporaries and kept tensors all count, as a
//   max_memory_allocated over the step minus the memory before it measures.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/model_config.h"
#include "sim/hardware.h"
#include "sim/simulate.h"
#include "traces/status.h"
#include "traces/trace.h"

namespace ssdtrain::sim::paper {

// The GPU whose memory the paper reports: the one with the 4-drive array.
inline constexpr int kReportedGpu = 0;

struct Run {
  int64_t step_ns = 0;
  int64_t device_peak = 0;       // bytes
  int64_t activation_peak = 0;   // ours
  int64_t paper_activation = 0;  // the paper's: device peak minus persistent bytes
  int64_t ssd_bytes_written = 0;
  int64_t exposed_io_ns = 0;
  bool fits = true;  // optimal only: within its budget
};

struct ModelRow {
  std::string model;
  int64_t persistent_bytes = 0;       // weights, gradients, optimizer state
  int64_t step_activation_bytes = 0;  // every saved activation of the step, deduplicated
  // Weight gradients allocated during backward (weight_grads set_to_none,
  // PyTorch's optimizer.zero_grad(set_to_none=True)), traced and simulated: then
  // they count in the paper's forward+backward peak. The rows above keep
  // Megatron's persistent grad buffer; both carry Megatron's fp32 cross-entropy.
  int64_t weight_grad_bytes = 0;
  Run keep_set_to_none, ssdtrain_paper_set_to_none;
  Run keep, recompute_full, ssdtrain, ssdtrain_paper;
  Run optimal_same_budget;  // optimal under ssdtrain-paper's device peak
  Run optimal_3pct;         // optimal at the lowest budget found with step <= 1.03 keep
};

// One model on the paper's hardware (configs/hardware/a100-pcie-40gb-ssdtrain-paper).
Result<ModelRow> EvaluateModel(const models::ModelConfig& config, const HardwareOptions& hw);
// The nine paper models: BERT, GPT, T5 at (8192, 4), (12288, 3), (16384, 2).
std::vector<std::string> PaperModels();

struct RokPoint {
  int64_t hidden = 0;
  int64_t batch = 0;
  int64_t step_activation_bytes = 0;
  Run keep, recompute_full, ssdtrain_paper;
};
// Fig. 7: BERT, 3 layers, hidden 12288 and 14336, batch 4..32 (one micro-batch per
// step); `source_dir` is the repository root (the BERT config is read from it).
Result<std::vector<RokPoint>> RokSweep(const std::string& source_dir, const HardwareOptions& hw);
inline constexpr int64_t kRokBatches[] = {4, 8, 12, 16, 20, 24, 28, 32};

// §III-D: required per-GPU PCIe write bandwidth = step activations / (step time / 2).
double RequiredWriteGBps(int64_t step_activation_bytes, int64_t step_ns);
// §III-D: lifespan = endurance writes × step time / step activations, in years,
// for `drives` drives of `tbw` rated TB written each, scaled by `endurance_factor`
// (1: the vendor rating; the paper's 2.5 × 86: JESD WAF 2.5 against 1 for large
// sequential writes, 86× P/E cycles at one-day retention).
double LifespanYears(double tbw, int drives, double endurance_factor, int64_t step_activation_bytes,
                     int64_t step_ns);
inline constexpr double kPaperWafRatio = 2.5;
inline constexpr double kPaperRetentionFactor = 86.0;

}  // namespace ssdtrain::sim::paper
