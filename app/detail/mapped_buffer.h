// A host buffer for messages of megabytes to gigabytes (the MPI ranks' send
// copies): anonymous mapped memory with transparent huge pages requested, and
// no zero-fill. On this project's VM a first touch costs a fault per 4 KiB page
// (2 GiB: 6.8 s, against 0.2 s in 2 MiB pages once the kernel has them); a
// std::vector<char> of the same size also writes every byte once before use.
// Best effort: where the kernel gives no huge pages, it works as before.
#pragma once

#include <cstddef>
#include <utility>

namespace ssdtrain::app::detail {

class MappedBuffer {
 public:
  MappedBuffer() = default;
  // Maps `bytes` (> 0); throws std::bad_alloc when the mapping fails, as
  // a vector would.
  explicit MappedBuffer(size_t bytes);
  ~MappedBuffer();
  MappedBuffer(MappedBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}
  MappedBuffer& operator=(MappedBuffer&& other) noexcept {
    std::swap(data_, other.data_);
    std::swap(size_, other.size_);
    return *this;
  }
  MappedBuffer(const MappedBuffer&) = delete;
  MappedBuffer& operator=(const MappedBuffer&) = delete;

  char* data() { return data_; }
  const char* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  char* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace ssdtrain::app::detail
