// ssdtrain._engine: the offload engine (exec/offload_engine.h) for Python.
//
// A thin layer: Python hands over raw addresses and byte counts (a tensor's
// data_ptr and nbytes) and keeps the tensor alive until Wait returns; this
// module turns Status into exceptions (OffloadError, carrying the engine's
// message, which names the tensor id and the file) and releases the GIL around
// every call that may block. Fault injection (exec/fault_backend.h) is exposed
// for tests: `faults=[("write"|"read", nth, "eio"|"enospc"|"eagain"|"short",
// count), ...]` wraps the chosen backend.
//
// Lifetime: Close() (or the object's destruction) waits for in-flight I/O and
// removes every file and the run directories; every later call raises.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "exec/fault_backend.h"
#include "exec/io_backend.h"
#include "exec/offload_engine.h"

namespace py = pybind11;

namespace ssdtrain::python {
namespace {

// (direction, nth request, kind, count): one exec::FaultRule.
using FaultSpec = std::tuple<std::string, int64_t, std::string, int64_t>;

// Set at module init: the Python exception type every engine failure raises.
PyObject* g_offload_error = nullptr;

[[noreturn]] void Raise(const Status& status) {
  PyErr_SetString(g_offload_error, status.ToString().c_str());
  throw py::error_already_set();
}

void Check(const Status& status) {
  if (!status.ok()) Raise(status);
}

exec::FaultRule ParseFault(const FaultSpec& spec) {
  const auto& [op, nth, kind, count] = spec;
  exec::FaultRule rule;
  if (op == "write") {
    rule.op = exec::IoOp::kWrite;
  } else if (op == "read") {
    rule.op = exec::IoOp::kRead;
  } else {
    throw py::value_error("faults: direction '" + op + "': expected 'write' or 'read'");
  }
  if (kind == "eio") {
    rule.kind = exec::FaultKind::kEio;
  } else if (kind == "enospc") {
    rule.kind = exec::FaultKind::kEnospc;
  } else if (kind == "eagain") {
    rule.kind = exec::FaultKind::kEagain;
  } else if (kind == "short") {
    rule.kind = exec::FaultKind::kShort;
  } else {
    throw py::value_error("faults: kind '" + kind + "': expected eio, enospc, eagain or short");
  }
  if (nth < 0 || count < 1) throw py::value_error("faults: nth must be >= 0 and count >= 1");
  rule.nth = nth;
  rule.count = count;
  return rule;
}

class PyEngine {
 public:
  PyEngine(std::vector<std::string> dirs, const std::string& backend, int64_t block_size,
           int queue_depth, int64_t staging_bytes, bool direct_io,
           const std::vector<FaultSpec>& faults) {
    Result<exec::BackendKind> kind = exec::ParseBackendKind(backend);
    if (!kind.ok()) Raise(kind.status());
    exec::OffloadOptions options;
    options.dirs = std::move(dirs);
    options.backend = *kind;
    options.block_size = block_size;
    options.queue_depth = queue_depth;
    options.staging_bytes = staging_bytes;
    options.direct_io = direct_io;
    Result<std::unique_ptr<exec::OffloadEngine>> engine = Status::Internal("not created");
    if (faults.empty()) {
      py::gil_scoped_release release;
      engine = exec::OffloadEngine::Create(std::move(options));
    } else {
      exec::FaultOptions fault_options;
      for (const FaultSpec& f : faults) fault_options.rules.push_back(ParseFault(f));
      py::gil_scoped_release release;
      Result<std::unique_ptr<exec::IoBackend>> inner =
          exec::MakeIoBackend(options.backend, options.queue_depth, options.warn);
      if (inner.ok()) {
        auto fault = std::make_unique<exec::FaultBackend>(std::move(inner).value(),
                                                          std::move(fault_options));
        fault_ = fault.get();
        engine = exec::OffloadEngine::Create(std::move(options), std::move(fault));
      } else {
        engine = inner.status();
      }
    }
    if (!engine.ok()) Raise(engine.status());
    engine_ = std::move(engine).value();
  }

  uint64_t WriteAsync(int64_t tensor, uintptr_t address, int64_t bytes) {
    exec::OffloadEngine& e = Live();
    Result<exec::Ticket> ticket = Status::Internal("not issued");
    {
      py::gil_scoped_release release;
      ticket = e.WriteAsync(Key(tensor), reinterpret_cast<const void*>(address), bytes);
    }
    if (!ticket.ok()) Raise(ticket.status());
    return ticket->id;
  }

  uint64_t ReadAsync(int64_t tensor, uintptr_t address, int64_t bytes) {
    exec::OffloadEngine& e = Live();
    Result<exec::Ticket> ticket = Status::Internal("not issued");
    {
      py::gil_scoped_release release;
      ticket = e.ReadAsync(Key(tensor), reinterpret_cast<void*>(address), bytes);
    }
    if (!ticket.ok()) Raise(ticket.status());
    return ticket->id;
  }

  void Wait(uint64_t ticket) {
    exec::OffloadEngine& e = Live();
    Status s;
    {
      py::gil_scoped_release release;
      s = e.Wait(exec::Ticket{ticket});
    }
    Check(s);
  }

  bool Done(uint64_t ticket) { return Live().Done(exec::Ticket{ticket}); }

  void Remove(int64_t tensor) {
    exec::OffloadEngine& e = Live();
    Status s;
    {
      py::gil_scoped_release release;
      s = e.Remove(tensor);
    }
    Check(s);
  }

  std::string FilePath(int64_t tensor) {
    Result<std::string> path = Live().FilePath(tensor);
    if (!path.ok()) Raise(path.status());
    return *path;
  }

  py::dict Stats() {
    const exec::OffloadStats s = Live().Stats();
    py::dict d;
    d["bytes_written"] = s.bytes_written;
    d["bytes_read"] = s.bytes_read;
    d["write_busy_ns"] = s.write_busy_ns;
    d["read_busy_ns"] = s.read_busy_ns;
    d["requests"] = s.requests;
    d["eagain_resubmits"] = s.eagain_resubmits;
    d["short_continuations"] = s.short_continuations;
    d["bounce_copies"] = s.bounce_copies;
    return d;
  }

  std::vector<std::string> RunDirs() { return Live().run_dirs(); }
  std::string BackendName() { return Live().BackendName(); }
  bool DirectIo() { return Live().direct_io(); }
  int64_t FaultsInjected() const { return fault_ == nullptr ? 0 : fault_->injected(); }
  bool closed() const { return engine_ == nullptr; }

  // Waits for in-flight I/O, removes every file and the run directories.
  void Close() {
    std::unique_ptr<exec::OffloadEngine> engine = std::move(engine_);
    fault_ = nullptr;
    py::gil_scoped_release release;
    engine.reset();
  }

 private:
  static exec::TensorKey Key(int64_t tensor) {
    exec::TensorKey key;
    key.tensor = tensor;
    return key;
  }
  exec::OffloadEngine& Live() {
    if (engine_ == nullptr) {
      PyErr_SetString(g_offload_error, "the offload engine is closed");
      throw py::error_already_set();
    }
    return *engine_;
  }

  std::unique_ptr<exec::OffloadEngine> engine_;
  exec::FaultBackend* fault_ = nullptr;  // owned by engine_, when faults were given
};

}  // namespace
}  // namespace ssdtrain::python

PYBIND11_MODULE(_engine, m) {
  using ssdtrain::python::PyEngine;
  m.doc() = "ssdtrain's offload engine (io_uring, O_DIRECT, CRC32C per extent)";
  static py::exception<std::runtime_error> offload_error(m, "OffloadError", PyExc_RuntimeError);
  ssdtrain::python::g_offload_error = offload_error.ptr();
  m.attr("DIRECT_IO_ALIGN") = ssdtrain::exec::kDirectIoAlign;
  py::class_<PyEngine>(m, "Engine")
      .def(py::init<std::vector<std::string>, const std::string&, int64_t, int, int64_t, bool,
                    const std::vector<ssdtrain::python::FaultSpec>&>(),
           py::arg("dirs"), py::arg("backend") = "auto",
           py::arg("block_size") = ssdtrain::exec::kDefaultBlockSize,
           py::arg("queue_depth") = ssdtrain::exec::kDefaultQueueDepth,
           py::arg("staging_bytes") = int64_t{0}, py::arg("direct_io") = true,
           py::arg("faults") = std::vector<ssdtrain::python::FaultSpec>{})
      .def("write_async", &PyEngine::WriteAsync, py::arg("tensor"), py::arg("address"),
           py::arg("nbytes"), "Starts writing nbytes at address as tensor; returns a ticket")
      .def("read_async", &PyEngine::ReadAsync, py::arg("tensor"), py::arg("address"),
           py::arg("nbytes"), "Starts reading tensor into address; returns a ticket")
      .def("wait", &PyEngine::Wait, py::arg("ticket"),
           "Blocks until the ticket's I/O is over; raises OffloadError on failure")
      .def("done", &PyEngine::Done, py::arg("ticket"))
      .def("remove", &PyEngine::Remove, py::arg("tensor"))
      .def("file_path", &PyEngine::FilePath, py::arg("tensor"))
      .def("stats", &PyEngine::Stats)
      .def("run_dirs", &PyEngine::RunDirs)
      .def("backend_name", &PyEngine::BackendName)
      .def("direct_io", &PyEngine::DirectIo)
      .def("faults_injected", &PyEngine::FaultsInjected)
      .def_property_readonly("closed", &PyEngine::closed)
      .def("close", &PyEngine::Close);
}
