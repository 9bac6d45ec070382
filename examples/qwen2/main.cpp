// examples/qwen2: fine-tunes a Hugging Face Qwen2 / Qwen2.5 model on a token file (made
// by prepare.py) on any layout, and exports a Hugging Face directory back.
//   mpiexec -n 4 qwen2 --model DIR --data train.bin --seq 256 --batch 8 --steps 100 --lr 1e-5
//       --zero 3 --offload --precision bf16 --export out/
//   qwen2 --plan --world 4 --model random:qwen2.5-0.5b --seq 256 --batch 4 --zero 3 --offload
#include <cstdio>
#include <filesystem>
#include <string>

#include <strata/strata.hpp>

#include "../common/args.hpp"
#include "../common/config.hpp"
#include "../common/memory_check.hpp"
#include "plan.hpp"
#include "run.hpp"

namespace {

const char* const usage =
    "usage: mpiexec -n N qwen2 --model DIR|random:CONFIG --data FILE --seq S --batch B --steps N --lr X [options]\n"
    "Fine-tunes a Qwen2 / Qwen2.5 model on a token file (llm.c layout; examples/qwen2/prepare.py makes one).\n"
    "model and data:\n"
    "  --model DIR            a Hugging Face directory (config.json, model.safetensors[.index.json])\n"
    "  --model random:CONFIG  random initialisation of a config.json (a path, or a name in\n"
    "                         examples/qwen2/configs/, e.g. random:qwen2.5-0.5b)\n"
    "  --tokenizer DIR        tokenizer files copied into the export (default: the model's)\n"
    "  --data FILE [--mask FILE]  tokens, and which labels train (1) or not (0)\n"
    "  --val FILE [--val-mask FILE] [--val-every N] [--val-steps N (8)]\n"
    "  --shuffle SEED         permute the windows of each epoch\n"
    "training:\n"
    "  --seq S (256)  --batch B (global rows per step, 8)  --micro-batches K (1)  --steps N (10)\n"
    "  --lr X (1e-5)  --warmup W (0: constant lr)  --clip C (0: none)  --weight-decay D (0.01, matrices)\n"
    "  --zero 0..3 [--offload]  --precision fp32|bf16|fp16  --tp T --pp P  --schedule 1f1b|gpipe\n"
    "  --offload-param        ZeRO-3: parameter shards in host memory on a GPU (DeepSpeed's offload_param)\n"
    "  --recompute            keep only each decoder layer's input, run it again before its backward\n"
    "                         (Hugging Face's gradient_checkpointing): activations of one layer, same bits\n"
    "  --config ds_config.json  DeepSpeed's (Hugging Face's templates with \"auto\" too)\n"
    "  --device cpu|cuda  --seed S  --bucket ELEMS  --quiet\n"
    "outputs:\n"
    "  --save DIR [--save-every N]  --load DIR  --export DIR [--export-dtype fp32|bf16]\n"
    "  --report FILE.json (losses, val_losses, tokens_per_s, memory, weights_hash)\n"
    "  --metrics FILE.jsonl (one line a step, every rank's memory)  --log-every N  --peak-flops F\n"
    "  --trace FILE.json (Chrome trace: every rank's layers, collectives, optimizer, data, saves)\n"
    "  --mlflow URI [--experiment NAME] [--run-name NAME]  an MLflow tracking server (http://host:port;\n"
    "                         default $MLFLOW_TRACKING_URI): params, every step's metrics, the export\n"
    "  --plan [--world N]     print each rank's memory for the layout and ZeRO 0-3 (with --device cuda the\n"
    "                         device's too: the report plus context, cuBLAS and NCCL), and exit\n"
    "  --check-memory FILE.json  hold a --device cuda run's --report to the device memory rule: each rank's\n"
    "                         measured growth within 10 % of its report plus the allowance (exit 1 if not)\n"
    "  --help\n";

// random:NAME is a config shipped in examples/qwen2/configs/; random:PATH a file.
std::filesystem::path random_config(const std::string& spec) {
  std::filesystem::path p = spec;
  if (spec.find('/') == std::string::npos && p.extension() != ".json")
    p = std::filesystem::path(STRATA_EXAMPLES_DIR) / "qwen2" / "configs" / (spec + ".json");
  return p;
}

}  // namespace

int main(int argc, char** argv) {
  examples::become_device_binary(argc, argv);
  const auto started = examples::start_environment("qwen2", argc, argv);
  strata::environment& env = *started;
  return examples::run_main("qwen2", usage, env.rank(), argc, argv, [&]() -> int {
    examples::args a(argc, argv, {"offload", "offload-param", "quiet", "plan", "recompute", "profile"});
    if (a.has("check-memory")) {  // reads a report; trains nothing
      const std::string report = a.str("check-memory", "");
      (void)examples::read_device(a);
      a.check_all_used();
      return env.rank() == 0 ? examples::check_memory_file(report) : 0;
    }
    qwen2::run_options o;
    const std::string model = a.str("model", "");
    o.tokenizer_dir = a.str("tokenizer", "");
    if (!o.tokenizer_dir.empty()) qwen2::require_tokenizer_dir(o.tokenizer_dir);
    const bool plan = a.flag("plan");
    o.data = a.str("data", "");
    o.mask = a.str("mask", "");
    o.val = a.str("val", "");
    o.val_mask = a.str("val-mask", "");
    o.val_every = a.integer("val-every", 0, 0);
    o.val_steps = a.integer("val-steps", 8, 1);
    if (a.has("shuffle")) o.shuffle = static_cast<std::uint64_t>(a.integer("shuffle", 0, 0));
    o.seq = a.integer("seq", 256, 1);
    o.weight_decay = static_cast<float>(a.real("weight-decay", 0.01));
    o.hf_export = a.str("export", "");
    o.export_dtype = a.str("export-dtype", "");
    const std::string device = examples::read_device(a);

    examples::loop_options lo;
    lo.read(a, 10, 8);
    lo.tokens_per_sample = static_cast<double>(o.seq);
    lo.export_path.clear();  // --export is a Hugging Face directory here, written by run
    strata::runtime_policies pol;
    pol.zero_stage = a.count("zero", 0, 0);
    pol.offload = a.flag("offload");
    pol.precision = a.str("precision", "fp32");
    pol.schedule = a.str("schedule", "1f1b");
    o.tp = a.count("tp", 1);
    o.pp = a.count("pp", 1);
    strata::trainer_options opts;
    opts.micro_batches = a.count("micro-batches", 1);
    const double lr = a.real("lr", 1e-5);
    opts.lr = static_cast<float>(lr);
    opts.max_grad_norm = static_cast<float>(a.real("clip", 0.0));
    opts.seed = lo.seed;
    opts.bucket_elems = static_cast<std::size_t>(a.integer("bucket", 1 << 22, 1));
    if (a.flag("recompute")) opts.recompute = {"layers"};
    opts.offload_params = a.flag("offload-param");
    const long warmup = a.integer("warmup", 0, 0);
    opts.schedule =
        warmup > 0 ? strata::lr_schedule::linear_warmup(0.0, opts.lr, warmup) : strata::lr_schedule::constant(opts.lr);
    const int world = plan ? a.count("world", env.size()) : env.size();
    if (model.rfind("random:", 0) == 0) {
      o.model = strata::models::qwen2_config::load(random_config(model.substr(7)));
    } else if (!model.empty()) {
      o.model_dir = model;
      o.model = strata::models::qwen2_config::load(model);
    }
    // What Hugging Face's ds_config templates leave "auto", from these options as the HF
    // Trainer fills them (clipping 1.0 unless --clip says otherwise).
    strata::config_auto_values autos;
    autos.lr = lr;
    autos.weight_decay = o.weight_decay;
    autos.warmup_steps = warmup;
    autos.total_steps = lo.steps;
    autos.train_batch_size = lo.batch;
    autos.gradient_accumulation_steps = opts.micro_batches;
    // The micro batch is left to run_config::resolve, which divides by the data-parallel
    // size of the file's own tensor and pipeline sizes (--tp and --pp yield to the file).
    autos.precision = pol.precision;
    if (o.model.hidden_size > 0) autos.hidden_size = o.model.hidden_size;
    autos.max_grad_norm = a.has("clip") ? opts.max_grad_norm : 1.0;
    const auto cc = examples::apply_config(a, "qwen2", env.rank(), world, pol, opts, lo.batch, &o.tp, &o.pp, &autos);
    a.check_all_used();
    if (o.data.empty() && !plan) throw examples::usage_error("--data is required (a token file; see prepare.py)");
    if (model.empty()) throw examples::usage_error("--model is required (a Hugging Face directory or random:CONFIG)");
    examples::print_resolved_config(cc, "qwen2", env.rank());
    if (o.export_dtype.empty()) o.export_dtype = o.model.torch_dtype == "bfloat16" ? "bf16" : "fp32";
    strata::expects<strata::config_error>(o.export_dtype == "fp32" || o.export_dtype == "bf16", [&] {
      return "--export-dtype " + o.export_dtype + " is not one of fp32, bf16";
    });
    opts.profile = lo.profile;
    opts.validate();
    strata::expects<strata::config_error>(pol.optimizer == "adamw", [&] {
      return strata::cat("qwen2 fine-tunes with AdamW; the config asks for ", pol.optimizer);
    });
    strata::expects<strata::config_error>(o.seq > 0 && o.seq <= o.model.max_position_embeddings, [&] {
      return strata::cat("--seq ", o.seq, " is not in [1, max_position_embeddings = ", o.model.max_position_embeddings,
                         "] of ", o.model.source);
    });
    strata::expects<strata::config_error>(world % (static_cast<long>(o.tp) * o.pp) == 0, [&] {
      return strata::cat("tp x pp = ", o.tp, " x ", o.pp, " does not divide ", world, " processes");
    });
    o.model.validate(o.model.source, o.tp);
    if (plan) {
      if (env.rank() == 0) qwen2::print_plan(o, lo, opts, pol, world, device == "cuda");
      return 0;
    }
    const qwen2::run_args ra{env, o, lo, opts, cc, pol};
    strata::expects<strata::config_error>(
        pol.precision == "fp32" || pol.precision == "bf16" || pol.precision == "fp16",
        [&] { return strata::cat("--precision ", pol.precision, " is not one of fp32, bf16, fp16"); });
    return examples::run_on(
        device,
        [&](auto) {
          if (pol.precision == "bf16") return qwen2::run_host_bf16(ra);
          if (pol.precision == "fp16") return qwen2::run_host_fp16(ra);
          return qwen2::run_host_fp32(ra);
        },
        [&](auto) { return qwen2::run_cuda(ra); });
  });
}
