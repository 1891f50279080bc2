#include "app/detail/mapped_buffer.h"

#include <sys/mman.h>

#include <new>

namespace ssdtrain::app::detail {

MappedBuffer::MappedBuffer(size_t bytes) : size_(bytes) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  (void)::madvise(p, bytes, MADV_HUGEPAGE);  // `madvise` mode THP; refused is fine
  data_ = static_cast<char*>(p);
}

MappedBuffer::~MappedBuffer() {
  if (data_ != nullptr) ::munmap(data_, size_);
}

}  // namespace ssdtrain::app::detail
