// The interconnect between the ranks of `mpirun -np N ssdtrain calibrate`,
// measured through the calls a replay on those ranks makes (app/mpi_sync):
//   - pipeline sends: a ping-pong between ranks 0 and 1 (SendAsync, Receive),
//     small messages for the latency, large ones for the bandwidth;
//   - the gradient all-reduce: AllReduceSum of fp32 over all N ranks.
// The figures are the simulator's (sim/hardware.h; sim/collective.h prices a
// send with SendNs and the all-reduce with CollectiveNs), solved
// from the medians of the timed runs:
//   latency_us  one-way time of an 8-byte message;
//   pp_GBps     S / (one-way time of S bytes − latency);
//   dp_GBps     2(N−1)/N · S / (all-reduce time of S bytes − 2(N−1) · latency).
// A rate whose time does not exceed its latency part (a machine faster than the
// timer can tell) is S over the whole time instead.
//
// Collective: every rank calls it at the same point, and it ends with every
// rank agreed (exec/step_sync.h): Ok on all, or on each the first failure,
// its own or "rank R failed: ..."; the caller makes no agreement for it.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "app/mpi_sync.h"
#include "sim/hardware.h"
#include "traces/status.h"

namespace ssdtrain::app {

struct InterconnectMeasurement {
  int64_t bytes = int64_t{16} << 20;  // S, the large message and all-reduce
  int repeats = 3;                    // timed runs each (after one untimed); median kept
};

struct InterconnectFigures {
  double pp_GBps = 0;
  double dp_GBps = 0;
  double latency_us = 0;
  int ranks = 0;
};

// The figures on rank 0; the other ranks get theirs zeroed (only rank 0 times
// the ping-pong).
Result<InterconnectFigures> MeasureInterconnect(RankSync& ranks, const InterconnectMeasurement& m);

// The solved figures from the measured one-way and all-reduce times (ns), as
// above; a pure function, tested against the simulator's formulas.
InterconnectFigures SolveInterconnect(int ranks, int64_t bytes, double small_oneway_ns,
                                      double large_oneway_ns, double allreduce_ns);

}  // namespace ssdtrain::app
