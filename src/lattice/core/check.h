// LATTICE_CHECK: aborts on a broken invariant of our own code. Never use it on input from
// outside the process (wire bytes, files, HTTP bodies, flags): those get a Status.
#pragma once

#include <cstdio>
#include <cstdlib>

#define LATTICE_CHECK(cond)                                                              \
  do {                                                                                   \
    if (!(cond)) [[unlikely]] {                                                          \
      std::fprintf(stderr, "lattice: internal check failed: %s at %s:%d\n", #cond, __FILE__, \
                   __LINE__);                                                            \
      std::abort();                                                                      \
    }                                                                                    \
  } while (0)
