#include "exec/cufile_backend.h"

#include <cerrno>
#include <string>
#include <unordered_map>
#include <utility>

#include "exec/detail/thread_pool_backend.h"

namespace ssdtrain::exec {
namespace {

using detail::Mutex;
using detail::MutexLock;

class CuFileBackend : public detail::ThreadPoolBackend {
 public:
  CuFileBackend(std::shared_ptr<CuFile> cufile, int threads, WarnFn warn)
      : ThreadPoolBackend(threads), cufile_(std::move(cufile)), warn_(std::move(warn)) {}

  ~CuFileBackend() override {
    StopWorkers();
    MutexLock lock(&mu_);
    for (const auto& [fd, handle] : handles_) cufile_->api().HandleDeregister(handle);
  }

  std::string Name() const override { return "cufile " + cufile_->VersionText(); }

  void CloseFile(int fd) override {
    {
      MutexLock lock(&mu_);
      if (auto it = handles_.find(fd); it != handles_.end()) {
        cufile_->api().HandleDeregister(it->second);
        handles_.erase(it);
      }
    }
    IoBackend::CloseFile(fd);
  }

 protected:
  int64_t Transfer(const IoRequest& r) override {
    if (!r.device_memory) return detail::PreadPwrite(r);
    void* handle = nullptr;
    if (const int64_t rc = HandleOf(r.fd, &handle); rc < 0) return rc;
    const CuFileApi& api = cufile_->api();
    errno = 0;
    const ssize_t rc = r.op == IoOp::kRead ? api.Read(handle, r.buf, r.len, r.offset, 0)
                                           : api.Write(handle, r.buf, r.len, r.offset, 0);
    if (rc >= 0) return static_cast<int64_t>(rc);
    // -1: a system error in errno; below: -CUfileOpError, cuFile's own.
    if (rc == -1 && errno != 0) return -static_cast<int64_t>(errno);
    WarnOnce(std::string(r.op == IoOp::kRead ? "cuFileRead" : "cuFileWrite") +
             " failed with cuFile error " + std::to_string(-rc) +
             " (reported as an I/O error; cufile.log and gdscheck -p say more)");
    return -EIO;
  }

 private:
  // The fd's cuFile handle, registered at its first GPU request; 0 or -EIO
  // (registration refused, said once).
  int64_t HandleOf(int fd, void** handle) {
    MutexLock lock(&mu_);
    if (auto it = handles_.find(fd); it != handles_.end()) {
      *handle = it->second;
      return 0;
    }
    CuFileDescr descr{};
    descr.type = kCuFileHandleTypeOpaqueFd;
    descr.handle.fd = fd;
    const CuFileError e = cufile_->api().HandleRegister(handle, &descr);
    if (e.err != 0) {
      lock.Unlock();
      WarnOnce("cuFileHandleRegister failed with cuFile error " + std::to_string(e.err) +
               (e.cu_err != 0 ? ", CUDA error " + std::to_string(e.cu_err) : std::string()) +
               " (is the file system GDS-capable? gdscheck -p says)");
      return -EIO;
    }
    handles_.emplace(fd, *handle);
    return 0;
  }

  void WarnOnce(const std::string& text) {
    {
      MutexLock lock(&mu_);
      if (warned_) return;
      warned_ = true;
    }
    (warn_ ? warn_ : DefaultWarn)(text);
  }

  std::shared_ptr<CuFile> cufile_;
  WarnFn warn_;
  Mutex mu_;
  std::unordered_map<int, void*> handles_ SSDTRAIN_GUARDED_BY(mu_);
  bool warned_ SSDTRAIN_GUARDED_BY(mu_) = false;
};

}  // namespace

Result<std::unique_ptr<IoBackend>> MakeCuFileBackend(std::shared_ptr<CuFile> cufile, int threads,
                                                     WarnFn warn) {
  if (threads < 1) {
    return Status::InvalidArgument("cuFile backend needs at least 1 thread, got " +
                                   std::to_string(threads));
  }
  if (cufile == nullptr) return Status::InvalidArgument("cuFile backend without a loaded cuFile");
  return std::unique_ptr<IoBackend>(
      std::make_unique<CuFileBackend>(std::move(cufile), threads, std::move(warn)));
}

}  // namespace ssdtrain::exec
