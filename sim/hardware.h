// The hardware model: configs/hardware/*.json, parsed into options structs that
// mirror the JSON field for field (LevelDB options.h's habit). Every field has
// its unit in its name or comment and a default; a missing optional field
// keeps its default, a present field with a bad value is an error naming the
// file and the field ("configs/hardware/x.json: storage.drive.write_GBps: must
// be > 0, got 0"). sim/README.md documents the format and cites the figures.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "traces/drives.h"
#include "traces/fp8.h"
#include "traces/plan.h"
#include "traces/status.h"
#include "traces/trace.h"

namespace ssdtrain::sim {

// One point of an efficiency curve: at `size` (FLOPs for compute-bound kinds,
// bytes for memory-bound kinds) the kernel reaches `efficiency` of peak.
// Between points the efficiency is interpolated linearly in log(size); outside
// them it is clamped to the nearest point (Calculon's efficiency tables).
struct EfficiencyPoint {
  double size = 0;
  double efficiency = 1;  // (0, 1]
};

// A fused attention kernel's measured rate (gpu.attention_kernels), each
// curve by sequence length (EfficiencyPoint::size: the kernel's query and key
// length) in FlashAttention's convention: FLOPs over the (query, key) pairs
// the kernel computes, half of them under a causal mask, against the 16-bit
// peak. An empty backward curve is the forward one's; a causal mask without a
// causal curve is priced as the kernel without it over every pair the trace
// counts (an upper bound: a causal kernel skips the blocks above the
// diagonal). sim/op_cost.h, RooflineNs.
struct AttentionKernelCurves {
  std::vector<EfficiencyPoint> forward;  // required
  std::vector<EfficiencyPoint> forward_causal;
  std::vector<EfficiencyPoint> backward;
  std::vector<EfficiencyPoint> backward_causal;
};

struct GpuOptions {
  std::string name;
  double peak_tflops_fp16 = 0;  // dense tensor-core TFLOP/s (1e12)
  double peak_tflops_bf16 = 0;  // 0: same as fp16
  double peak_tflops_fp32 = 0;  // 0: fp16 / 16
  // Dense FP8 tensor-core TFLOP/s (E4M3/E5M2 inputs, per-tensor or blockwise
  // scales applied by the kernel): 0 for a GPU without FP8 tensor cores
  // (A100), where an FP8 trace is refused (CheckPrecision).
  double peak_tflops_fp8 = 0;
  // MXFP8 (E8M0 block scales in the tensor cores): Blackwell's; 0 where the
  // GPU has none, and the mxfp8 recipe is refused.
  double peak_tflops_mxfp8 = 0;
  double clock_scale = 1.0;   // fraction of boost clock the SMs run at, (0, 1]
  double memory_GBps = 0;     // HBM bandwidth, 1e9 B/s
  double memory_GiB = 0;      // capacity, 2^30 bytes
  double reserved_GiB = 0;    // taken by the runtime, allocator slack and workspaces
  double op_overhead_us = 0;  // launch/dispatch cost added to every op
  // Streaming multiprocessors (A100: 108, H100 SXM: 132). > 0: a GEMM's
  // efficiency also follows its shape, the tile and wave quantization of its
  // output (sim/op_cost.h, GemmShapeEfficiency), and the gemm curve is the
  // full-wave figure; 0 (default): by FLOPs alone (CPU backends, and presets
  // whose curve already folds small shapes in).
  int sm_count = 0;
  // Compute time each MiB the offload engine moves between the device and the
  // SSD (written, or read back) takes from the ops beside it, when the engine's
  // copies and I/O submission run on the cores the ops run on: the CPU
  // backend, one core per rank under mpirun. The simulator adds it to the op
  // that next starts. 0 (default): a GPU, whose copies are DMA and whose I/O
  // threads have cores of their own; `calibrate` measures it.
  double io_overhead_us_per_MiB = 0;
  // How far the host runs ahead of the device: op i is issued, and the
  // prefetches it triggers start, once op i - issue_ahead_ops has finished.
  // 1 (default): each op when the one before it ends. ssdtrain's executor
  // uses 2 (ReplayOptions::max_ops_ahead), which `calibrate` records.
  int issue_ahead_ops = 1;
  // The device allocator's granularity: every storage is rounded up to it
  // (cudaMalloc: 256; the CPU backend's arena: 64). 1: exact bytes.
  int64_t allocation_alignment_bytes = 1;
  // Count the executor's GEMM workspace (traces::ReplayWorkspaceBytes) in
  // device memory: true in configs `calibrate` writes, which describe the
  // machine a replay runs on; false for real training hardware.
  bool replay_workspace = false;
  // That workspace's GEMM output region (traces::ReplayWorkspaceBytes): 0 on
  // the CPU backend, 64 MiB on CUDA; `calibrate` records the device's.
  int64_t replay_output_region_bytes = 0;
  // Per-kind efficiency curves; keys are "gemm", "attention" (by FLOPs) and
  // "memory" (memory-bound kinds, by bytes moved). Missing: efficiency 1.
  std::vector<EfficiencyPoint> gemm_efficiency;
  // FP8 GEMMs' curve ("gemm_fp8", by FLOPs, against the FP8 peak); empty:
  // the gemm curve.
  std::vector<EfficiencyPoint> gemm_fp8_efficiency;
  std::vector<EfficiencyPoint> attention_efficiency;
  std::vector<EfficiencyPoint> memory_efficiency;
  // Fused attention kernels by name (a trace's Header::attention_kernel picks
  // one); a trace that names none is priced on `attention_efficiency`, by
  // FLOPs, every counted pair computed.
  std::map<std::string, AttentionKernelCurves> attention_kernels;
};

struct HostLinkOptions {
  int pcie_gen = 4;
  int lanes = 16;
  double d2h_GBps = 0;  // measured device-to-host, 1e9 B/s; 0: derived from gen and lanes
  double h2d_GBps = 0;  // measured host-to-device; 0: derived from gen and lanes
  double latency_us = 0;
};

struct HostMemoryOptions {
  double GiB = 0;             // host memory per GPU available for offload
  double pinned_GiB = 0;      // pinned (page-locked) budget per GPU: offload-host's capacity
  double bandwidth_GBps = 0;  // host DRAM bandwidth per GPU that staging copies share
};

struct DriveOptions {
  std::string model;
  double read_GBps = 0;
  double write_GBps = 0;
  double read_latency_us = 0;
  double write_latency_us = 0;
  int queue_depth = 32;       // requests in flight per drive
  double request_KiB = 1024;  // request size the offload engine issues
  double capacity_TB = 0;     // 1e12 bytes
  double endurance_TBW = 0;   // rated TB written; 0: dwpd × capacity × 365 × warranty_years
  double dwpd = 0;
  double warranty_years = 5;
};

struct StorageOptions {
  // One RAID0 array per GPU slot: GPU g uses arrays[g % arrays.size()]. Each
  // entry is the number of drives in that array.
  std::vector<int> arrays_drives;
  int gpus_per_array = 1;  // GPUs sharing one array; its bandwidth is split among them
  DriveOptions drive;
  bool gds = false;              // GPUDirect Storage; false: bounce through pinned host memory
  int max_inflight_tensors = 2;  // tensors the offload engine has in flight per direction
};

// One tier of the interconnect, per GPU (sim/topology.h prices groups on it).
struct LinkTier {
  double GBps = 0;        // the bus bandwidth a collective's ring reaches, 1e9 B/s
  double p2p_GBps = 0;    // one point-to-point message (a pipeline send); 0: GBps
  double latency_us = 0;  // per ring step, and per message
  // The SMs a NCCL collective over this tier holds while it runs: one CTA
  // per channel, none shared with a compute kernel (NCCL's maintainer,
  // NVIDIA/nccl issue 689), so a GEMM or attention kernel beside it runs on
  // the SMs left (sim/op_cost.h, OpTimeBesideNs). Below half of
  // gpu.sm_count; 0 (default): not modelled.
  int collective_sms = 0;
  double P2pGBps() const { return p2p_GBps > 0 ? p2p_GBps : GBps; }
};

// The interconnect by topology: consecutive ranks fill scale-up domains of
// `domain_gpus` GPUs (NVLink: a node's 8, an NVL72 rack's 72), and domains
// talk over the scale-out network (one NIC per GPU). A group is priced by
// where its ranks sit under the rank order (traces/layout.h), inside one
// domain or across domains (sim/topology.h).
struct InterconnectOptions {
  int domain_gpus = 0;  // 0: gpus_per_node
  LinkTier scale_up;    // inside a domain
  LinkTier scale_out;   // between domains
};

// One measured op time (the executor's calibration writes these). A gemm entry
// matches ops of kind gemm with equal dims and dtype; any other entry matches
// ops of its kind by bytes moved (bytes_read + bytes_written), interpolated
// linearly between the two nearest entries of that kind, the smallest entry's
// time below its range, and scaled with bytes beyond the largest.
struct MeasuredOpTime {
  traces::OpKind kind = traces::OpKind::kGemm;
  std::optional<traces::GemmDims> gemm;
  std::string dtype;  // gemm only; empty matches any
  int64_t bytes = 0;
  int64_t ns = 0;
};

struct HardwareOptions {
  std::string name;
  std::string description;
  // How many ranks measured this config at once (`mpirun -np N ssdtrain
  // calibrate`; 1: one process); 0: not measured by calibrate. A replay on N
  // ranks that share one machine (cores, disk) is predicted from a config
  // calibrated on N.
  int calibrated_ranks = 0;
  int gpus_per_node = 1;
  GpuOptions gpu;
  HostLinkOptions host_link;
  HostMemoryOptions host_memory;
  StorageOptions storage;
  InterconnectOptions interconnect;
  std::vector<MeasuredOpTime> measured_op_times;
  // What reading the file assumed or converted, one line each, for the CLI to
  // print (the old per-dimension interconnect fields: what they became).
  std::vector<std::string> notes;
};

// `source` names the file in messages.
Result<HardwareOptions> HardwareFromJson(const nlohmann::json& j, const std::string& source);
Result<HardwareOptions> LoadHardware(const std::string& path);
// The dense TFLOP/s an FP8 GEMM of `recipe` runs at on `gpu`: the mxfp8 peak
// for mxfp8, the fp8 peak for the other recipes, 0 for none or where the GPU
// has no such tensor cores. The one place a recipe picks its peak.
double Fp8PeakTflops(const GpuOptions& gpu, traces::Fp8Recipe recipe);
// Whether the GPU runs FP8 training under `fp8` (traces/fp8.h; "" none):
// FailedPrecondition naming the preset's field where it has no FP8 peak
// (A100), or no MXFP8 peak for the mxfp8 recipe (only Blackwell has one).
Status CheckPrecision(const HardwareOptions& hw, const std::string& fp8);
// OK when `kernel` is "" or one of hw's gpu.attention_kernels; otherwise an
// error naming the kernels the hardware has curves for.
Status CheckAttentionKernel(const HardwareOptions& hw, const std::string& kernel);
nlohmann::json ToJson(const HardwareOptions& hw);

// Derived figures, in simulator units.
double PcieGBps(int gen, int lanes);                // usable per direction, ~ 0.85 of raw
int64_t GpuMemoryBytes(const HardwareOptions& hw);  // capacity minus reserve
int64_t HostPinnedBytes(const HardwareOptions& hw);
// The pinned budget of one micro-batch's offload-host region: a step of m
// micro-batches holds m such regions (traces::UnrollStep gives each micro-batch
// its own host offsets), so each gets HostPinnedBytes / m.
int64_t HostPinnedBytesPerMicroBatch(const HardwareOptions& hw, int64_t micro_batches);
// The storage array GPU `gpu` writes to: drives, aggregate GB/s and endurance.
struct ArrayFigures {
  int drives = 0;
  double read_GBps = 0;
  double write_GBps = 0;
  double endurance_TBW = 0;
  double capacity_TB = 0;  // this GPU's share of the drives' capacity
};
ArrayFigures ArrayFor(const HardwareOptions& hw, int gpu);
// The slowest array (the planner plans for the worst GPU).
int SlowestArray(const HardwareOptions& hw);
// The node's drives as a plan records them (traces/drives.h): the arrays, and
// a stripe of the drive's request size (storage.drive.request_KiB, rounded up
// to traces::kStripeAlign), the request the engine issues to each drive.
traces::DriveLayout DriveLayoutOf(const HardwareOptions& hw);
// The stripe the simulator predicts `plan`'s drives by: the plan's own, or
// DriveLayoutOf(hw)'s where the plan names none.
int64_t StripeBytesFor(const traces::Plan& plan, const HardwareOptions& hw);

}  // namespace ssdtrain::sim
