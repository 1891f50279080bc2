// ssdtrain replay: run a plan on a device (CPU or CUDA) with real SSD files,
// and write the measured run (and, optionally, a Chrome/Perfetto timeline).
// Under `mpirun -np N` (N = the plan's tp × pp × dp, Megatron-LM's rank order:
// tp fastest, then dp, then pp; exec/step_sync.h): each rank replays its
// stage's whole step as its tensor-parallel shard of its data-parallel
// replica, in its own directory under --dir; its send and recv ops move the
// activations and gradients between neighbouring stages, its collective ops
// run between the ranks of its tensor-parallel group, each data-parallel
// group sums its weight gradients every step, a failure on one ends all, and
// rank 0 writes one report with each rank's figures.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <optional>

#include "app/cli_errors.h"
#include "app/command.h"
#include "app/model_provider.h"
#include "app/mpi_sync.h"
#include "app/outputs.h"
#include "app/rank_dirs.h"
#include "app/replay_layout.h"
#include "app/replay_report.h"
#include "app/reports.h"
#include "app/sizes.h"
#include "exec/offload_dir.h"
#include "exec/replay.h"
#include "exec/step_sync.h"
#include "models/build_trace.h"
#include "models/model_config.h"
#include "traces/drives.h"
#include "traces/io.h"
#include "traces/plan.h"
#include "traces/report.h"
#include "traces/timeline.h"
#include "traces/uniform_plans.h"
#include "traces/whole_step.h"

namespace ssdtrain::app {
namespace {

struct ReplayFlags {
  std::string trace, model, plan, policy, backend = "auto", io_backend = "auto", output, timeline;
  std::string gds = "auto", cufile_library = exec::kCuFileLibrary;
  std::vector<std::string> dirs;  // the node's drives, one directory each (traces/drives.h)
  int steps = 3;
  double ssd_bandwidth_GBps = 0;
  double device_memory_GiB = 4;
  double staging_MiB = 256;
  int cpu_threads = 1;
  int cuda_device = 0;
  bool no_cpu_pin = false;
  bool verify = false;
  bool allow_buffered_io = false;
  bool single_rank = false;
};

Result<exec::BackendChoice> ParseBackend(const std::string& s) {
  if (s == "auto") return exec::BackendChoice::kAuto;
  if (s == "cpu") return exec::BackendChoice::kCpu;
  if (s == "cuda") return exec::BackendChoice::kCuda;
  return Status::InvalidArgument("--backend: expected auto, cpu or cuda, got \"" + s + "\"");
}

int64_t GiB(double v) { return static_cast<int64_t>(std::llround(v * 1024.0 * 1024.0 * 1024.0)); }

// The trace of this rank's stage: read (--trace), or built from the model
// config at the plan's layout (--model).
Result<traces::Trace> StageTrace(const ReplayFlags& f, const traces::Plan* plan, int64_t stage) {
  if (!f.trace.empty()) return ReadUserTrace("replay", f.trace);
  SSDTRAIN_ASSIGN_OR_RETURN(models::ModelConfig config, models::LoadModelConfig(f.model));
  if (plan != nullptr) {
    // The plan's layout (its split, its ZeRO sharding), sequence and recipe,
    // mapped as the planner built the trace it was made for.
    SSDTRAIN_ASSIGN_OR_RETURN(
        config, models::ApplyOverrides(config, PlanOverrides(*plan, config), f.model));
  }
  return models::BuildTrace(config, stage);
}

// Stage `stage`'s plan: the plan itself for stage 0, else its entry in the
// plan's extra.stage_plans (written by `ssdtrain plan` for pp > 1).
Result<traces::Plan> StagePlan(const traces::Plan& plan, int64_t stage, const std::string& source) {
  if (stage == 0) return plan;
  const auto it = plan.extra.find("stage_plans");
  if (it != plan.extra.end() && it->is_array()) {
    for (size_t i = 0; i < it->size(); ++i) {
      const nlohmann::json& e = (*it)[i];
      if (!e.is_object() || e.value("stage", int64_t{-1}) != stage || !e.contains("plan")) continue;
      const std::string where = source + ": extra.stage_plans[" + std::to_string(i) + "].plan";
      SSDTRAIN_ASSIGN_OR_RETURN(traces::Plan p, traces::PlanFromJson(e.at("plan"), where));
      if (traces::LayoutOf(p) != traces::LayoutOf(plan)) {
        return Status::InvalidArgument(
            where + ": its layout differs from the plan's (" +
            traces::LayoutMismatch(traces::LayoutOf(p), traces::LayoutOf(plan)) + ")");
      }
      return p;
    }
  }
  return Status::InvalidArgument(source + ": extra.stage_plans: no plan for stage " +
                                 std::to_string(stage) + " of " + std::to_string(plan.pp) +
                                 " (make the plan with `ssdtrain plan`, which writes each "
                                 "stage's)");
}

struct Setup {
  traces::Trace trace;
  traces::Plan plan;
  std::string plan_source;
  RankDirs dirs;  // this rank's offload directories: its drive set
};

Result<Setup> Prepare(const ReplayFlags& f, const RankSync* ranks) {
  if (f.trace.empty() == f.model.empty()) {
    return Status::InvalidArgument("give exactly one of --trace FILE or --model CONFIG");
  }
  if (f.plan.empty() == f.policy.empty()) {
    return Status::InvalidArgument("give exactly one of --plan FILE or --policy keep|offload-ssd");
  }
  Setup s;
  s.plan_source = f.plan;
  std::optional<traces::Plan> read;
  if (!f.plan.empty()) {
    SSDTRAIN_ASSIGN_OR_RETURN(read, traces::ReadPlan(f.plan));
  }
  // Rank r runs stage r / (tp × dp) (exec/step_sync.h); one process runs stage 0.
  int64_t stage = 0;
  if (ranks != nullptr && read) {
    SSDTRAIN_RETURN_IF_ERROR(CheckRanks(*read, s.plan_source, *ranks));
    stage = traces::PlanLayout(*read).StageOf(ranks->rank());
    if (read->pp > 1 && !f.trace.empty()) {
      return Status::InvalidArgument(
          "--trace: with pp = " + std::to_string(read->pp) +
          " across ranks each rank needs its stage's trace; give --model (each rank builds its "
          "own)");
    }
    if (stage > 0) {
      SSDTRAIN_ASSIGN_OR_RETURN(read, StagePlan(*read, stage, s.plan_source));
      s.plan_source += " (stage " + std::to_string(stage) + ")";
    }
  }
  SSDTRAIN_ASSIGN_OR_RETURN(s.trace, StageTrace(f, read ? &*read : nullptr, stage));
  if (read) {
    s.plan = std::move(*read);
  } else if (f.policy == "keep") {
    s.plan = traces::KeepAllPlan(s.trace);
    s.plan_source = "--policy keep";
  } else if (f.policy == "offload-ssd") {
    s.plan = traces::OffloadAllPlan(s.trace);
    s.plan_source = "--policy offload-ssd";
  } else {
    return Status::InvalidArgument("--policy: expected keep or offload-ssd, got \"" + f.policy +
                                   "\"");
  }
  if (ranks == nullptr && !f.single_rank) {
    SSDTRAIN_RETURN_IF_ERROR(CheckOneProcess(s.plan, s.plan_source));
  }
  if (ranks != nullptr) SSDTRAIN_RETURN_IF_ERROR(CheckRanks(s.plan, s.plan_source, *ranks));
  // This rank's drives: its array's directories (the plan's storage, as the
  // simulator placed it), or every one given.
  SSDTRAIN_ASSIGN_OR_RETURN(s.dirs, MakeRankDirs(s.plan.storage, f.dirs, ranks));
  return s;
}

// The replay's options from the flags, the set-up and the parsed choices.
exec::ReplayOptions OptionsFor(const ReplayFlags& f, const Setup& setup,
                               exec::BackendChoice backend, exec::BackendKind io_backend,
                               exec::GdsMode gds, RankSync* ranks, bool speaks) {
  exec::ReplayOptions o;
  o.dirs = setup.dirs.dirs;
  o.backend = backend;
  o.steps = f.steps;
  o.ssd_bandwidth_GBps = f.ssd_bandwidth_GBps;
  o.verify = f.verify;
  o.device_memory_bytes = GiB(f.device_memory_GiB);
  o.cpu_compute_threads = f.cpu_threads;
  o.cpu_pin_threads = !f.no_cpu_pin;
  o.cuda_device_index = f.cuda_device;
  o.staging_bytes = static_cast<int64_t>(std::llround(f.staging_MiB * 1024 * 1024));
  o.io_backend = io_backend;
  o.allow_buffered_io = f.allow_buffered_io;
  o.gds = gds;
  o.cufile_library = f.cufile_library;
  o.sync = ranks;
  if (speaks) {
    o.progress = [](const std::string& line) { std::cerr << "replay: " << line << "\n"; };
  }
  return o;
}

// This rank's run report: its metrics, drives and storage path, and with
// ranks its all-reduce, pipeline traffic and collectives (gathered after).
traces::StepReport RankReport(const exec::ReplayResult& result, const traces::Trace& trace,
                              const traces::Plan& plan, const std::vector<std::string>& dirs,
                              bool with_ranks) {
  traces::StepReport report = RunReport(result, trace, plan);
  report.extra["offload_dirs"] = dirs;  // this rank's drives
  report.extra["storage_path"] = result.storage_path;
  report.extra["gds"] = result.gds;
  report.extra["staging_bytes"] = result.staging_bytes;
  if (with_ranks) {
    report.extra["allreduce_ns"] = result.allreduce_ns;
    const exec::PipelineTraffic& t = result.pipeline;
    report.extra["pipeline"] = {{"messages_sent", t.messages_sent},
                                {"bytes_sent", t.bytes_sent},
                                {"messages_received", t.messages_received},
                                {"bytes_received", t.bytes_received}};
    report.extra["collectives"] = CollectivesJson(result.collectives);
  }
  return report;
}

// The run's line on stdout.
std::string SummaryLine(const exec::ReplayResult& result, const traces::StepReport& report,
                        const traces::Trace& trace, const RankSync* ranks) {
  const traces::StepMetrics& m = report.metrics;
  return fmt::format(
      "{} on {}{}: step {:.3f} ms (median of {}), peak device {:.1f} MiB, peak activations "
      "{:.1f} MiB, SSD wrote {:.1f} MiB read {:.1f} MiB{}{}, exposed I/O {:.3f} ms{}{}{}\n",
      trace.header.model, result.backend, ranks ? fmt::format(" x {} ranks", ranks->size()) : "",
      m.step_time_ns / 1e6, result.steps, m.peak_gpu_bytes / 1048576.0,
      m.peak_activation_bytes / 1048576.0, m.ssd_bytes_written / 1048576.0,
      m.ssd_bytes_read / 1048576.0,
      result.cache.bytes_to_host == 0 ? ""
                                      : fmt::format(", host copies {:.1f} MiB out {:.1f} MiB back",
                                                    result.cache.bytes_to_host / 1048576.0,
                                                    result.cache.bytes_from_host / 1048576.0),
      result.direct_io ? "" : " (buffered I/O: through the page cache, not the drive)",
      m.exposed_io_ns / 1e6,
      ranks ? fmt::format(", gradient all-reduce {:.3f} ms", result.allreduce_ns / 1e6) : "",
      CollectivesLine(result.collectives),
      report.verified ? fmt::format(", verified {} tensors{}", result.tensors_checked,
                                    *report.verified ? "" : " (a rank did not verify)")
                      : "");
}

int Run(const ReplayFlags& f) {
  auto started = StartRanksIfLaunched();
  if (!started.ok()) return ReportError("replay", started.status());
  const std::unique_ptr<RankSync> ranks = std::move(*started);
  const bool speaks = ranks == nullptr || ranks->rank() == 0;  // rank 0 prints for all
  auto fail = [&](const Status& st) { return speaks ? ReportError("replay", st) : 1; };
  auto backend = ParseBackend(f.backend);
  auto io_backend = exec::ParseBackendKind(f.io_backend);
  auto gds = exec::ParseGdsMode(f.gds);
  // Before any work: rank 0's outputs (it writes them) and every rank's --dir.
  Outputs outputs;
  outputs.Add("-o", f.output);
  outputs.Add("--timeline", f.timeline);
  Status usable = speaks ? outputs.Check() : Status::Ok();
  for (const std::string& dir : f.dirs) {
    if (usable.ok()) usable = exec::CheckOffloadDir(dir, f.allow_buffered_io);
  }
  Result<Setup> setup = !backend.ok() ? Result<Setup>(backend.status())
                        : !io_backend.ok()
                            ? Result<Setup>(io_backend.status().WithPrefix("--io-backend"))
                        : !gds.ok()    ? Result<Setup>(gds.status())
                        : !usable.ok() ? Result<Setup>(usable)
                                       : Prepare(f, ranks.get());
  if (ranks) {  // every rank ready, or all stop with the first failure
    Status all = ranks->Agree(setup.ok() ? Status::Ok() : setup.status());
    if (!all.ok()) {
      if (setup.ok()) setup->dirs.RemoveMade();
      return fail(all);
    }
  }
  if (!setup.ok()) return fail(setup.status());
  if (ranks) {  // each stage's data-parallel groups for the gradients' sums
    Status split = ranks->Agree(ranks->SplitStages(traces::PlanLayout(setup->plan)));
    if (!split.ok()) {
      setup->dirs.RemoveMade();
      return fail(split);
    }
  }
  const traces::Trace& trace = setup->trace;
  const traces::Plan& plan = setup->plan;
  exec::ReplayOptions o = OptionsFor(f, *setup, *backend, *io_backend, *gds, ranks.get(), speaks);
  if (speaks && o.dirs.size() > 1) {
    std::cerr << fmt::format("replay: each tensor striped over {} directories in {} stripes{}\n",
                             o.dirs.size(),
                             fmt::format("{} KiB", traces::StripeBytes(plan.storage) / 1024),
                             ranks ? " (each rank its own drives' directories)" : "");
  }
  auto result = exec::Replay(trace, plan, o, setup->plan_source);
  setup->dirs.RemoveMade();
  if (!result.ok()) return fail(result.status());
  if (speaks && (result->backend == "cuda" || result->gds)) {
    std::cerr << "replay: storage path: " << result->storage_path << "\n";
  }
  traces::StepReport report = RankReport(*result, trace, plan, o.dirs, ranks != nullptr);
  if (ranks) {
    auto whole = WholeStepReport(std::move(report), plan, *ranks);
    if (!whole.ok()) return fail(whole.status());
    report = std::move(*whole);
    if (!speaks) return 0;
  }
  outputs.Set("-o", traces::ToJson(report));
  if (!f.timeline.empty()) {
    outputs.Set("--timeline",
                traces::ToChromeTrace(result->timeline, "replay " + trace.header.model + " (" +
                                                            result->backend + ")"));
  }
  if (Status written = outputs.Commit(); !written.ok()) return ReportError("replay", written);
  std::cout << SummaryLine(*result, report, trace, ranks.get());
  return 0;
}

}  // namespace

Verb AddReplayCommand(CLI::App& app) {
  auto flags = std::make_shared<ReplayFlags>();
  CLI::App* cmd = app.add_subcommand(
      "replay", "Run a plan on a device with real SSD offload files and measure it");
  cmd->footer(
      "Under `mpirun -np N` (N = the plan's tp x pp x dp): Megatron-LM's rank order, tp "
      "fastest, then dp, then pp: rank r runs pipeline stage r / (tp x dp) as data-parallel "
      "replica (r / tp) % dp and tensor-parallel shard r % tp, in DIR/rank-<r>; its send and "
      "recv ops move the activations and gradients to and from the neighbouring stages' ranks, "
      "its collective ops (all-reduce; all-gather and reduce-scatter with sequence parallelism) "
      "run between the ranks of its tensor-parallel group, each data-parallel group sums its "
      "weight gradients every step, a failure on one rank ends all, and rank 0 writes the "
      "report. With pp > 1 or tp > 1 give --model: each rank builds its own shard's trace "
      "(stage k's plan comes from the plan file's extra.stage_plans, written by `ssdtrain "
      "plan`).");
  cmd->add_option("--trace", flags->trace,
                  "Operator trace (JSON, .cbor, a .et Chakra trace ssdtrain export wrote, or a "
                  "PyTorch execution trace)");
  cmd->add_option("--model", flags->model,
                  "Instead of --trace: a model config (configs/models/*.json, or a Hugging Face "
                  "config.json or its folder), traced at the "
                  "plan's layout (micro-batch, sequence length, tp, pp)");
  cmd->add_option("--plan", flags->plan, "Plan file (from `ssdtrain plan`)");
  cmd->add_option("--policy", flags->policy,
                  "Instead of --plan: a built-in plan, keep or offload-ssd (every saved "
                  "offloadable activation to the SSD; the names plan uses)")
      ->transform(CLI::Validator(
          [](std::string& input) -> std::string {
            // Its old name, before replay and plan shared one vocabulary.
            if (input == "offload-all") {
              input = RenamedValue("replay", "--policy", "offload-all", "offload-ssd");
            }
            return "";
          },
          ""));
  cmd->add_option("--dir", flags->dirs,
                  "Offload directory on an SSD; repeat it (or give several) for a node's drives, "
                  "in order: each rank uses its array's (the plan's storage.arrays) and stripes "
                  "each tensor over them")
      ->required();
  cmd->add_option("--backend", flags->backend,
                  "Device: auto (CUDA when a GPU is usable), cpu, cuda")
      ->capture_default_str();
  cmd->add_option("--steps", flags->steps, "Measured steps, after one warm-up step")
      ->capture_default_str()
      ->check(IntAtLeast(1));
  cmd->add_option("--ssd-bandwidth", flags->ssd_bandwidth_GBps,
                  "Cap on the SSD path in GB/s, one link reads and writes share (0: none)")
      ->capture_default_str()
      ->check(RealAtLeast(0));
  cmd->add_flag("--verify", flags->verify,
                "Fill every tensor with a pattern and check each one backward reads");
  cmd->add_option("--device-memory", flags->device_memory_GiB,
                  "Device memory in GiB (CPU arena; CUDA: 0 = the GPU's free memory)")
      ->capture_default_str()
      ->check(RealAtLeast(0));
  cmd->add_option("--staging-memory", flags->staging_MiB,
                  "Pinned host staging memory in MiB (none is pinned where GPUDirect Storage moves "
                  "the device buffers)")
      ->capture_default_str()
      ->check(RealAbove(0));
  cmd->add_option("--cpu-threads", flags->cpu_threads,
                  "Eigen threads of the CPU backend (1 leaves a core to copies and I/O)")
      ->capture_default_str()
      ->check(IntAtLeast(1));
  cmd->add_flag("--no-cpu-pin", flags->no_cpu_pin,
                "CPU backend: let the scheduler place the compute and copy/I/O threads "
                "(default: compute on the first CPUs, the rest on the others)");
  cmd->add_option("--cuda-device", flags->cuda_device,
                  "CUDA device index, in CUDA's order (CUDA_VISIBLE_DEVICES applies)")
      ->capture_default_str()
      ->check(IntAtLeast(0));
  cmd->add_option("--io-backend", flags->io_backend, "auto, io_uring or posix")
      ->capture_default_str();
  cmd->add_option("--gds", flags->gds,
                  "GPUDirect Storage: auto (the path the plan priced, its hardware's "
                  "storage.gds: on a GPU, cuFile where libcufile loads and its driver opens, else "
                  "the pinned bounce buffers, said once), on (cuFile or an error) or off")
      ->capture_default_str();
  cmd->add_option("--cufile-library", flags->cufile_library,
                  "the cuFile library --gds loads (a name the loader searches, or a path)")
      ->capture_default_str();
  cmd->add_flag(
      "--allow-buffered-io", flags->allow_buffered_io,
      "Where --dir is in memory (tmpfs, ramfs) or refuses O_DIRECT, go through the page cache "
      "instead of failing (the run file's direct_io says false)");
  cmd->add_flag(
      "--single-rank", flags->single_rank,
      "Without mpirun, replay a plan of tp x pp x dp > 1 anyway: the trace's shard alone, "
      "as one rank (no sends, receives, collectives or gradient sums; the run file says 1 "
      "rank)");
  cmd->add_option("-o,--output", flags->output, "Run file (JSON)")->required();
  cmd->add_option("--timeline", flags->timeline, "Chrome/Perfetto trace of the last step");
  return {cmd, [flags] { return Run(*flags); }};
}

}  // namespace ssdtrain::app
