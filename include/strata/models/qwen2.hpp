// The Qwen2 family (Qwen2, Qwen2.5) as a strata model: its Hugging Face config, the
// decoder built from nn/ layers, and the names of its tensors in Hugging Face checkpoints.
#pragma once
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../core/error.hpp"
#include "../core/trace.hpp"
#include "../io/detail/json_reader.hpp"
#include "../model/param.hpp"
#include "../nn/grouped_query_attention.hpp"
#include "../nn/residual.hpp"
#include "../nn/rms_norm.hpp"
#include "../nn/swiglu.hpp"
#include "../nn/tp/linear_cross_entropy.hpp"
#include "../nn/tp/vocab_parallel_embedding.hpp"
#include "../space/call_scratch.hpp"

namespace strata::models {

// What a Qwen2 config.json says, as transformers reads it (4.x files have rope_theta at
// the top level, 5.x files under rope_parameters).
struct qwen2_config {
  int vocab_size = 0;
  int hidden_size = 0;
  int intermediate_size = 0;
  int num_hidden_layers = 0;
  int num_attention_heads = 0;
  int num_key_value_heads = 0;
  int max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  double initializer_range = 0.02;
  bool tie_word_embeddings = false;
  std::string torch_dtype = "float32";  // the dtype the file says its weights are in
  // Where the config came from ("DIR/config.json"), for the errors of make_qwen2.
  std::string source = "qwen2 config";
  // Keys of the file this reader does not interpret (token ids, generation settings,
  // transformers' bookkeeping): kept, and written back on export.
  nlohmann::json extra = nlohmann::json::object();

  int head_dim() const { return num_attention_heads > 0 ? hidden_size / num_attention_heads : 0; }

  // Reads and checks a config; `source` names it in errors ("DIR/config.json"). A model
  // type other than qwen2, or a feature this implementation does not have (sliding-window
  // attention, rope scaling, another activation), is a config_error naming the key.
  static qwen2_config from_json(const nlohmann::json& j, const std::string& source) {
    expects<config_error>(j.is_object(), [&] { return strata::cat(source, ": the config is not a JSON object"); });
    detail::json_reader r(j, source, "", nullptr);
    qwen2_config c;
    const auto type = r.string("model_type");
    expects<config_error>(type.has_value(), [&] { return strata::cat(source, ": model_type is missing"); });
    expects<config_error>(*type == "qwen2", [&] {
      return strata::cat(source, ": model_type is \"", *type, "\"; this loader reads qwen2 models (Qwen2, Qwen2.5)");
    });
    const auto need_int = [&](std::string_view k, int& out, long long lo) {
      const auto v = r.integer(k, lo, 1 << 30);
      expects<config_error>(v.has_value(), [&] { return strata::cat(source, ": ", k, " is missing"); });
      out = static_cast<int>(*v);
    };
    need_int("vocab_size", c.vocab_size, 1);
    need_int("hidden_size", c.hidden_size, 1);
    need_int("intermediate_size", c.intermediate_size, 1);
    need_int("num_hidden_layers", c.num_hidden_layers, 1);
    need_int("num_attention_heads", c.num_attention_heads, 1);
    c.num_key_value_heads = c.num_attention_heads;
    if (const auto v = r.integer("num_key_value_heads", 1, 1 << 30)) c.num_key_value_heads = static_cast<int>(*v);
    c.max_position_embeddings = 32768;
    if (const auto v = r.integer("max_position_embeddings", 1, 1 << 30))
      c.max_position_embeddings = static_cast<int>(*v);
    if (const auto v = r.number("rms_norm_eps", 0.0, 1.0, "a number in (0, 1]")) c.rms_norm_eps = *v;
    if (const auto v = r.number("initializer_range", 0.0, 10.0, "a number in [0, 10]")) c.initializer_range = *v;
    if (const auto v = r.boolean("tie_word_embeddings")) c.tie_word_embeddings = *v;
    if (const auto v = r.string("torch_dtype")) c.torch_dtype = *v;
    if (const auto v = r.string("dtype")) c.torch_dtype = *v;  // transformers 5.x's name for it
    expects<config_error>(c.rms_norm_eps > 0.0, [&] { return strata::cat(source, ": rms_norm_eps must be > 0"); });

    if (const auto act = r.string("hidden_act"))
      expects<config_error>(*act == "silu", [&] {
        return strata::cat(source, ": hidden_act is \"", *act, "\"; Qwen2's MLP is SwiGLU (\"silu\")");
      });
    if (const auto v = r.boolean("use_sliding_window"))
      expects<config_error>(!*v, [&] {
        return strata::cat(source, ": use_sliding_window is true; sliding-window attention is not implemented");
      });
    if (const auto v = r.number("attention_dropout", 0.0, 1.0, "a number in [0, 1]"))
      expects<config_error>(*v == 0.0, [&] {
        return strata::cat(source, ": attention_dropout is ", *v, "; attention dropout is not implemented");
      });
    if (const auto v = r.integer("head_dim", 1, 1 << 20))
      expects<config_error>(*v == c.head_dim(), [&] {
        return strata::cat(source, ": head_dim ", *v, " is not hidden_size / num_attention_heads = ", c.head_dim());
      });
    if (const auto* types = r.find("layer_types")) {
      if (!types->is_array()) r.expected("layer_types", "an array", *types);
      for (const auto& t : *types)
        expects<config_error>(t == "full_attention", [&] {
          return cat(source, ": layer_types holds ", t.dump(),
                     "; only full attention is implemented (no sliding window)");
        });
    }
    read_rope(r, c, source);
    // What the reader did not consume is kept as it is, for export.
    for (auto& [k, v] : j.items())
      if (!known_key(k)) c.extra[k] = v;
    c.source = source;
    c.validate(source);
    return c;
  }

  // DIR/config.json, or a config file itself.
  static qwen2_config load(const std::filesystem::path& path) {
    const auto file = std::filesystem::is_directory(path) ? path / "config.json" : path;
    std::ifstream in(file);
    expects<config_error>(static_cast<bool>(in), [&] {
      return strata::cat(file.string(), ": cannot open (a Hugging Face model directory has a config.json)");
    });
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
      throw config_error(strata::cat(file.string(), ": not valid JSON: ", e.what()));
    }
    return from_json(j, file.string());
  }

  // config.json in transformers 4.x's layout (5.x reads it too).
  nlohmann::json to_json() const {
    nlohmann::json j = extra;
    j["architectures"] = nlohmann::json::array({"Qwen2ForCausalLM"});
    j["model_type"] = "qwen2";
    j["vocab_size"] = vocab_size;
    j["hidden_size"] = hidden_size;
    j["intermediate_size"] = intermediate_size;
    j["num_hidden_layers"] = num_hidden_layers;
    j["num_attention_heads"] = num_attention_heads;
    j["num_key_value_heads"] = num_key_value_heads;
    j["max_position_embeddings"] = max_position_embeddings;
    j["rms_norm_eps"] = rms_norm_eps;
    j["rope_theta"] = rope_theta;
    j["initializer_range"] = initializer_range;
    j["tie_word_embeddings"] = tie_word_embeddings;
    j["hidden_act"] = "silu";
    j["attention_dropout"] = 0.0;
    j["use_sliding_window"] = false;
    j["torch_dtype"] = torch_dtype;
    return j;
  }

  // Sizes that fit together, and fit tp_size tensor-parallel ranks when given.
  void validate(const std::string& source, int tp_size = 1) const {
    expects<config_error>(hidden_size % num_attention_heads == 0 && head_dim() % 2 == 0, [&] {
      return strata::cat(source, ": hidden_size ", hidden_size, " does not split into ", num_attention_heads,
                         " heads of an even size");
    });
    expects<config_error>(num_attention_heads % num_key_value_heads == 0, [&] {
      return strata::cat(source, ": num_attention_heads ", num_attention_heads,
                         " is not a multiple of num_key_value_heads ", num_key_value_heads);
    });
    expects<config_error>(vocab_size <= (1 << 24), [&] {
      return strata::cat(source, ": vocab_size ", vocab_size, " exceeds 2^24, above which float ids are not exact");
    });
    const auto divides = [&](std::string_view key, int value) {
      expects<config_error>(value % tp_size == 0, [&] {
        return strata::cat(source, ": ", key, " ", value, " does not divide over ", tp_size, " tensor-parallel ranks");
      });
    };
    divides("num_key_value_heads", num_key_value_heads);
    divides("vocab_size", vocab_size);
    divides("intermediate_size", intermediate_size);
  }

 private:
  static void read_rope(detail::json_reader& r, qwen2_config& c, const std::string& source) {
    if (const auto v = r.number("rope_theta", 0.0, 1e30, "a positive number")) c.rope_theta = *v;
    if (const auto* scaling = r.object("rope_scaling")) {
      detail::json_reader s(*scaling, source, "rope_scaling", nullptr);
      const auto type = s.string("rope_type") ? s.string("rope_type") : s.string("type");
      expects<config_error>(!type || *type == "default", [&] {
        return strata::cat(source, ": rope_scaling of type \"", type.value_or(""),
                           "\" is not implemented (only the default rotary embedding is)");
      });
    }
    if (const auto* params = r.object("rope_parameters")) {  // transformers 5.x
      detail::json_reader p(*params, source, "rope_parameters", nullptr);
      if (const auto type = p.string("rope_type"))
        expects<config_error>(*type == "default", [&] {
          return strata::cat(source, ": rope_parameters.rope_type \"", *type,
                             "\" is not implemented (only the default rotary embedding is)");
        });
      if (const auto v = p.number("rope_theta", 0.0, 1e30, "a positive number")) c.rope_theta = *v;
    }
    expects<config_error>(c.rope_theta > 0.0, [&] { return strata::cat(source, ": rope_theta must be > 0"); });
  }

  static bool known_key(const std::string& k) {
    for (const char* known : {"model_type",
                              "vocab_size",
                              "hidden_size",
                              "intermediate_size",
                              "num_hidden_layers",
                              "num_attention_heads",
                              "num_key_value_heads",
                              "max_position_embeddings",
                              "rms_norm_eps",
                              "initializer_range",
                              "tie_word_embeddings",
                              "torch_dtype",
                              "dtype",
                              "hidden_act",
                              "use_sliding_window",
                              "attention_dropout",
                              "head_dim",
                              "rope_theta",
                              "rope_scaling",
                              "rope_parameters",
                              "architectures"})
      if (k == known) return true;
    return false;
  }
};

// One decoder layer: h = x + self_attn(input_layernorm(x)), y = h + mlp(post_attention_layernorm(h)).
struct qwen2_decoder_layer {
  nn::rms_norm input_layernorm;
  nn::grouped_query_attention self_attn;
  nn::rms_norm post_attention_layernorm;
  nn::swiglu_mlp mlp;

  // Within one call (call_scratch.hpp): the norms' outputs n1 and n2, which backward makes
  // again from their inputs and statistics (rms_norm::forward_again: one pass each, the
  // same bits), and the gradients of n2, h and n1.
  template <class Space, class Act = float>
  struct scratch {
    tensor<Act, Space> n1, n2;
    tensor<Act, Space> dn2, dh, dn1;
  };
  template <class Space, class Act = float>
  struct cache {
    nn::rms_norm::cache<Space, Act> input_layernorm, post_attention_layernorm;
    nn::grouped_query_attention::cache<Space, Act> self_attn;
    nn::swiglu_mlp::cache<Space, Act> mlp;
    tensor<Act, Space> h;  // x + attention: the residual stream between the two halves
    call_scratch<scratch<Space, Act>> work;
  };

  template <class Ctx>
  void forward(Ctx& ctx, const tensor_for<Ctx>& x, tensor_for<Ctx>& y,
               cache<space_of<Ctx>, activation_of<Ctx>>& c) const {
    // The projections' caches point at w.n1 and w.n2 from here to backward, which makes
    // them again there (other layers' calls use the scratch in between).
    auto& w = scratch_of(ctx, c.work);
    {
      // Each branch its own trace scope, so a step's profile splits attention from the MLP.
      trace_scope part(trace_track::compute, "attn forward");
      input_layernorm.forward(ctx, x, w.n1, c.input_layernorm);
      self_attn.forward(ctx, w.n1, c.h, c.self_attn);
    }
    trace_scope part(trace_track::compute, "mlp forward");
    // h += x and its norm in one kernel (rms_norm::forward_residual: add_into's bits).
    post_attention_layernorm.forward_residual(ctx, c.h, x, w.n2, c.post_attention_layernorm);
    mlp.forward(ctx, w.n2, y, c.mlp);
    nn::add_into(ctx, y, c.h);
  }
  template <class Ctx>
  void backward(Ctx& ctx, const tensor_for<Ctx>& dy, tensor_for<Ctx>& dx, cache<space_of<Ctx>, activation_of<Ctx>>& c) {
    auto& w = scratch_of(ctx, c.work);
    {
      trace_scope part(trace_track::compute, "mlp backward");
      post_attention_layernorm.forward_again(ctx, w.n2, c.post_attention_layernorm);
      mlp.backward(ctx, dy, w.dn2, c.mlp);
      // The norm's gradient and the residual's (dy) in one kernel.
      post_attention_layernorm.backward_residual(ctx, w.dn2, dy, w.dh, c.post_attention_layernorm);
    }
    trace_scope part(trace_track::compute, "attn backward");
    input_layernorm.forward_again(ctx, w.n1, c.input_layernorm);
    self_attn.backward(ctx, w.dh, w.dn1, c.self_attn);
    input_layernorm.backward_residual(ctx, w.dn1, w.dh, dx, c.input_layernorm);
  }
};

// Qwen2ForCausalLM: token embedding, decoder layers, final norm, and the vocabulary head
// with the causal-LM loss in one layer (over chunks of tokens: the [tokens, vocabulary]
// logits are never whole; lm_head.logits() makes them where they are wanted), split over
// tensor-parallel ranks as Megatron splits it (vocabulary rows, heads, MLP columns). Field names are transformers'
// ("layers.3.self_attn.q_proj.weight" is its "model.layers.3.self_attn.q_proj.weight"; see qwen2_hf_name). With tied
// embeddings lm_head.weight is declared tied to embed_tokens.weight: it starts from, and
// is stepped as, the same tensor.
struct qwen2 {
  nn::vocab_parallel_embedding embed_tokens;  // [V/T, D]
  std::vector<qwen2_decoder_layer> layers;
  nn::rms_norm norm;
  nn::linear_cross_entropy lm_head;  // [V/T, D], no bias: logits split by vocabulary
};

// transformers' initialisation: N(0, initializer_range) for matrices and embeddings,
// zero biases, unit norms.
inline qwen2 make_qwen2(const qwen2_config& cfg, int tp_rank = 0, int tp_size = 1) {
  cfg.validate(cfg.source, tp_size);
  const auto normal = init_spec::normal(static_cast<float>(cfg.initializer_range));
  const auto eps = static_cast<float>(cfg.rms_norm_eps);
  qwen2 m;
  m.embed_tokens = nn::make_vocab_parallel_embedding(cfg.vocab_size, cfg.hidden_size, tp_rank, tp_size,
                                                     static_cast<float>(cfg.initializer_range));
  for (int l = 0; l < cfg.num_hidden_layers; ++l) {
    qwen2_decoder_layer d{
        nn::make_rms_norm(cfg.hidden_size, eps),
        nn::make_grouped_query_attention(cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads,
                                         static_cast<float>(cfg.rope_theta), tp_rank, tp_size),
        nn::make_rms_norm(cfg.hidden_size, eps),
        nn::make_swiglu_mlp(cfg.hidden_size, cfg.intermediate_size, tp_rank, tp_size)};
    for (auto* p :
         {&d.self_attn.q_proj.weight, &d.self_attn.k_proj.weight, &d.self_attn.v_proj.weight,
          &d.self_attn.o_proj.weight, &d.mlp.gate_proj.weight, &d.mlp.up_proj.weight, &d.mlp.down_proj.weight})
      p->init = normal;
    m.layers.push_back(std::move(d));
  }
  m.norm = nn::make_rms_norm(cfg.hidden_size, eps);
  m.lm_head = nn::make_linear_cross_entropy(cfg.hidden_size, cfg.vocab_size, tp_rank, tp_size);
  m.lm_head.weight.init = normal;
  if (cfg.tie_word_embeddings) m.lm_head.weight.tied_to = "embed_tokens.weight";
  return m;
}

// The name transformers gives a param of qwen2: "model." before everything but lm_head.
inline std::string qwen2_hf_name(const std::string& name) {
  return name.rfind("lm_head.", 0) == 0 ? name : "model." + name;
}

}  // namespace strata::models
