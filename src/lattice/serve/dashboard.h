// The dashboard page for GET / (dashboard/index.html, embedded at build time: see
// CMakeLists.txt) and the JSON it polls, GET /status.
#pragma once

#include <string>
#include <string_view>

namespace lattice::serve {

// The whole page: HTML with its CSS and JavaScript inline, nothing fetched from elsewhere.
std::string_view dashboard_html();

}  // namespace lattice::serve
