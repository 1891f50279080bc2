// The layout of the CUDA backend's small device-side word array (one
// cudaMalloc of kDeviceWords 64-bit words), kept free of CUDA so that it is
// unit-tested in every build (exec/tests/cuda_host_logic_test.cc).
//
// Word 0 is the read kernels' sink (never written in practice). Each stream
// has its own first-mismatch word for CheckPattern: different streams may be
// checked from different host threads at once (device.h), and one shared word
// would let one check's preset overwrite another's result. One stream is
// driven by one thread at a time, so a word per stream is enough.
#pragma once

#include "exec/device.h"

namespace ssdtrain::exec::detail {

constexpr int kReadSinkWord = 0;
constexpr int kDeviceWords = 6;  // the sink and one mismatch word per stream (5)

// The index of `stream`'s first-mismatch word.
constexpr int MismatchWord(Stream stream) {
  switch (stream) {
    case Stream::kCompute:
      return 1;
    case Stream::kDeviceToHost:
      return 2;
    case Stream::kHostToDevice:
      return 3;
    case Stream::kSend:
      return 4;
    case Stream::kReceive:
      break;
  }
  return 5;
}

}  // namespace ssdtrain::exec::detail
