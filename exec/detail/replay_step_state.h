// What the replay keeps about one step while it issues it (exec/detail/
// replayer.h): each storage's state (StorageSlot: its device buffer, whether it
// is resident, how far its offload copy, write and read have come), each op
// issued on the compute stream with its events (IssuedOp), and the device
// memory after each issue (MemorySample). The measured timeline is built from
// the last two (exec/replay_timeline.cc).
// Threads: the issue thread owns all of it, but a slot's read_status and
// read_done, which the reader thread sets under Replayer::mu_.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "exec/detail/host_staging.h"
#include "exec/device.h"
#include "traces/status.h"
#include "traces/trace.h"

namespace ssdtrain::exec::detail {

struct StorageSlot {
  DeviceBuffer buffer;
  bool resident = false;
  bool checked = false;
  bool temporary = false;  // resurrected for a recompute only
  // Kept by a re-run: the re-run ops still to read it (rerun_keep).
  int rerun_left = 0;
  // Offload path (events reused across steps).
  std::unique_ptr<Event> d2h_start, d2h_end, h2d_ready, h2d_start, h2d_end;
  StagingPiece staging;
  bool copied_out = false, wrote = false, read_issued = false, read_done = false;
  bool read_consumed = false, copied_in = false;
  Status read_status;  // with read_done: set by the reader thread under Replayer::mu_
  int64_t write_begin_ns = 0, write_end_ns = 0, read_begin_ns = 0, read_end_ns = 0;
  void ResetStep() {
    checked = false;
    copied_out = wrote = read_issued = read_done = read_consumed = copied_in = false;
    read_status = Status::Ok();
  }
};

struct IssuedOp {  // one op on the compute stream
  traces::OpId op;
  Event* start;
  Event* end;
  bool io_dependent;
  bool recompute;
  // A collective exchanged beside later ops (replay_beside.cc): its span is
  // the exchange, on the network lane, apart from the compute stream's.
  bool beside = false;
};

struct MemorySample {
  size_t issue;  // the index in the issue list whose start it is placed at
  int64_t device_bytes, activation_bytes;
};

}  // namespace ssdtrain::exec::detail
