// Element-wise sums in host memory, in a trace's dtype: what a reduction over
// ranks computes (the tensor-parallel all-reduce and reduce-scatter of
// exec/replay_tensor_parallel.cc, and the MPI sums of app/mpi_sync.cc, which
// have no 16-bit floating-point type of their own). 16-bit and 8-bit floats
// add in fp32 and round back to nearest even; integers wrap. Every rank that sums the
// same inputs in the same order gets the same bits.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>

#include "traces/trace.h"

namespace ssdtrain::exec {

// inout[i] = inout[i] + in[i] for `count` elements of `dtype`.
void SumInto(traces::DType dtype, const void* in, void* inout, int64_t count);

float HalfToFloat(uint16_t h);
uint16_t FloatToHalf(float x);
float Bf16ToFloat(uint16_t b);
uint16_t FloatToBf16(float x);
// FP8 E4M3, the format fp8 tensors sum in (forward tensors are E4M3 under
// every recipe): exact to float, rounded to nearest even and saturated at
// ±448 from it, as Transformer Engine's casts saturate.
float E4m3ToFloat(uint8_t v);
uint8_t FloatToE4m3(float x);

}  // namespace ssdtrain::exec
