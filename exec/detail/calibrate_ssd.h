// Calibrate's SSD measurement (exec/calibrate_ssd.cc): the offload
// directories' bandwidth, each alone and together, and one block's latency.
#pragma once

#include "exec/calibrate.h"
#include "traces/status.h"

namespace ssdtrain::exec::detail {

// Sets out->ssd_write_GBps and ssd_read_GBps (bench-io over every directory at
// once, at options.block_size x options.queue_depth, options.io_bytes), with
// out->ssd_dirs each directory alone when there are several, the I/O backend
// and whether it ran O_DIRECT; and out->ssd_write_latency_us and
// ssd_read_latency_us: the median of 7 writes and reads of one 4 KiB block
// through the offload engine, in the first directory.
Status MeasureSsd(const CalibrationOptions& options, Calibration* out);

}  // namespace ssdtrain::exec::detail
