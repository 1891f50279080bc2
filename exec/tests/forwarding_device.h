// A Device that hands every call to another one: tests derive from it and
// override the calls they observe or hold (device_conformance_test.cc,
// replay_streams_test.cc).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "exec/device.h"

namespace ssdtrain::exec::testing {

class ForwardingDevice : public Device {
 public:
  explicit ForwardingDevice(std::unique_ptr<Device> inner) : inner_(std::move(inner)) {}

  std::string Describe() const override { return inner_->Describe(); }
  std::string_view kind() const override { return inner_->kind(); }
  std::vector<int> helper_cpus() const override { return inner_->helper_cpus(); }
  Result<DeviceBuffer> Allocate(int64_t bytes) override { return inner_->Allocate(bytes); }
  void Free(DeviceBuffer buffer) override { inner_->Free(buffer); }
  int64_t capacity_bytes() const override { return inner_->capacity_bytes(); }
  int64_t allocation_alignment() const override { return inner_->allocation_alignment(); }
  int64_t workspace_output_region_bytes() const override {
    return inner_->workspace_output_region_bytes();
  }
  int64_t used_bytes() const override { return inner_->used_bytes(); }
  int64_t peak_bytes() const override { return inner_->peak_bytes(); }
  void ResetPeak() override { inner_->ResetPeak(); }
  Status RunOpAsync(const traces::Op& op, const OpBuffers& buffers) override {
    return inner_->RunOpAsync(op, buffers);
  }
  Result<int64_t> ReserveWorkspace(const traces::Trace& trace) override {
    return inner_->ReserveWorkspace(trace);
  }
  Status FillPatternAsync(DeviceBuffer buffer, uint64_t seed, Stream stream) override {
    return inner_->FillPatternAsync(buffer, seed, stream);
  }
  Status CheckPattern(DeviceBuffer buffer, uint64_t seed, Stream stream) override {
    return inner_->CheckPattern(buffer, seed, stream);
  }
  Status CopyToHostAsync(void* dst, DeviceBuffer src, int64_t offset, int64_t bytes,
                         Stream stream) override {
    return inner_->CopyToHostAsync(dst, src, offset, bytes, stream);
  }
  Status CopyToDeviceAsync(DeviceBuffer dst, int64_t offset, const void* src, int64_t bytes,
                           Stream stream) override {
    return inner_->CopyToDeviceAsync(dst, offset, src, bytes, stream);
  }
  Status RegisterHostMemory(void* ptr, int64_t bytes) override {
    return inner_->RegisterHostMemory(ptr, bytes);
  }
  Status UnregisterHostMemory(void* ptr) override { return inner_->UnregisterHostMemory(ptr); }
  Result<std::unique_ptr<Event>> CreateEvent() override { return inner_->CreateEvent(); }
  Status Record(Event& event, Stream stream) override { return inner_->Record(event, stream); }
  Status Wait(Stream stream, Event& event) override { return inner_->Wait(stream, event); }
  Status Synchronize(Stream stream) override { return inner_->Synchronize(stream); }

 private:
  std::unique_ptr<Device> inner_;
};

}  // namespace ssdtrain::exec::testing
