// Where this binary is: how the printed next commands ("trace for this plan: ...") name this
// binary, so that they run as printed: "ssdtrain" where that name on PATH is
// this very file (an install), else this binary's absolute path (a build).
#pragma once

#include <string>

namespace ssdtrain::app {

// "ssdtrain" or, e.g., "/work/build/app/ssdtrain"; a path with a character
// the shell would split on is single-quoted.
std::string SelfCommand();

// The configs folder (hardware/, models/, published/): an install's
// share/ssdtrain/configs beside this binary's bin/ when there is one
// (cmake/Install.cmake), else the source tree's configs/ this binary was built from.
std::string ConfigsDir();

}  // namespace ssdtrain::app
