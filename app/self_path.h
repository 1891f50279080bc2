// How the printed next commands ("trace for this plan: ...") name this
// binary, so that they run as printed: "ssdtrain" where that name on PATH is
// this very file (an install), else this binary's absolute path (a build).
#pragma once

#include <string>

namespace ssdtrain::app {

// "ssdtrain" or, e.g., "/work/build/app/ssdtrain"; a path with a character
// the shell would split on is single-quoted.
std::string SelfCommand();

}  // namespace ssdtrain::app
