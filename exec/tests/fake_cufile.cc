// A stand-in libcufile for the loader's and the GPUDirect path's tests
// (exec/cufile.h, exec/cufile_backend.h), built as a shared library in five
// variants: complete (FAKE_CUFILE_VERSION 1130), one without cuFileWrite
// (FAKE_CUFILE_NO_WRITE), one reporting version 900 (FAKE_CUFILE_VERSION
// 900), one whose cuFileDriverOpen fails (FAKE_CUFILE_DRIVER_ERROR), and one
// whose cuFileWrite answers cuFile's own error (FAKE_CUFILE_WRITE_ERROR). It
// counts driver opens and closes, handles registered and deregistered, and the
// bytes each direction moved, so a test can see the loader close what it
// opened and the engine's GPU requests go through it. Its "device memory" is
// the caller's (the CPU backend's arena is host memory): cuFileRead and
// cuFileWrite are pread and pwrite on the registered file.
#include <fcntl.h>
#include <sys/types.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>

#include "exec/cufile.h"

// The loader's own CuFileError (CUfileError_t's layout), so that the calls it
// makes through its pointers have the very types these definitions have
// (UBSan's -fsanitize=function checks them; the real library is C).
using FakeCuFileError = ssdtrain::exec::CuFileError;

extern "C" {

int fake_cufile_opens = 0;
int fake_cufile_closes = 0;
std::atomic<int> fake_cufile_handles_registered{0};
std::atomic<int> fake_cufile_handles_deregistered{0};
std::atomic<long long> fake_cufile_bytes_written{0};
std::atomic<long long> fake_cufile_bytes_read{0};

FakeCuFileError cuFileDriverOpen() {
#ifdef FAKE_CUFILE_DRIVER_ERROR
  return {5033, 0};
#else
  ++fake_cufile_opens;
  return {0, 0};
#endif
}
FakeCuFileError cuFileDriverClose() {
  ++fake_cufile_closes;
  return {0, 0};
}
FakeCuFileError cuFileGetVersion(int* version) {
  *version = FAKE_CUFILE_VERSION;
  return {0, 0};
}
// The handle is the fd + 1 (never null).
FakeCuFileError cuFileHandleRegister(void** handle, void* descr) {
  const auto* d = static_cast<const ssdtrain::exec::CuFileDescr*>(descr);
  if (d->type != ssdtrain::exec::kCuFileHandleTypeOpaqueFd || d->handle.fd < 0) return {5002, 0};
  *handle = reinterpret_cast<void*>(static_cast<intptr_t>(d->handle.fd) + 1);
  fake_cufile_handles_registered.fetch_add(1);
  return {0, 0};
}
void cuFileHandleDeregister(void*) { fake_cufile_handles_deregistered.fetch_add(1); }
FakeCuFileError cuFileBufRegister(const void*, size_t, int) { return {0, 0}; }
FakeCuFileError cuFileBufDeregister(const void*) { return {0, 0}; }
// The registered fd opened again without O_DIRECT, as cuFile's compatibility
// mode goes through the page cache: the stand-in's "device memory" and the
// tails it is given are not aligned as O_DIRECT needs (cuFile aligns them
// through its own bounce buffers).
static int Reopen(void* handle) {
  const int fd = static_cast<int>(reinterpret_cast<intptr_t>(handle) - 1);
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
  return ::open(path, O_RDWR | O_CLOEXEC);
}
ssize_t cuFileRead(void* handle, void* base, size_t size, off_t file_offset, off_t buffer_offset) {
  const int fd = Reopen(handle);
  if (fd < 0) return -1;
  const ssize_t rc = ::pread(fd, static_cast<char*>(base) + buffer_offset, size, file_offset);
  const int err = errno;
  ::close(fd);
  if (rc > 0) fake_cufile_bytes_read.fetch_add(rc);
  errno = err;
  return rc;
}
#ifndef FAKE_CUFILE_NO_WRITE
ssize_t cuFileWrite(void* handle, const void* base, size_t size, off_t file_offset,
                    off_t buffer_offset) {
#ifdef FAKE_CUFILE_WRITE_ERROR
  (void)handle, (void)base, (void)size, (void)file_offset, (void)buffer_offset;
  return -5011;  // a cuFile error of its own, not errno
#else
  const int fd = Reopen(handle);
  if (fd < 0) return -1;
  const ssize_t rc =
      ::pwrite(fd, static_cast<const char*>(base) + buffer_offset, size, file_offset);
  const int err = errno;
  ::close(fd);
  if (rc > 0) fake_cufile_bytes_written.fetch_add(rc);
  errno = err;
  return rc;
#endif
}
#endif
}
