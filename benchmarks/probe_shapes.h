// What the host-side launch probes (choice_probe.cu, ks_plan_probe.cu) share: their shapes from the command line and
// the types they show.
#pragma once
#include <cstdio>
#include <type_traits>
#include <utility>
#include <vector>

#include "qtypes.h"

// "KxN" arguments (K a multiple of 256) into shapes, or `fallback` where none are given; false (after saying
// which) on one that is not.
inline bool probe_shapes(const char* tool, int argc, char** argv, std::vector<std::pair<int, int>> fallback,
                         std::vector<std::pair<int, int>>& shapes) {
  for (int i = 1; i < argc; ++i) {
    int k = 0, n = 0;
    if (sscanf(argv[i], "%dx%d", &k, &n) != 2 || k <= 0 || n <= 0 || k % 256) {
      fprintf(stderr, "%s: '%s' is not KxN with K a multiple of 256\n", tool, argv[i]);
      return false;
    }
    shapes.emplace_back(k, n);
  }
  if (shapes.empty()) shapes = std::move(fallback);
  return true;
}

// f(std::integral_constant<int, T>{}, name) for each type the fast small-M path has
template <class F>
void each_fast_type(F&& f) {
  using namespace gq;
  f(std::integral_constant<int, Q4_0>{}, "Q4_0");
  f(std::integral_constant<int, Q4_K>{}, "Q4_K");
  f(std::integral_constant<int, Q5_K>{}, "Q5_K");
  f(std::integral_constant<int, Q6_K>{}, "Q6_K");
  f(std::integral_constant<int, Q8_0>{}, "Q8_0");
  f(std::integral_constant<int, IQ4_XS>{}, "IQ4_XS");
  f(std::integral_constant<int, MXFP4>{}, "MXFP4");
}
