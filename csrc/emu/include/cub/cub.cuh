// Stand-in for <cub/cub.cuh> (CPU emulator): the parts of cub rasfast's kernels use.
#pragma once
#include "cub/block/block_reduce.cuh"
#include "cub/block/block_scan.cuh"
#include "cub/device/device_radix_sort.cuh"
#include "cub/device/device_segmented_radix_sort.cuh"
