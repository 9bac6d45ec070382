// The CUDA umbrella: everything of strata.hpp, plus what a program needs to train in
// the CUDA space (kernels, the optimizers' CUDA driver, cuBLAS layers, the trainer's
// device engine, NCCL). Include it from a .cu translation unit; plain C++ translation
// units include strata.hpp.
#pragma once
#include "comm/nccl.hpp"
#include "kernels/cuda_driver.cuh"
#include "kernels/cuda_reduce.cuh"
#include "optim/cuda_optim.cuh"
#include "space/cuda.hpp"
#include "space/cuda_ops.cuh"
#include "strata.hpp"
#include "train/detail/cuda_engine.cuh"
