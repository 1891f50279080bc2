// ssdtrain bench-io: the offload engine's sequential write then read bandwidth
// on a directory, the measurement fio makes with --direct=1 --ioengine=io_uring.
#include <fmt/format.h>

#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "app/cli_errors.h"
#include "app/command.h"
#include "app/sizes.h"
#include "exec/bench_io.h"
#include "exec/offload_dir.h"

namespace ssdtrain::app {
namespace {

struct BenchIoFlags {
  std::vector<std::string> dirs;
  std::string block_size = "4MiB";
  int queue_depth = 32;
  std::string size = "1GiB";
  std::string io_backend = "auto";
  bool buffered = false;
  bool allow_buffered_io = false;
};

int Run(const BenchIoFlags& f) {
  exec::BenchIoOptions o;
  o.dirs = f.dirs;
  o.queue_depth = f.queue_depth;
  o.direct_io = !f.buffered;
  o.allow_buffered_io = f.allow_buffered_io;
  auto bs = ParseSize("--block-size", f.block_size);
  if (!bs.ok()) return ReportError("bench-io", bs.status());
  auto size = ParseSize("--size", f.size);
  if (!size.ok()) return ReportError("bench-io", size.status());
  auto backend = exec::ParseBackendKind(f.io_backend);
  if (!backend.ok()) {
    return ReportError("bench-io", backend.status().WithPrefix("--io-backend"));
  }
  for (const std::string& dir : f.dirs) {
    if (Status usable = exec::CheckOffloadDir(dir, f.allow_buffered_io); !usable.ok()) {
      return ReportError("bench-io", usable);
    }
  }
  o.block_size = *bs;
  o.size = *size;
  o.backend = *backend;
  auto r = exec::RunBenchIo(o);
  if (!r.ok()) return ReportError("bench-io", r.status());
  std::string dirs;
  for (const std::string& d : f.dirs) dirs += (dirs.empty() ? "" : ",") + d;
  std::cout << fmt::format(
      "bench-io: dir={} bs={} qd={}{} size={} backend={} direct={} fixed_buffers={}\n", dirs,
      o.block_size, o.queue_depth, f.dirs.size() > 1 ? " per dir" : "", o.size, r->backend,
      r->direct_io ? 1 : 0, r->fixed_buffers ? 1 : 0);
  std::cout << fmt::format("write: {:.3f} GB/s ({} bytes in {:.3f} s)\n", r->write_GBps(), r->bytes,
                           static_cast<double>(r->write_ns) / 1e9);
  std::cout << fmt::format("read: {:.3f} GB/s ({} bytes in {:.3f} s)\n", r->read_GBps(), r->bytes,
                           static_cast<double>(r->read_ns) / 1e9);
  if (!r->direct_io) {
    std::cout << "buffered I/O: these figures are the page cache's, not the drive's\n";
  }
  return 0;
}

}  // namespace

Verb AddBenchIoCommand(CLI::App& app) {
  auto f = std::make_shared<BenchIoFlags>();
  CLI::App* cmd = app.add_subcommand(
      "bench-io", "Sequential write then read bandwidth of the offload engine on a directory");
  cmd->add_option("--dir", f->dirs,
                  "Directory on the SSD to test (a file is made and removed); repeat it for "
                  "several drives, each request going to the next (as fio --numjobs, one job a "
                  "directory)")
      ->required();
  cmd->add_option("--block-size", f->block_size,
                  "Bytes per request: a size, e.g. 4M, 1G or 4096 (default 4MiB)");
  cmd->add_option("--queue-depth", f->queue_depth, "Requests in flight per directory (default 32)")
      ->check(IntAtLeast(1));
  cmd->add_option("--size", f->size,
                  "Bytes written then read: a size, e.g. 64M, 1G or plain bytes (default 1GiB)");
  cmd->add_option("--io-backend", f->io_backend,
                  "I/O engine: auto, io_uring or posix (default auto); as replay's --io-backend");
  // --backend names the device in every other verb.
  AddAlias(cmd, "--backend", "--io-backend", f->io_backend);
  cmd->add_flag("--buffered", f->buffered, "Do not use O_DIRECT");
  cmd->add_flag(
      "--allow-buffered-io", f->allow_buffered_io,
      "Where the directory is in memory (tmpfs, ramfs) or refuses O_DIRECT, measure through the "
      "page cache instead of failing");
  return Verb{cmd, [f] { return Run(*f); }};
}

}  // namespace ssdtrain::app
