#include "sim/stage_sim.h"

#include <algorithm>
#include <optional>

#include "sim/detail/stage_simulator.h"
#include "sim/simulate.h"
#include "traces/duration.h"
#include "traces/storage_plan.h"

namespace ssdtrain::sim {
namespace detail {

void StageSimulator::SetUpResources() {
  const ArrayFigures array = ArrayFor(hw_, options_.gpu);
  const DriveOptions& d = hw_.storage.drive;
  const int cap = hw_.storage.max_inflight_tensors;
  d2h_ = net_.AddResource("pcie_d2h", cap);
  h2d_ = net_.AddResource("pcie_h2d", cap);
  host_mem_ = net_.AddResource("host_memory");
  ssd_ = net_.AddResource("ssd_array");
  d2h_rate_ = GBps(hw_.host_link.d2h_GBps);
  h2d_rate_ = GBps(hw_.host_link.h2d_GBps);
  host_rate_ = GBps(hw_.host_memory.bandwidth_GBps);
  // The array's sustained rates (ArrayFor, queue included), as the policies see.
  auto rate = [](double gbps) {
    return BytesPerSec{std::max<int64_t>(1, static_cast<int64_t>(gbps * kGiga))};
  };
  ssd_read_rate_ = rate(array.read_GBps * options_.ssd_read_share);
  ssd_write_rate_ = rate(array.write_GBps * options_.ssd_write_share);
  // Rounded up, as every duration (traces/duration.h).
  auto micros = [](double us) { return Time::Ns(traces::CeilSecondsToNs(us * 1e-6)); };
  pcie_latency_ = micros(hw_.host_link.latency_us);
  ssd_read_latency_ = micros(d.read_latency_us);
  ssd_write_latency_ = micros(d.write_latency_us);
}

void StageSimulator::AddSpan(traces::Lane lane, int64_t start, int64_t end, OpId op,
                             TensorId tensor, std::string_view name, std::string_view prefix) {
  lane_intervals_[static_cast<int>(lane)].emplace_back(start, end);
  if (!options_.record_timeline) return;
  traces::Span span;
  span.lane = lane;
  span.start_ns = start + options_.time_offset_ns;
  span.end_ns = end + options_.time_offset_ns;
  span.op = op;
  span.tensor = tensor;
  span.stage = static_cast<int>(trace_.header.stage);
  span.name = std::string(prefix) + std::string(name);
  if (op != traces::kNoOp) span.micro_batch = trace_.op(op).micro_batch;
  if (tensor >= 0) span.micro_batch = trace_.tensor(tensor).micro_batch;
  result_.timeline.spans.push_back(std::move(span));
}

void StageSimulator::TryIssue() {
  while (!busy_ && error_.ok()) {
    WorkItem item;
    if (!recompute_stack_.empty()) {
      item = recompute_stack_.back();
    } else if (next_op_ < trace_.ops.size()) {
      item = WorkItem{static_cast<OpId>(next_op_), false};
    } else {
      return;
    }
    const size_t op_index = static_cast<size_t>(item.op);
    if (item.recompute && !item.in_place) {
      // Skip a recompute whose target another recompute already rebuilt,
      // and the in-place writers pushed to run after it.
      if (storages_[item.target].resident) {
        recompute_stack_.pop_back();
        while (!recompute_stack_.empty() && recompute_stack_.back().in_place &&
               recompute_stack_.back().target == item.target) {
          recompute_stack_.pop_back();
        }
        continue;
      }
    } else if (!item.recompute) {
      if (WaitsForEvictions(op_index)) return;  // the landing calls TryIssue again
      if (trace_.op(item.op).phase != Phase::kForward && !between_recorded_) RecordBetween();
      // Issue the prefetches this op triggers (regular ops only), if the
      // run-ahead has not issued them already (StartItem).
      FirePrefetches(op_index);
    }
    const InputsState inputs = CheckInputs(item);
    if (inputs == InputsState::kFailed) return;
    if (inputs == InputsState::kRecomputePushed) continue;
    const bool waiting = inputs == InputsState::kReading || OverBudgetWaits(op_index);
    if (waiting) {
      if (wait_start_ < 0) wait_start_ = Now();
      return;
    }
    if (wait_start_ >= 0) {
      result_.exposed_io_ns += Now() - wait_start_;
      wait_start_ = -1;
    }
    if (inputs == InputsState::kCollective) {
      if (collective_wait_start_ < 0) collective_wait_start_ = Now();
      return;  // its end calls TryIssue again
    }
    if (collective_wait_start_ >= 0) {
      result_.exposed_collective_ns += Now() - collective_wait_start_;
      collective_wait_start_ = -1;
    }
    if (item.recompute) recompute_stack_.pop_back();
    if (!item.recompute && trace_.op(item.op).stream != 0) {
      StartSideItem(item);
      continue;
    }
    StartItem(item);
  }
}

bool StageSimulator::WaitsForEvictions(size_t op_index) {
  bool evicting = false;
  for (size_t sid : resolved_.evict_at[op_index]) {
    Storage& s = storages_[sid];
    s.evict_due = true;
    MaybeRelease(s);
    evicting = evicting || (s.resident && !s.pinned &&
                            (s.write == WriteState::kQueued || s.write == WriteState::kStaged));
  }
  if (evicting && wait_start_ < 0) wait_start_ = Now();
  return evicting;
}

bool StageSimulator::OverBudgetWaits(size_t op_index) {
  if (budget_bytes_ <= 0) return false;
  int64_t need = 0;
  for (size_t sid : resolved_.op_outputs[op_index]) {
    const Storage& s = storages_[sid];
    if (!s.persistent && !s.resident) need += s.memory;
  }
  return device_bytes_ + need > budget_bytes_ && WritesWillFreeMemory();
}

void StageSimulator::RecordBetween() {
  between_recorded_ = true;
  int64_t device = 0, activation = 0;
  for (const Storage& s : storages_) {
    if (!s.resident || s.persistent || s.read != ReadState::kNone) continue;
    device += s.memory;
    if (s.activation) activation += s.memory;
  }
  result_.between_passes_bytes = device;
  result_.between_passes_activation_bytes = activation;
  Sample();  // the backward pass's peaks start here
}

void StageSimulator::FirePrefetches(size_t upto, std::optional<size_t> running) {
  if (trace_.ops.empty()) return;
  upto = std::min(upto, trace_.ops.size() - 1);
  for (; prefetched_upto_ <= upto; ++prefetched_upto_) {
    for (size_t s : resolved_.prefetch_at[prefetched_upto_]) {
      Storage& st = storages_[s];
      if (st.resident) {
        Forward(st);
      } else if (st.pending > 0) {
        StartRead(s, running && prefetched_upto_ > *running);
      }
    }
  }
}

void StageSimulator::StartItem(const WorkItem& item) {
  busy_ = true;
  const traces::Op& op = trace_.op(item.op);
  const int64_t start = Now();
  // The host issues op i once op i - issue_ahead_ops has finished: when this
  // op starts, the ops up to issue_ahead_ops - 1 places after it are issued,
  // and their prefetches start now.
  if (!item.recompute) {
    FirePrefetches(static_cast<size_t>(item.op) +
                       static_cast<size_t>(std::max(1, hw_.gpu.issue_ahead_ops) - 1),
                   static_cast<size_t>(item.op));
  }
  for (size_t sid : resolved_.op_inputs[static_cast<size_t>(item.op)]) storages_[sid].held = false;
  if (!item.recompute) {
    for (size_t sid : resolved_.rebuild_at[static_cast<size_t>(item.op)]) {
      storages_[sid].held = false;
    }
  }
  if (item.recompute && item.in_place) {
    // Writes the target its producer's re-run has just rebuilt: nothing to allocate.
  } else if (item.recompute) {
    Storage& target = storages_[item.target];
    target.recomputed = true;
    Allocate(target);
    // The other outputs the plan recomputes that are gone and still needed,
    // and those a later re-run op reads, are rebuilt by this run too
    // (traces::RebuiltAlongside, for the op waiting for its inputs); every
    // other output gets a scratch buffer (per tensor, at least one byte) for
    // the length of the op. What a re-run op reads is kept for its readers
    // (Storage::rerun_left).
    const auto at = static_cast<traces::OpId>(next_op_);
    const auto reads = [&](size_t sid) {
      return traces::RerunReads(resolved_, at, static_cast<int>(sid));
    };
    scratch_bytes_ = 0;
    rebuilt_alongside_.assign(1, item.target);
    for (traces::TensorId t : op.outputs) {
      const auto sid = static_cast<size_t>(resolved_.IndexOf(t));
      if (std::find(rebuilt_alongside_.begin(), rebuilt_alongside_.end(), sid) !=
          rebuilt_alongside_.end()) {
        continue;
      }
      Storage& other = storages_[sid];
      if (traces::RebuiltAlongside(resolved_.storages[sid], other.resident, at, reads(sid))) {
        other.recomputed = true;
        Allocate(other);
        rebuilt_alongside_.push_back(sid);
        continue;
      }
      scratch_bytes_ +=
          traces::DeviceBytes(std::max<int64_t>(1, trace_.tensor(t).bytes), alignment_);
    }
    for (size_t sid : rebuilt_alongside_) {
      storages_[sid].rerun_left = reads(sid);
      if (storages_[sid].rerun_left > 0) rerun_kept_.push_back(sid);
    }
    if (scratch_bytes_ > 0) {
      device_bytes_ += scratch_bytes_;
      Sample();
    }
  } else {
    for (size_t sid : resolved_.op_outputs[static_cast<size_t>(item.op)]) {
      Storage& s = storages_[sid];
      if (s.persistent || s.resident) continue;
      Allocate(s);
    }
  }
  // The offload engine's copies and submissions for the SSD traffic started
  // since the last op started take this op's cores first: the op starts that
  // much later (the replay measures them as a gap between ops, not in them).
  int64_t tax = 0;
  if (io_bytes_unpaid_ > 0 && hw_.gpu.io_overhead_us_per_MiB > 0) {
    tax = traces::CeilSecondsToNs(static_cast<double>(io_bytes_unpaid_) / 1048576.0 *
                                  hw_.gpu.io_overhead_us_per_MiB * 1e-6);
    result_.io_overhead_ns += tax;
  }
  io_bytes_unpaid_ = 0;
  const int64_t op_start = start + tax;
  const Status status = engine_.Schedule(Time::Ns(tax + OpDurationNs(op, op_start)),
                                         [this, item, op_start] { EndItem(item, op_start); });
  if (!status.ok()) error_ = status;
}

void StageSimulator::EndItem(const WorkItem& item, int64_t start) {
  busy_ = false;
  const traces::Op& op = trace_.op(item.op);
  const size_t index = static_cast<size_t>(item.op);
  const int64_t end = Now();
  AddSpan(traces::Lane::kCompute, start, end, item.op, -1, op.name,
          item.recompute ? "recompute:" : "");
  result_.compute_busy_ns += end - start;
  if (item.recompute) {
    result_.recompute_ns += end - start;
    result_.max_op_reruns = std::max(result_.max_op_reruns, ++reruns_[index]);
    device_bytes_ -= scratch_bytes_;
    scratch_bytes_ = 0;
    Sample();
    // A re-run op has read each of its inputs the re-run keeps once.
    for (size_t sid : resolved_.op_inputs[index]) {
      if (storages_[sid].rerun_left > 0) --storages_[sid].rerun_left;
    }
  } else {
    // What a re-run kept for re-runs up to this op and none of them read goes
    // now (traces/storage_plan.h, "Recompute").
    std::erase_if(rerun_kept_, [&](size_t sid) {
      Storage& s = storages_[sid];
      if (!traces::RerunKeepOver(resolved_.storages[sid], s.rerun_left, item.op)) return false;
      if (s.rerun_left > 0) {
        s.rerun_left = 0;
        MaybeRelease(s);
      }
      return true;
    });
    OpTiming& timing = result_.ops[index];
    timing.start_ns = start;
    timing.end_ns = end;
    result_.model_flops += op.flops;
    result_.compute_end_ns = end;
    if (op.phase == Phase::kForward) {
      result_.forward_end_ns = end;
      result_.forward_compute_ns += end - start;
    }
    if (op.phase == Phase::kBackward && result_.backward_start_ns == 0) {
      result_.backward_start_ns = start;
    }
    if (op.phase == Phase::kOptimizer) {
      result_.optimizer_ns += end - start;
    } else {
      passes_end_ns_ = end;
    }
    for (size_t sid : resolved_.op_inputs[index]) {
      Storage& s = storages_[sid];
      --s.pending;
      if (op.phase == Phase::kForward) --s.pending_forward;
    }
    ++next_op_;
  }
  for (size_t sid : resolved_.op_outputs[index]) {
    Storage& s = storages_[sid];
    const bool offload =
        s.action == TensorAction::kOffloadSsd || s.action == TensorAction::kOffloadHost;
    if (!item.recompute && offload && s.write == WriteState::kNone && s.producer == item.op &&
        s.pending > 0) {
      StartOffload(sid);
    }
    MaybeRelease(s);
  }
  for (size_t sid : resolved_.op_inputs[index]) MaybeRelease(storages_[sid]);
  if (!item.recompute) ReleaseReadsAfterOp();
  TryIssue();
}

Result<StageResult> StageSimulator::Run() {
  SSDTRAIN_RETURN_IF_ERROR(BuildStorages());
  SetUpResources();
  result_.ops.assign(trace_.ops.size(), OpTiming{});
  reruns_.assign(trace_.ops.size(), 0);
  for (Storage& s : storages_) {
    if (s.persistent) Allocate(s);
  }
  result_.persistent_allocations = static_cast<int64_t>(result_.allocations.size());
  device_bytes_ += workspace_bytes_;  // reserved after the weights, as the replay does
  Sample();
  TryIssue();
  engine_.Run();
  SSDTRAIN_RETURN_IF_ERROR(net_.status());
  SSDTRAIN_RETURN_IF_ERROR(error_);
  if (next_op_ != trace_.ops.size()) {
    return Status::Internal("simulation stopped at op " + std::to_string(next_op_) + " of " +
                            std::to_string(trace_.ops.size()));
  }
  result_.step_ns = Now();
  result_.exposed_io_ns += result_.step_ns - result_.compute_end_ns;
  result_.optimizer_compute_ns = result_.optimizer_ns;
  if (trace_.header.zero_defer_grad_sync && result_.optimizer_ns > 0) {
    // The deferred reduce-scatters run between the passes and the optimizer:
    // once a step, so in the optimizer's part of it.
    result_.optimizer_ns = std::max<int64_t>(0, result_.compute_end_ns - passes_end_ns_);
  }
  for (traces::Lane lane : traces::kBusyLanes) {
    result_.lane_busy_ns[std::string(traces::ToString(lane))] =
        traces::BusyTime(std::move(lane_intervals_[static_cast<int>(lane)]));
  }
  return std::move(result_);
}

}  // namespace detail

Result<StageResult> SimulateStage(const traces::Trace& trace, const traces::Plan& plan,
                                  const HardwareOptions& hw, const StageSimOptions& options) {
  detail::StageSimulator sim(trace, plan, hw, options);
  return sim.Run();
}

}  // namespace ssdtrain::sim
