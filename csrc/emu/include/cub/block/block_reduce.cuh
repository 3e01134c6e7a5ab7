// Stand-in for cub::BlockReduce (CPU emulator). Same contract as cub: every thread of the
// block calls it with its TempStorage (in __shared__ memory); the aggregate is defined in
// thread 0 only (the others get their own input back, so code that reads it elsewhere is
// wrong here as it would be on a GPU); reusing TempStorage needs a __syncthreads first.
#pragma once
#include "cuda_runtime.h"

namespace cub {

struct Sum {
  template <class T>
  T operator()(const T& a, const T& b) const { return a + b; }
};
struct Max {
  template <class T>
  T operator()(const T& a, const T& b) const { return a < b ? b : a; }
};
struct Min {
  template <class T>
  T operator()(const T& a, const T& b) const { return b < a ? b : a; }
};

template <class T, int BLOCK_DIM_X, int ALGORITHM = 0, int BLOCK_DIM_Y = 1, int BLOCK_DIM_Z = 1>
class BlockReduce {
  static constexpr int kThreads = BLOCK_DIM_X * BLOCK_DIM_Y * BLOCK_DIM_Z;

 public:
  struct TempStorage {
    T items[kThreads];
  };
  explicit BlockReduce(TempStorage& s) : s_(s) {}

  template <class Op>
  T Reduce(T input, Op op) { return Reduce(input, op, kThreads); }
  template <class Op>
  T Reduce(T input, Op op, int num_valid) {
    const int t = linear_tid();
    s_.items[t] = input;
    ::cuemu::syncthreads(__FILE__, __LINE__);
    if (t != 0) return input;
    T acc = s_.items[0];
    for (int i = 1; i < num_valid && i < kThreads; ++i) acc = op(acc, s_.items[i]);
    return acc;
  }
  T Sum(T input) { return Reduce(input, cub::Sum()); }
  T Sum(T input, int num_valid) { return Reduce(input, cub::Sum(), num_valid); }

 private:
  static int linear_tid() {
    auto& v = ::cuemu::view("cub::BlockReduce");
    if ((int)(v.block_dim.x * v.block_dim.y * v.block_dim.z) != kThreads)
      ::cuemu::fail("cub::BlockReduce: the block size differs from its BLOCK_DIM template arguments");
    return (int)(v.thread_idx.x + v.block_dim.x * (v.thread_idx.y + v.block_dim.y * v.thread_idx.z));
  }
  TempStorage& s_;
};

}  // namespace cub
