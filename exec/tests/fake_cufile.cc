// A stand-in libcufile for the loader's tests (exec/cufile.h), built as a
// shared library in four variants: complete (FAKE_CUFILE_VERSION 1130), one
// without cuFileWrite (FAKE_CUFILE_NO_WRITE), one reporting version 900
// (FAKE_CUFILE_VERSION 900), and one whose cuFileDriverOpen fails
// (FAKE_CUFILE_DRIVER_ERROR). It counts driver opens and closes so a test can
// see the loader close what it opened. No I/O.
#include <sys/types.h>

#include <cstddef>

#include "exec/cufile.h"

// The loader's own CuFileError (CUfileError_t's layout), so that the calls it
// makes through its pointers have the very types these definitions have
// (UBSan's -fsanitize=function checks them; the real library is C).
using FakeCuFileError = ssdtrain::exec::CuFileError;

extern "C" {

int fake_cufile_opens = 0;
int fake_cufile_closes = 0;

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
FakeCuFileError cuFileHandleRegister(void**, void*) { return {0, 0}; }
void cuFileHandleDeregister(void*) {}
FakeCuFileError cuFileBufRegister(const void*, size_t, int) { return {0, 0}; }
FakeCuFileError cuFileBufDeregister(const void*) { return {0, 0}; }
ssize_t cuFileRead(void*, void*, size_t, off_t, off_t) { return -1; }
#ifndef FAKE_CUFILE_NO_WRITE
ssize_t cuFileWrite(void*, const void*, size_t, off_t, off_t) { return -1; }
#endif
}
