// StepSync: what a replay needs from the other data-parallel ranks of a
// multi-process run (`mpirun -np N ssdtrain replay ...`; the MPI
// implementation is app/mpi_sync.cc). The replay stays free of MPI.
//
// The protocol, the same on every rank so that collectives always pair up:
//   set-up done                        Agree(status)
//   each step: backward done, weight gradients copied to host memory
//                                      Agree(status)
//              then                    AllReduceSum(each gradient), copies back
//              step done               Agree(status)
// A rank that fails anywhere calls Agree(its error) once, at the next point in
// that list, and stops; the others learn of it there and stop too (each rank's
// engine removes its files as it unwinds). Nothing fallible runs between an
// Agree that said "all well" and the gradients' all-reduce, so a rank never
// waits in an all-reduce that another rank will not join.
#pragma once

#include <cstdint>

#include "traces/status.h"
#include "traces/trace.h"

namespace ssdtrain::exec {

class StepSync {
 public:
  virtual ~StepSync() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Every rank's status at this point: Ok when all are. Otherwise this rank's
  // own error, or the error of the lowest failing rank, naming it.
  virtual Status Agree(const Status& local) = 0;
  // Sums `count` elements of `dtype` at `host` over the ranks, in place.
  virtual Status AllReduceSum(void* host, int64_t count, traces::DType dtype) = 0;
};

}  // namespace ssdtrain::exec
