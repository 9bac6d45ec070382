// strata: header-only C++20 distributed training. This umbrella header brings in the
// host library: communicators and grid, model reflection, nn, optimizers, the trainer.
#pragma once

#include "core/buffer.hpp"
#include "core/config.hpp"
#include "core/dtype.hpp"
#include "core/error.hpp"
#include "core/shape.hpp"
#include "core/trace.hpp"
#include "version.hpp"

#include "space/call_scratch.hpp"
#include "space/host.hpp"
#include "space/host_ops.hpp"
#include "space/host_threads.hpp"
#include "space/ops.hpp"
#include "space/tensor.hpp"

#include "comm/communicator.hpp"
#include "comm/environment.hpp"
#include "comm/grid.hpp"
#include "comm/hang_diagnosis.hpp"
#include "comm/op_history.hpp"
#include "comm/op_history_json.hpp"
#include "comm/self.hpp"
#if STRATA_HAS_MPI
#include "comm/mpi.hpp"
#endif

#include "model/concepts.hpp"
#include "model/layout.hpp"
#include "model/param.hpp"
#include "model/reflect.hpp"

#include "kernels/reduce.hpp"
#include "optim/adamw.hpp"
#include "optim/clip.hpp"
#include "optim/lion.hpp"
#include "optim/loss_scaler.hpp"
#include "optim/schedule.hpp"
#include "optim/sgd.hpp"

#include "parallel/bucket_plan.hpp"
#include "parallel/pipeline.hpp"
#include "parallel/policies.hpp"
#include "parallel/precision.hpp"

#include "nn/all.hpp"

#include "io/checkpoint.hpp"
#include "io/config.hpp"
#include "io/export.hpp"
#include "io/hf_weights.hpp"
#include "io/safetensors.hpp"

#include "models/qwen2.hpp"
#include "models/qwen2_io.hpp"

#include "data/token_file.hpp"
#include "data/windows.hpp"

#include "train/batch.hpp"
#include "train/dispatch.hpp"
#include "train/from_config.hpp"
#include "train/options.hpp"
#include "train/report.hpp"
#include "train/trainer.hpp"
#include "train/weights_hash.hpp"

#include "observe/gpu_peaks.hpp"
#include "observe/progress.hpp"
#include "observe/resident.hpp"
#include "observe/trace_file.hpp"
