// One conformance suite for every device backend: CPU always, CUDA when this
// build has it and a GPU is present (otherwise skipped with the reason).
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "exec/cuda_device.h"
#include "exec/device.h"
#include "exec/tests/forwarding_device.h"

namespace ssdtrain::exec {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

class DeviceConformance : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    DeviceOptions options;
    options.capacity_bytes = 64 * kMiB;
    std::string why;
    if (GetParam() == "cuda" && !CudaAvailable(&why)) GTEST_SKIP() << "no usable GPU: " << why;
    auto device = MakeDevice(GetParam() == "cuda" ? BackendChoice::kCuda : BackendChoice::kCpu,
                             options, nullptr);
    ASSERT_TRUE(device.ok()) << device.status().ToString();
    device_ = std::move(*device);
  }
  DeviceBuffer Alloc(int64_t bytes) {
    auto b = device_->Allocate(bytes);
    EXPECT_TRUE(b.ok()) << b.status().ToString();
    return b.ok() ? *b : DeviceBuffer{};
  }
  std::unique_ptr<Event> NewEvent() {
    auto e = device_->CreateEvent();
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    return std::move(*e);
  }
  std::unique_ptr<Device> device_;
};

TEST_P(DeviceConformance, AllocationPastCapacityFailsWithResourceExhausted) {
  // 64 MiB capacity: 40 MiB fits, another 40 MiB does not, and after freeing
  // the first it does. Peak stays at the high-water mark, 40 MiB.
  DeviceBuffer a = Alloc(40 * kMiB);
  auto b = device_->Allocate(40 * kMiB);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), Status::Code::kResourceExhausted);
  EXPECT_NE(b.status().message().find("capacity"), std::string::npos) << b.status().message();
  EXPECT_EQ(device_->used_bytes(), 40 * kMiB);
  device_->Free(a);
  EXPECT_EQ(device_->used_bytes(), 0);
  DeviceBuffer c = Alloc(40 * kMiB);
  EXPECT_EQ(device_->peak_bytes(), 40 * kMiB);
  device_->Free(c);
}

TEST_P(DeviceConformance, PatternSurvivesDeviceToHostToDeviceRoundTrip) {
  // Fill on compute; the copy out waits on an event after the fill, so the
  // host sees the pattern; the copy back into a fresh buffer checks clean. On
  // the offload's copy streams and on the pipeline's (send, receive) alike.
  constexpr int64_t kBytes = 3 * kMiB + 13;  // odd size: exercises the tail
  for (auto [out, in] : {std::pair{Stream::kDeviceToHost, Stream::kHostToDevice},
                         std::pair{Stream::kSend, Stream::kReceive}}) {
    SCOPED_TRACE(std::string(ToString(out)) + " then " + std::string(ToString(in)));
    DeviceBuffer src = Alloc(kBytes), dst = Alloc(kBytes);
    std::vector<uint8_t> host(kBytes);
    ASSERT_TRUE(device_->RegisterHostMemory(host.data(), kBytes).ok());
    auto filled = NewEvent(), copied_out = NewEvent();
    ASSERT_TRUE(device_->FillPatternAsync(src, 42, Stream::kCompute).ok());
    ASSERT_TRUE(device_->Record(*filled, Stream::kCompute).ok());
    ASSERT_TRUE(device_->Wait(out, *filled).ok());
    ASSERT_TRUE(device_->CopyToHostAsync(host.data(), src, 0, kBytes, out).ok());
    ASSERT_TRUE(device_->Record(*copied_out, out).ok());
    ASSERT_TRUE(copied_out->Synchronize().ok());
    for (int64_t i = 0; i < kBytes; i += 4099) ASSERT_EQ(host[i], PatternByte(42, i)) << i;
    ASSERT_EQ(host[kBytes - 1], PatternByte(42, kBytes - 1));
    ASSERT_TRUE(device_->CopyToDeviceAsync(dst, 0, host.data(), kBytes, in).ok());
    EXPECT_TRUE(device_->CheckPattern(dst, 42, in).ok());
    // Another seed's pattern does not match.
    EXPECT_EQ(device_->CheckPattern(dst, 43, in).code(), Status::Code::kCorruption);
    ASSERT_TRUE(device_->UnregisterHostMemory(host.data()).ok());
    device_->Free(src);
    device_->Free(dst);
  }
}

TEST_P(DeviceConformance, CheckPatternNamesTheFirstCorruptByte) {
  constexpr int64_t kBytes = 8192;
  DeviceBuffer b = Alloc(kBytes);
  ASSERT_TRUE(device_->FillPatternAsync(b, 7, Stream::kHostToDevice).ok());
  const uint8_t wrong = static_cast<uint8_t>(PatternByte(7, 1000) ^ 0xff);
  ASSERT_TRUE(device_->CopyToDeviceAsync(b, 1000, &wrong, 1, Stream::kHostToDevice).ok());
  Status s = device_->CheckPattern(b, 7, Stream::kHostToDevice);
  EXPECT_EQ(s.code(), Status::Code::kCorruption);
  EXPECT_NE(s.message().find("byte 1000 "), std::string::npos) << s.message();
  device_->Free(b);
}

TEST_P(DeviceConformance, GemmNeedsItsWorkspaceAndRunsItsShape) {
  // A 256x128x64 GEMM needs (256*64 + 64*128 + 256*128) fp32 elements of
  // workspace = 57344 * 4 = 229376 bytes at least (CUDA reserves room for both
  // of the batch's C matrices: 360448 bytes); without it the op is refused.
  // The output buffer holds one fp16 C matrix of the two, so C goes to the
  // workspace, with a stride of its own per matrix.
  traces::Trace trace;
  traces::Op op;
  op.kind = traces::OpKind::kGemm;
  op.gemm = traces::GemmDims{256, 128, 64, 2};
  op.inputs = {0, 1};
  op.outputs = {2};
  trace.ops.push_back(op);
  DeviceBuffer in0 = Alloc(256 * 64 * 2), in1 = Alloc(64 * 128 * 2), out = Alloc(256 * 128 * 2);
  std::vector<DeviceBuffer> ins{in0, in1}, outs{out};
  // The output starts as a pattern; the GEMM overwrites it.
  ASSERT_TRUE(device_->FillPatternAsync(out, 5, Stream::kCompute).ok());
  auto reserved = device_->ReserveWorkspace(trace);
  ASSERT_TRUE(reserved.ok()) << reserved.status().ToString();
  EXPECT_GE(*reserved, 229376);
  ASSERT_TRUE(device_->RunOpAsync(op, OpBuffers{ins, outs, traces::DType::kFp16}).ok());
  ASSERT_TRUE(device_->Synchronize(Stream::kCompute).ok());
  EXPECT_EQ(device_->CheckPattern(out, 5, Stream::kCompute).code(), Status::Code::kCorruption);
  // Buffer counts that do not match the op are refused.
  EXPECT_EQ(device_->RunOpAsync(op, OpBuffers{outs, outs, traces::DType::kFp16}).code(),
            Status::Code::kInvalidArgument);
  device_->Free(in0);
  device_->Free(in1);
  device_->Free(out);
}

TEST_P(DeviceConformance, MemoryBoundOpWritesItsOutputBytes) {
  traces::Op op;
  op.kind = traces::OpKind::kElementwise;
  op.inputs = {0};
  op.outputs = {1};
  op.bytes_read = 1 << 20;
  op.bytes_written = 1 << 20;
  DeviceBuffer in = Alloc(1 << 20), out = Alloc(1 << 20);
  std::vector<DeviceBuffer> ins{in}, outs{out};
  ASSERT_TRUE(device_->FillPatternAsync(out, 9, Stream::kCompute).ok());
  ASSERT_TRUE(device_->RunOpAsync(op, OpBuffers{ins, outs}).ok());
  EXPECT_EQ(device_->CheckPattern(out, 9, Stream::kCompute).code(), Status::Code::kCorruption);
  device_->Free(in);
  device_->Free(out);
}

TEST_P(DeviceConformance, EventTimesFollowStreamOrder) {
  auto before = NewEvent(), after = NewEvent();
  DeviceBuffer b = Alloc(8 * kMiB);
  ASSERT_TRUE(device_->Record(*before, Stream::kCompute).ok());
  ASSERT_TRUE(device_->FillPatternAsync(b, 1, Stream::kCompute).ok());
  ASSERT_TRUE(device_->Record(*after, Stream::kCompute).ok());
  ASSERT_TRUE(after->Synchronize().ok());
  EXPECT_TRUE(before->Query());
  auto t0 = before->TimeNs(), t1 = after->TimeNs();
  ASSERT_TRUE(t0.ok() && t1.ok());
  EXPECT_LE(*t0, *t1);
  device_->Free(b);
}

TEST_P(DeviceConformance, ChecksOnTwoStreamsFromTwoThreadsKeepTheirOwnResults) {
  // Two host threads check at once, each on its own stream (device.h allows
  // it): `good` always matches seed 3; `bad` always mismatches first at byte
  // 100. 200 rounds each; a result shared between streams would let one
  // check's preset or mismatch show up in the other's answer.
  constexpr int64_t kBytes = 1 << 20;
  constexpr int kRounds = 200;
  DeviceBuffer good = Alloc(kBytes), bad = Alloc(kBytes);
  ASSERT_TRUE(device_->FillPatternAsync(good, 3, Stream::kCompute).ok());
  ASSERT_TRUE(device_->FillPatternAsync(bad, 3, Stream::kHostToDevice).ok());
  const uint8_t wrong = static_cast<uint8_t>(PatternByte(3, 100) ^ 0xff);
  ASSERT_TRUE(device_->CopyToDeviceAsync(bad, 100, &wrong, 1, Stream::kHostToDevice).ok());
  ASSERT_TRUE(device_->SynchronizeAll().ok());
  int good_failures = 0, bad_misreports = 0;
  std::thread other([&] {
    for (int i = 0; i < kRounds; ++i) {
      Status s = device_->CheckPattern(bad, 3, Stream::kHostToDevice);
      if (s.code() != Status::Code::kCorruption ||
          s.message().find("byte 100 ") == std::string::npos) {
        ++bad_misreports;
      }
    }
  });
  for (int i = 0; i < kRounds; ++i) {
    if (!device_->CheckPattern(good, 3, Stream::kCompute).ok()) ++good_failures;
  }
  other.join();
  EXPECT_EQ(good_failures, 0);
  EXPECT_EQ(bad_misreports, 0);
  device_->Free(good);
  device_->Free(bad);
}

TEST_P(DeviceConformance, AFailedCallBeforeALaunchDoesNotFailTheLaunch) {
  // A registration that fails (CUDA: cudaHostRegister of a null pointer
  // leaves an error pending on the thread; the CPU backend's is a no-op) and
  // is tolerated by its caller; the next kernel launches are healthy and must
  // say so.
  device_->RegisterHostMemory(nullptr, 4096).ok();
  DeviceBuffer b = Alloc(64 * 1024);
  EXPECT_TRUE(device_->FillPatternAsync(b, 11, Stream::kCompute).ok());
  EXPECT_TRUE(device_->CheckPattern(b, 11, Stream::kCompute).ok());
  device_->Free(b);
}

INSTANTIATE_TEST_SUITE_P(AllBackends, DeviceConformance, ::testing::Values("cpu", "cuda"),
                         [](const auto& info) { return info.param; });

TEST(MakeDevice, AutoPicksCpuWithoutAGpuAndSaysWhy) {
  std::string why;
  if (CudaAvailable(&why)) GTEST_SKIP() << "a GPU is present; auto picks it";
  std::string picked;
  auto device = MakeDevice(BackendChoice::kAuto, DeviceOptions{}, &picked);
  ASSERT_TRUE(device.ok());
  EXPECT_EQ((*device)->kind(), "cpu");
  EXPECT_NE(picked.find("no GPU"), std::string::npos) << picked;
  auto cuda = MakeDevice(BackendChoice::kCuda, DeviceOptions{}, nullptr);
  EXPECT_EQ(cuda.status().code(), Status::Code::kUnavailable);
}

TEST(MakeDevice, CudaDeviceIndexPastTheLastGpuIsRefusedNamingTheCount) {
  std::string why;
  if (!CudaAvailable(&why)) GTEST_SKIP() << "no usable GPU: " << why;
  // Index 64 exceeds any machine's count of GPUs.
  DeviceOptions options;
  options.capacity_bytes = 64 * kMiB;
  options.cuda_device_index = 64;
  auto device = MakeDevice(BackendChoice::kCuda, options, nullptr);
  ASSERT_FALSE(device.ok());
  EXPECT_EQ(device.status().code(), Status::Code::kInvalidArgument);
  EXPECT_NE(device.status().message().find("CUDA device index 64 does not exist"),
            std::string::npos)
      << device.status().message();
}

TEST(MakeDevice, CudaDeviceIsUsableFromAThreadThatDidNotMakeIt) {
  std::string why;
  if (!CudaAvailable(&why)) GTEST_SKIP() << "no usable GPU: " << why;
  // The replay drives H2D copies and checks from threads other than the one
  // that made the device; those threads must run on the device's GPU.
  DeviceOptions options;
  options.capacity_bytes = 64 * kMiB;
  auto device = MakeDevice(BackendChoice::kCuda, options, nullptr);
  ASSERT_TRUE(device.ok()) << device.status().ToString();
  Status fill = Status::Internal("not run"), check = Status::Internal("not run");
  std::thread([&] {
    auto b = (*device)->Allocate(kMiB);
    if (!b.ok()) return;
    fill = (*device)->FillPatternAsync(*b, 21, Stream::kHostToDevice);
    check = (*device)->CheckPattern(*b, 21, Stream::kHostToDevice);
    (*device)->Free(*b);
  }).join();
  EXPECT_TRUE(fill.ok()) << fill.ToString();
  EXPECT_TRUE(check.ok()) << check.ToString();
}

// A real CPU device whose compute stream reports a failure on Synchronize and
// which records the streams synchronized; everything else goes to the device.
class ComputeFailsOnSync final : public testing::ForwardingDevice {
 public:
  using ForwardingDevice::ForwardingDevice;
  std::vector<Stream> synchronized;

  Status Synchronize(Stream stream) override {
    synchronized.push_back(stream);
    Status st = ForwardingDevice::Synchronize(stream);
    if (stream == Stream::kCompute) return Status::Internal("compute stream failed");
    return st;
  }
};

TEST(Device, SynchronizeAllWaitsOnEveryStreamAfterOneFails) {
  // Callers free buffers right after SynchronizeAll (the replay's teardown), so
  // a compute failure must not skip waiting for the four copy streams: five
  // streams synchronized, in order, and compute's error returned.
  auto inner = MakeDevice(BackendChoice::kCpu, DeviceOptions{}, nullptr);
  ASSERT_TRUE(inner.ok()) << inner.status().ToString();
  ComputeFailsOnSync device(std::move(inner).value());
  const Status st = device.SynchronizeAll();
  EXPECT_EQ(st.code(), Status::Code::kInternal);
  EXPECT_EQ(st.message(), "compute stream failed");
  const std::vector<Stream> expected = {Stream::kCompute, Stream::kDeviceToHost,
                                        Stream::kHostToDevice, Stream::kSend, Stream::kReceive};
  EXPECT_EQ(device.synchronized, expected);
}

}  // namespace
}  // namespace ssdtrain::exec
