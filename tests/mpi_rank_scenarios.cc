// One scenario of tests/mpi_ranks_test.cc on every rank of
// `mpirun -np 2 mpi_rank_scenarios SCENARIO DIR`, over the MPI StepSync the
// CLI uses (app/mpi_sync.cc). Each rank prints one line, "rank R: ok" or
// "rank R: error: <message>", and exits 0 or 1. Faults come from the
// executor's test points (exec/detail/test_points.h), installed on rank 1 (on
// rank 0 for the tensor-parallel and expert-parallel pieces, which rank 1
// receives), or from the fault-injecting I/O backend (exec/fault_backend.h).
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "app/detail/mapped_buffer.h"
#include "app/mpi_sync.h"
#include "exec/detail/test_points.h"
#include "exec/fault_backend.h"
#include "exec/io_backend.h"
#include "exec/replay.h"
#include "exec/tests/replay_test_util.h"
#include "traces/trace.h"
#include "traces/uniform_plans.h"

namespace ssdtrain {
namespace {

using exec::detail::TestPoint;

int FailGradientCopyBack(TestPoint point, int64_t) {
  return point == TestPoint::kGradientCopyBack ? 1 : 0;
}
// The last step of a replay of --steps 1 (step 0 is the warm-up).
int FailLastStepsByteCheck(TestPoint point, int64_t step) {
  return point == TestPoint::kStepBytesChecked && step == 1 ? 1 : 0;
}
// Every piece of every collective this rank sends: a byte flipped after its
// checksum, or before it.
int CorruptCollectivePieces(TestPoint point, int64_t) {
  return point == TestPoint::kCollectiveSend ? exec::detail::kFlipAfterChecksum : 0;
}
int WrongCollectivePieces(TestPoint point, int64_t) {
  return point == TestPoint::kCollectiveSend ? exec::detail::kFlipBeforeChecksum : 0;
}
// The op whose pieces CorruptOnePiece corrupts (a hook is a plain function).
int64_t corrupted_op = -1;
int CorruptOnePiece(TestPoint point, int64_t op) {
  return point == TestPoint::kCollectiveSend && op == corrupted_op
             ? exec::detail::kFlipAfterChecksum
             : 0;
}

// How the ranks replay tiny GPT (micro-batch 1, sequence 128, every saved
// activation to the SSD): as data-parallel replicas or as one
// tensor-parallel group (tp = every rank, verified), each in its own folder;
// `hook` installed on rank `hook_rank`, rank 1's I/O backend `backend` when
// given.
struct RankRun {
  bool tensor_parallel = false;
  // Instead: tiny-moe (sequence 64) as two data-parallel replicas at ep 2,
  // whose dispatch and combine all-to-alls run between the two (verified).
  bool expert_parallel = false;
  // Or: tiny-gpt with flash attention as one cp group of every rank
  // (context_parallel), or as dp replicas at ZeRO-3 (zero3), verified.
  bool context_parallel = false;
  bool zero3 = false;
  exec::detail::TestHook hook = nullptr;
  int hook_rank = 1;
  std::function<std::unique_ptr<exec::IoBackend>()> backend;
};

// Replays as `run` says, then the ranks gather their reports at rank 0, as
// `ssdtrain replay` does after a replay that succeeded.
Status ReplayAndGather(app::RankSync& ranks, const std::string& dir, const RankRun& run) {
  const int tp = run.tensor_parallel ? ranks.size() : 1;
  const int cp = run.context_parallel ? ranks.size() : 1;
  traces::Layout layout;
  layout.tp = tp;
  layout.cp = cp;
  layout.dp = ranks.size() / tp / cp;
  layout.zero_stage = run.zero3 ? 3 : 0;
  SSDTRAIN_RETURN_IF_ERROR(ranks.SplitStages(layout));
  models::ConfigOverrides gpt;
  gpt.micro_batch = 1;
  gpt.seq_len = 128;
  gpt.attention = "flash";
  gpt.cp = layout.cp;
  gpt.dp = layout.dp;
  gpt.zero_stage = layout.zero_stage;
  const traces::Trace trace = run.expert_parallel ? exec::testing::TinyMoeTrace(4, 64, ranks.size())
                              : run.context_parallel || run.zero3
                                  ? exec::testing::TinyGptTraceWith(gpt)
                                  : exec::testing::TinyGptTrace(1, 128, 1, 0, tp);
  traces::Plan plan = traces::OffloadAllPlan(trace);
  plan.tp = tp;
  plan.cp = cp;
  plan.dp = layout.dp;
  plan.zero_stage = layout.zero_stage;
  plan.ep = trace.header.ep;
  const std::string mine = dir + "/rank-" + std::to_string(ranks.rank());
  std::filesystem::create_directories(mine);
  exec::ReplayOptions o = exec::testing::CpuOptions(mine);
  o.sync = &ranks;
  o.verify = run.tensor_parallel || run.expert_parallel || run.context_parallel || run.zero3;
  o.cpu_pin_threads = false;  // the ranks share one machine
  if (ranks.rank() == run.hook_rank) exec::detail::SetTestHook(run.hook);
  if (ranks.rank() == 1) o.make_io_backend = run.backend;
  Result<exec::ReplayResult> result = exec::Replay(trace, plan, o, "offload-all");
  exec::detail::SetTestHook(nullptr);
  SSDTRAIN_RETURN_IF_ERROR(result.status());
  return ranks.GatherAtRankZero("rank " + std::to_string(ranks.rank())).status();
}

Status GradientCopyBackFails(app::RankSync& ranks, const std::string& dir) {
  RankRun run;
  run.hook = FailGradientCopyBack;
  return ReplayAndGather(ranks, dir, run);
}

Status LastStepsByteCheckFails(app::RankSync& ranks, const std::string& dir) {
  RankRun run;
  run.hook = FailLastStepsByteCheck;
  return ReplayAndGather(ranks, dir, run);
}

// Rank 1's first offload write fails with EIO (the fault-injecting backend
// over plain pwrite).
std::unique_ptr<exec::IoBackend> FirstWriteFails() {
  exec::FaultOptions f;
  f.rules = {{exec::IoOp::kWrite, 0, exec::FaultKind::kEio, 1}};
  auto inner = exec::MakeIoBackend(exec::BackendKind::kPosix, 32, [](std::string_view) {});
  return std::make_unique<exec::FaultBackend>(std::move(*inner), std::move(f));
}

Status TensorParallelWriteFails(app::RankSync& ranks, const std::string& dir) {
  RankRun run;
  run.tensor_parallel = true;
  run.backend = FirstWriteFails;
  return ReplayAndGather(ranks, dir, run);
}

// The two ranks as one tensor-parallel group, `hook` (when set) on rank 0.
Status ReplayTensorParallelGroup(app::RankSync& ranks, const std::string& dir,
                                 exec::detail::TestHook hook) {
  RankRun run;
  run.tensor_parallel = true;
  run.hook = hook;
  run.hook_rank = 0;
  return ReplayAndGather(ranks, dir, run);
}

// Rank 0's all-reduce pieces arrive at rank 1 with a flipped byte.
Status TensorParallelPayloadCorrupt(app::RankSync& ranks, const std::string& dir) {
  return ReplayTensorParallelGroup(ranks, dir, CorruptCollectivePieces);
}

// Rank 0's pieces checksum, but its contribution is not its pattern.
Status TensorParallelContributionWrong(app::RankSync& ranks, const std::string& dir) {
  return ReplayTensorParallelGroup(ranks, dir, WrongCollectivePieces);
}

// Rank 0's pieces of the first asynchronous collective (a column-parallel
// layer's backward all-reduce, exchanged while the weight gradient beside it
// runs: exec/replay_beside.cc) arrive at rank 1 with a flipped byte.
Status TensorParallelAsyncPayloadCorrupt(app::RankSync& ranks, const std::string& dir) {
  const traces::Trace trace = exec::testing::TinyGptTrace(1, 128, 1, 0, ranks.size());
  for (const traces::Op& op : trace.ops) {
    if (traces::AsyncOverlapGemm(trace, op.id) == traces::kNoOp) continue;
    corrupted_op = op.id;
    break;
  }
  if (corrupted_op < 0) return Status::Internal("tiny GPT at tp 2 has no async collective");
  return ReplayTensorParallelGroup(ranks, dir, CorruptOnePiece);
}

// Both ranks replay tiny GPT at tp 2 verified, with nothing injected.
Status TensorParallelReplays(app::RankSync& ranks, const std::string& dir) {
  return ReplayTensorParallelGroup(ranks, dir, nullptr);
}

// The two ranks as one expert-parallel group of tiny-moe, `hook` (when set)
// on rank 0, rank 1's I/O backend `backend` when given.
Status ReplayExpertParallelGroup(app::RankSync& ranks, const std::string& dir,
                                 exec::detail::TestHook hook,
                                 std::function<std::unique_ptr<exec::IoBackend>()> backend = {}) {
  RankRun run;
  run.expert_parallel = true;
  run.hook = hook;
  run.hook_rank = 0;
  run.backend = std::move(backend);
  return ReplayAndGather(ranks, dir, run);
}

Status ExpertParallelReplays(app::RankSync& ranks, const std::string& dir) {
  return ReplayExpertParallelGroup(ranks, dir, nullptr);
}

// Rank 1's first offload write fails while rank 0 goes on to the next
// all-to-all, where it waits for rank 1's piece.
Status ExpertParallelWriteFails(app::RankSync& ranks, const std::string& dir) {
  return ReplayExpertParallelGroup(ranks, dir, nullptr, FirstWriteFails);
}

// Rank 0's dispatch pieces arrive at rank 1 with a flipped byte.
Status ExpertParallelPayloadCorrupt(app::RankSync& ranks, const std::string& dir) {
  return ReplayExpertParallelGroup(ranks, dir, CorruptCollectivePieces);
}

// Rank 0's pieces checksum, but they are not its rows' patterns.
Status ExpertParallelPiecesWrong(app::RankSync& ranks, const std::string& dir) {
  return ReplayExpertParallelGroup(ranks, dir, WrongCollectivePieces);
}

// The two ranks as one cp group of tiny-gpt (flash attention, sequence
// 128), or as dp replicas at ZeRO-3, `hook` (when set) on rank 0, rank 1's
// I/O backend `backend` when given.
Status ReplayGpt(app::RankSync& ranks, const std::string& dir, bool context_parallel,
                 exec::detail::TestHook hook,
                 std::function<std::unique_ptr<exec::IoBackend>()> backend = {}) {
  RankRun run;
  run.context_parallel = context_parallel;
  run.zero3 = !context_parallel;
  run.hook = hook;
  run.hook_rank = 0;
  run.backend = std::move(backend);
  return ReplayAndGather(ranks, dir, run);
}

// Rank 1's first offload write fails while rank 0 goes on to the next ring
// step or ZeRO gather, where it waits for rank 1's message.
Status ContextParallelWriteFails(app::RankSync& ranks, const std::string& dir) {
  return ReplayGpt(ranks, dir, true, nullptr, FirstWriteFails);
}
Status Zero3WriteFails(app::RankSync& ranks, const std::string& dir) {
  return ReplayGpt(ranks, dir, false, nullptr, FirstWriteFails);
}
// Rank 0's ring messages checksum, but they are not its K/V's patterns.
Status ContextParallelRingWrong(app::RankSync& ranks, const std::string& dir) {
  return ReplayGpt(ranks, dir, true, WrongCollectivePieces);
}
// Rank 0's ZeRO pieces arrive at rank 1 with a flipped byte.
Status Zero3PayloadCorrupt(app::RankSync& ranks, const std::string& dir) {
  return ReplayGpt(ranks, dir, false, CorruptCollectivePieces);
}

// Rank 0 sends rank 1 one pipeline message under each tag; rank 1 checks
// that each arrives as sent, tag and bytes.
Status TagsArriveAsSent(app::RankSync& ranks, const std::vector<exec::PipelineTag>& tags) {
  const std::string payload = "pipeline payload";
  const int64_t size = static_cast<int64_t>(payload.size());
  if (ranks.rank() == 0) {
    for (const exec::PipelineTag& tag : tags) {
      SSDTRAIN_RETURN_IF_ERROR(ranks.SendAsync(1, tag, payload.data(), size));
    }
    return ranks.WaitSends();
  }
  for (const exec::PipelineTag& sent : tags) {
    std::string got(payload.size(), '\0');
    exec::PipelineTag tag;
    int64_t bytes = 0;
    SSDTRAIN_RETURN_IF_ERROR(ranks.Receive(0, got.data(), size, &tag, &bytes));
    if (!(tag == sent) || bytes != size || got != payload) {
      return Status::Internal("sent " + sent.Describe() + ", received " + tag.Describe() + " (" +
                              std::to_string(bytes) + " bytes: \"" + got + "\")");
    }
  }
  return Status::Ok();
}

Status LargeMicroBatchTags(app::RankSync& ranks, const std::string&) {
  // Tags of micro-batch 2047's last gradient (under the former scheme
  // (2047 × 2 + 1) × 8 + 7 = 32767, the abort's tag) and of micro-batches
  // past any 15-bit tag.
  return TagsArriveAsSent(ranks, {{2047, true, 7}, {2048, false, 0}, {1'000'000, true, 31}});
}

// Past MPI's int count: 2^31 + 4097 bytes, three pieces of at most 1 GiB.
constexpr int64_t kLargeBytes = (int64_t{1} << 31) + 4097;

char PatternAt(int64_t i) { return static_cast<char>((i * 131) ^ (i >> 20)); }

Status LargeMessage(app::RankSync& ranks, const std::string&) {
  // Mapped in huge pages: 2 GiB of 4 KiB page faults cost 7 s on this VM.
  app::detail::MappedBuffer bytes(static_cast<size_t>(kLargeBytes));
  if (ranks.rank() == 0) {
    for (int64_t i = 0; i < kLargeBytes; ++i) bytes.data()[i] = PatternAt(i);
    SSDTRAIN_RETURN_IF_ERROR(ranks.SendAsync(1, {3, false, 0}, bytes.data(), kLargeBytes));
    return ranks.WaitSends();
  }
  exec::PipelineTag tag;
  int64_t got = 0;
  SSDTRAIN_RETURN_IF_ERROR(ranks.Receive(0, bytes.data(), kLargeBytes, &tag, &got));
  if (got != kLargeBytes || !(tag == exec::PipelineTag{3, false, 0})) {
    return Status::Internal("received " + tag.Describe() + " of " + std::to_string(got) + " bytes");
  }
  for (int64_t i = 0; i < kLargeBytes; ++i) {
    if (bytes.data()[i] != PatternAt(i)) {
      return Status::Internal("byte " + std::to_string(i) + " differs from the one sent");
    }
  }
  return Status::Ok();
}

Status LargeGather(app::RankSync& ranks, const std::string&) {
  // 2 × (2^30 + 1000 + r) bytes: more than MPI's int count in all.
  auto length = [](int r) { return static_cast<size_t>((int64_t{1} << 30) + 1000 + r); };
  const std::string mine(length(ranks.rank()), static_cast<char>('a' + ranks.rank()));
  SSDTRAIN_ASSIGN_OR_RETURN(std::vector<std::string> all, ranks.GatherAtRankZero(mine));
  if (ranks.rank() != 0) return all.empty() ? Status::Ok() : Status::Internal("not rank 0's");
  if (all.size() != static_cast<size_t>(ranks.size())) return Status::Internal("ranks missing");
  for (int r = 0; r < ranks.size(); ++r) {
    const std::string& s = all[static_cast<size_t>(r)];
    if (s.size() != length(r) || s.find_first_not_of(static_cast<char>('a' + r)) != s.npos) {
      return Status::Internal("rank " + std::to_string(r) + "'s " + std::to_string(s.size()) +
                              " bytes are not what it sent");
    }
  }
  return Status::Ok();
}

using Scenario = Status (*)(app::RankSync& ranks, const std::string& dir);

const std::map<std::string, Scenario>& Scenarios() {
  static const std::map<std::string, Scenario> scenarios = {
      {"gradient-copy-back-fails", GradientCopyBackFails},
      {"last-steps-byte-check-fails", LastStepsByteCheckFails},
      {"large-micro-batch-tags", LargeMicroBatchTags},
      {"large-message", LargeMessage},
      {"large-gather", LargeGather},
      {"tp-replays", TensorParallelReplays},
      {"tp-write-fails", TensorParallelWriteFails},
      {"tp-payload-corrupt", TensorParallelPayloadCorrupt},
      {"tp-async-payload-corrupt", TensorParallelAsyncPayloadCorrupt},
      {"tp-contribution-wrong", TensorParallelContributionWrong},
      {"ep-replays", ExpertParallelReplays},
      {"ep-write-fails", ExpertParallelWriteFails},
      {"ep-payload-corrupt", ExpertParallelPayloadCorrupt},
      {"ep-pieces-wrong", ExpertParallelPiecesWrong},
      {"cp-write-fails", ContextParallelWriteFails},
      {"cp-ring-wrong", ContextParallelRingWrong},
      {"zero3-write-fails", Zero3WriteFails},
      {"zero3-payload-corrupt", Zero3PayloadCorrupt},
  };
  return scenarios;
}

int Main(int argc, char** argv) {
  const auto it = argc == 3 ? Scenarios().find(argv[1]) : Scenarios().end();
  if (it == Scenarios().end()) {
    std::fprintf(stderr, "usage: mpirun -np 2 mpi_rank_scenarios SCENARIO DIR\n");
    return 2;
  }
  auto ranks = app::StartRanks();
  if (!ranks.ok()) {
    std::printf("rank ?: error: %s\n", ranks.status().message().c_str());
    return 1;
  }
  const Status st = it->second(**ranks, argv[2]);
  if (st.ok()) {
    std::printf("rank %d: ok\n", (*ranks)->rank());
  } else {
    std::printf("rank %d: error: %s\n", (*ranks)->rank(), st.message().c_str());
  }
  std::fflush(stdout);
  return st.ok() ? 0 : 1;
}

}  // namespace
}  // namespace ssdtrain

int main(int argc, char** argv) { return ssdtrain::Main(argc, argv); }
