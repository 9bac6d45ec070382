// The strata side of tests/tools/check_hf_export.py: loads a Hugging Face Qwen2 directory
// into a one-process trainer and exports it again, as a user's fine-tune would.
//   qwen2_export IN_DIR OUT_DIR [f32|bf16] [MAX_SHARD_BYTES]
// Exit status 1 with "error: <message>" on stderr when strata rejects the input.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include <strata/strata.hpp>

int main(int argc, char** argv) {
  if (argc < 3 || argc > 5 || std::string_view(argv[1]) == "--help") {
    std::printf("usage: qwen2_export IN_DIR OUT_DIR [f32|bf16] [MAX_SHARD_BYTES]\n");
    return argc >= 2 && std::string_view(argv[1]) == "--help" ? 0 : 2;
  }
  try {
    strata::environment env(argc, argv);
    strata::grid grid(env.world());
    const auto cfg = strata::models::qwen2_config::load(argv[1]);
    strata::trainer<strata::models::qwen2> tr(grid, strata::models::make_qwen2(cfg));
    strata::models::load_qwen2_weights(tr, argv[1]);
    const bool bf16 = argc > 3 && std::string_view(argv[3]) == "bf16";
    const auto shard = argc > 4 ? std::strtoull(argv[4], nullptr, 10) : (std::uint64_t{5} << 30);
    strata::models::export_qwen2(tr, argv[2], cfg, bf16 ? strata::dtype::bf16 : strata::dtype::f32, shard);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
