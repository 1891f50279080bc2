// Test-only points where a test can order events that are otherwise left to
// the scheduler (a delay in a window between two locked sections) or make a
// kernel call fail as it rarely does (an errno for io_uring_submit, fallocate
// or unlink). Production
// code pays one atomic load per point; with no hook installed a point does
// nothing and returns 0. The hook is process-wide: install it only in tests,
// and remove it (nullptr) before the test ends.
#pragma once

#include <cstdint>

namespace ssdtrain::exec::detail {

enum class TestPoint {
  // OffloadEngine::WriteAsync, with the engine's lock dropped around fallocate.
  kWriteUnlocked,
  // The replay's write-completion thread, right after the cache decided to
  // evict a storage (the id) whose write landed.
  kEvictionDecided,
  // TensorCache::ClaimForBackward of a storage (the id), after its decision.
  kBackwardClaimed,
  // UringBackend, instead of io_uring_submit: a positive return is the errno the
  // submit fails with (the prepared requests stay unsent in the ring).
  kUringSubmit,
  // UringBackend::Init, after io_uring_queue_init: a nonzero return makes the
  // ring act as on a kernel without IORING_FEAT_EXT_ARG (before 5.11), where
  // liburing drops every completion tagged LIBURING_UDATA_TIMEOUT.
  kUringInit,
  // OffloadEngine::Preallocate (id -1) and WriteAsync (the tensor), before
  // fallocate: a positive return is the errno fallocate fails with instead.
  kFallocate,
  // OffloadEngine::Remove (the tensor), before unlinking its file: a positive
  // return is the errno the unlink fails with instead (the file stays).
  kUnlink,
  // Replayer::FinishGradients, before copying weight gradient `id` back to
  // the device after its bucket's all-reduce: a nonzero return makes that
  // copy fail.
  kGradientCopyBack,
  // Replay, at the end of step `id`, where it checks that the engine moved the
  // bytes the cache counted: a nonzero return makes the check fail.
  kStepBytesChecked,
  // Replayer::SendPiece of collective op `id` (tensor-parallel ranks): a
  // return of kFlipAfterChecksum flips the piece's first byte after its
  // checksum (corrupt on the wire), kFlipBeforeChecksum before it (a wrong
  // contribution whose checksum holds).
  kCollectiveSend,
};
constexpr int kFlipAfterChecksum = 1;
constexpr int kFlipBeforeChecksum = 2;

// `id`: the tensor, storage or step concerned, or 0. Returns 0, or
// (kUringSubmit, kFallocate, kUnlink) an errno to fail with, or (kUringInit,
// kGradientCopyBack, kStepBytesChecked) nonzero to act, or (kCollectiveSend)
// which byte flip.
using TestHook = int (*)(TestPoint point, int64_t id);

// Installs `hook` (nullptr: none). Thread-safe.
void SetTestHook(TestHook hook);
// Calls the installed hook; 0 when there is none.
int HitTestPoint(TestPoint point, int64_t id = 0);

}  // namespace ssdtrain::exec::detail
