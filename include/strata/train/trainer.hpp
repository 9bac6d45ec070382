// trainer<Model, Space, Sharding, Optimizer, Precision, Schedule>: trains a user's model
// on a tensor x data x pipeline grid, in the host space or on GPUs (strata::cuda, from a
// .cu file that includes <strata/cuda.cuh>). The policies are checked here; the body is
// detail::trainer_impl, shared by policies that compile to the same code.
#pragma once
#include <type_traits>

#include "../parallel/policies.hpp"
#include "../parallel/pipeline.hpp"
#include "../parallel/precision.hpp"
#include "../space/host.hpp"
#include "detail/trainer_impl.hpp"

namespace strata {

template <class Model, class Space = host, class Sharding = replicated, class Optimizer = adamw,
          class Precision = fp32, class Schedule = one_f_one_b>
class trainer : public detail::trainer_impl<Model, Space, Sharding::stage, Sharding::offload && !std::is_same_v<Space, host>,
                                            Optimizer, Precision, Schedule> {
  static_assert(sharding_policy<Sharding>, "strata::trainer: Sharding must be strata::replicated or strata::zero<S, ...>");
  static_assert(precision_policy<Precision>, "strata::trainer: Precision must be strata::fp32 or strata::mixed<bf16|fp16>");
  static_assert(pipeline_schedule<Schedule>, "strata::trainer: Schedule must be strata::gpipe or strata::one_f_one_b");
  static_assert(!(Sharding::offload && Sharding::stage == 0), "strata::trainer: offload_optimizer needs zero<1|2|3>");
  using base = detail::trainer_impl<Model, Space, Sharding::stage, Sharding::offload && !std::is_same_v<Space, host>,
                                    Optimizer, Precision, Schedule>;

 public:
  using sharding = Sharding;
  using typename base::grid_t;

  trainer(grid_t& g, Model model, trainer_options opts = {}, Optimizer opt = {})
      : base(g, std::move(model), std::move(opts), opt, Sharding::offload) {}
};

}  // namespace strata
