// The CUDA backend's copies, host registration, events and streams
// (exec/detail/cuda_device.h): events timed from anchors on the idle clock
// stream (exec/detail/event_clock.h).
#include <cuda_runtime.h>

#include <memory>
#include <mutex>
#include <string>

#include "exec/cuda_error.h"
#include "exec/detail/cuda_device.h"
#include "exec/detail/event_clock.h"

namespace ssdtrain::exec::cuda_impl {

Status CudaEvent::Synchronize() {
  SSDTRAIN_CUDA_TRY(cudaEventSynchronize(event_));
  return Status::Ok();
}

Result<int64_t> CudaEvent::TimeNs() {
  std::shared_ptr<const Anchor> anchor;
  {
    std::lock_guard<std::mutex> lock(mu_);
    anchor = anchor_;
  }
  if (anchor == nullptr) return Status::FailedPrecondition("TimeNs of an event never recorded");
  float ms = 0;
  SSDTRAIN_CUDA_TRY(cudaEventElapsedTime(&ms, anchor->event, event_));
  return detail::EventHostNs(anchor->host_ns, ms);
}

Status CudaDevice::CopyToHostAsync(void* host_dst, DeviceBuffer src, int64_t offset, int64_t bytes,
                                   Stream stream) {
  if (offset < 0 || bytes < 0 || offset + bytes > src.bytes) {
    return Status::InvalidArgument("device-to-host copy outside its device buffer");
  }
  SSDTRAIN_RETURN_IF_ERROR(BindDevice(options_.cuda_device_index));
  SSDTRAIN_CUDA_TRY(cudaMemcpyAsync(host_dst, static_cast<const uint8_t*>(src.ptr) + offset,
                                    static_cast<size_t>(bytes), cudaMemcpyDeviceToHost,
                                    get(stream)));
  return Status::Ok();
}

Status CudaDevice::CopyToDeviceAsync(DeviceBuffer dst, int64_t offset, const void* host_src,
                                     int64_t bytes, Stream stream) {
  if (offset < 0 || bytes < 0 || offset + bytes > dst.bytes) {
    return Status::InvalidArgument("host-to-device copy outside its device buffer");
  }
  SSDTRAIN_RETURN_IF_ERROR(BindDevice(options_.cuda_device_index));
  SSDTRAIN_CUDA_TRY(cudaMemcpyAsync(static_cast<uint8_t*>(dst.ptr) + offset, host_src,
                                    static_cast<size_t>(bytes), cudaMemcpyHostToDevice,
                                    get(stream)));
  return Status::Ok();
}

Status CudaDevice::RegisterHostMemory(void* ptr, int64_t bytes) {
  SSDTRAIN_RETURN_IF_ERROR(BindDevice(options_.cuda_device_index));
  SSDTRAIN_CUDA_TRY(cudaHostRegister(ptr, static_cast<size_t>(bytes), cudaHostRegisterDefault));
  return Status::Ok();
}

Status CudaDevice::UnregisterHostMemory(void* ptr) {
  SSDTRAIN_RETURN_IF_ERROR(BindDevice(options_.cuda_device_index));
  SSDTRAIN_CUDA_TRY(cudaHostUnregister(ptr));
  return Status::Ok();
}

Result<std::unique_ptr<Event>> CudaDevice::CreateEvent() {
  SSDTRAIN_RETURN_IF_ERROR(BindDevice(options_.cuda_device_index));
  cudaEvent_t e = nullptr;
  SSDTRAIN_CUDA_TRY(cudaEventCreateWithFlags(&e, kEventFlags));
  return std::unique_ptr<Event>(std::make_unique<CudaEvent>(e));
}

Status CudaDevice::Record(Event& event, Stream stream) {
  SSDTRAIN_RETURN_IF_ERROR(BindDevice(options_.cuda_device_index));
  CudaEvent& e = static_cast<CudaEvent&>(event);
  std::shared_ptr<const Anchor> anchor;
  {
    std::lock_guard<std::mutex> lock(anchor_mu_);
    if (detail::AnchorIsStale(anchor_->taken_ns, NowNs())) SSDTRAIN_RETURN_IF_ERROR(TakeAnchor());
    anchor = anchor_;
  }
  // The anchor has completed, so the event completes after it.
  e.set_anchor(std::move(anchor));
  SSDTRAIN_CUDA_TRY(cudaEventRecord(e.get(), get(stream)));
  return Status::Ok();
}

Status CudaDevice::Wait(Stream stream, Event& event) {
  SSDTRAIN_RETURN_IF_ERROR(BindDevice(options_.cuda_device_index));
  SSDTRAIN_CUDA_TRY(cudaStreamWaitEvent(get(stream), static_cast<CudaEvent&>(event).get(), 0));
  return Status::Ok();
}

Status CudaDevice::Synchronize(Stream stream) {
  SSDTRAIN_RETURN_IF_ERROR(BindDevice(options_.cuda_device_index));
  SSDTRAIN_CUDA_TRY(cudaStreamSynchronize(get(stream)));
  return Status::Ok();
}

Status CudaDevice::TakeAnchor() {
  auto next = std::make_shared<Anchor>();
  SSDTRAIN_CUDA_TRY(cudaEventCreateWithFlags(&next->event, kEventFlags));
  SSDTRAIN_CUDA_TRY(cudaEventRecord(next->event, clock_));
  SSDTRAIN_CUDA_TRY(cudaEventSynchronize(next->event));
  next->taken_ns = NowNs();
  next->host_ns = next->taken_ns;
  if (anchor_ != nullptr) {
    float ms = 0;
    SSDTRAIN_CUDA_TRY(cudaEventElapsedTime(&ms, anchor_->event, next->event));
    next->host_ns =
        detail::NextAnchorHostNs(anchor_->host_ns, anchor_->taken_ns, next->taken_ns, ms);
  }
  anchor_ = std::move(next);
  return Status::Ok();
}

}  // namespace ssdtrain::exec::cuda_impl
