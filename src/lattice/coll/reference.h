// The scalar reference of every collective, for tests and `lattice bench coll --check`:
// typed fill/read of small-integer inputs (exact in every dtype and every reduction order, so
// results are compared bit for bit) and the expected output of each rank.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "lattice/coll/dtype.h"
#include "lattice/coll/plan/plan.h"

namespace lattice::coll::reference {

// Element i of rank r's input: small integers, so every reduction order is exact in every
// dtype and the scalar reference is an independent oracle. Distinct per rank.
double value(ReduceOp op, int rank, size_t i);

std::vector<std::byte> make_buffer(DType t, size_t n);
void store(DType t, void* buf, size_t i, double v);
double load(DType t, const void* buf, size_t i);
void fill_input(DType t, ReduceOp op, int rank, void* buf, size_t n);
double combine(ReduceOp op, double a, double b);
// R over ranks 0..world-1 of value(op, q, i).
double reduced(ReduceOp op, int world, size_t i);

struct Case {
  CollOp op;
  int world;
  size_t count;
  int root = 0;
};
// Input and output element counts of rank buffers for a case.
size_t in_elems(const Case& c);
size_t out_elems(const Case& c);
void fill_case_input(const Case& c, DType t, ReduceOp op, int rank, void* in);
// Empty string when rank's output matches the reference, else a description of the first mismatch.
std::string check_output(const Case& c, DType t, ReduceOp op, int rank, const void* out);


}  // namespace lattice::coll::reference
