// flat_layout: where every param of a model lives in one flat buffer (one aligned
// segment per layer), and how that buffer splits into equal shards for N ranks (ZeRO).
#pragma once
#include <algorithm>
#include <cstddef>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "../core/error.hpp"
#include "../core/shape.hpp"
#include "concepts.hpp"
#include "param.hpp"
#include "reflect.hpp"

namespace strata {

// One layer's params: [offset, offset + used) holds them, [offset + used, offset + size)
// is zero padding up to the layout's alignment. ZeRO-3 gathers and frees whole segments.
struct segment {
  std::size_t layer_index = 0;
  std::string layer_name;
  std::size_t offset = 0;  // absolute, a multiple of the layout's alignment
  std::size_t size = 0;    // padded: a multiple of the layout's alignment
  std::size_t used = 0;    // up to the end of the layer's last param
};

struct param_slot {
  std::string name;  // dotted path, e.g. "blocks.3.fc1.weight"
  strata::shape shape;
  std::size_t layer_index = 0;
  std::size_t offset = 0;  // absolute in the flat buffer; a multiple of 16 unless numel is 0
  std::size_t numel = 0;
  bool decay = true;
  init_spec init;
  std::string tied_to;  // param::tied_to: the name of the param this one is the same tensor as
};

class flat_layout {
 public:
  // Each param starts on a multiple of this many elements inside its segment (64 bytes
  // of fp32), so SIMD loads of any param are aligned.
  static constexpr std::size_t param_alignment = 16;

  struct range {
    std::size_t begin = 0, end = 0;
    std::size_t size() const noexcept { return end - begin; }
    bool empty() const noexcept { return end == begin; }
    bool operator==(const range&) const = default;
  };

  flat_layout() = default;

  // The layout of a model's params in declaration order, one segment per layer (see
  // for_each_layer), segments aligned to alignment_elems (a multiple of 16). Also sets
  // each param's name to its dotted path.
  template <class M>
  static flat_layout of(M& model, std::size_t alignment_elems = 64);

  std::size_t alignment() const noexcept { return alignment_; }
  // Elements of the flat buffer: the end of the last segment, a multiple of alignment().
  std::size_t total() const noexcept { return total_; }
  const std::vector<segment>& segments() const noexcept { return segments_; }
  const std::vector<param_slot>& params() const noexcept { return params_; }

  // The slot of the param with this dotted name; config_error if there is none.
  const param_slot& find(std::string_view name) const {
    auto it = index_.find(name);
    if (it == index_.end()) throw config_error(missing_message(name));
    return params_[it->second];
  }

  // Equal shards for n ranks: total() padded up to a multiple of n * alignment(), so
  // every shard is the same size and itself aligned. Shard r is [r*s, (r+1)*s).
  std::size_t padded_total(int n) const {
    expects<config_error>(n >= 1, strata::cat("flat_layout: shards for ", n, " ranks; need at least 1 rank"));
    const std::size_t quantum = static_cast<std::size_t>(n) * alignment_;
    return (total_ + quantum - 1) / quantum * quantum;
  }
  std::size_t shard_size(int n) const { return padded_total(n) / static_cast<std::size_t>(n); }
  range shard(int n, int r) const {
    const std::size_t s = shard_size(n);
    expects<config_error>(r >= 0 && r < n, strata::cat("flat_layout: shard of rank ", r, " among ", n,
                                                       " ranks; the rank must be in [0, ", n, ")"));
    return {static_cast<std::size_t>(r) * s, static_cast<std::size_t>(r + 1) * s};
  }
  static range of_segment(const segment& s) noexcept { return {s.offset, s.offset + s.size}; }
  static range of_param(const param_slot& p) noexcept { return {p.offset, p.offset + p.numel}; }

  // The part of a that lies in b (e.g. of a segment or param in a rank's shard); an
  // empty range (begin == end) when they do not overlap.
  static range intersect(range a, range b) noexcept {
    const std::size_t begin = std::max(a.begin, b.begin);
    return {begin, std::max(begin, std::min(a.end, b.end))};
  }

  // Points each param of the model at its place: data_ptr = data + offset, grad_ptr =
  // grad + offset (null when grad is null). data and grad hold at least total()
  // elements. The model must be the one this layout was made of, or one of the same
  // architecture (same names and sizes); anything else is a config_error.
  template <class M, class T>
  void bind(M& model, T* data, T* grad) const;

 private:
  std::string missing_message(std::string_view name) const {
    std::string m = strata::cat("flat_layout: no param named '", name, "' among the ", params_.size(), " params");
    if (!params_.empty()) m += strata::cat(" (first '", params_.front().name, "', last '", params_.back().name, "')");
    return m;
  }
  static std::size_t round_up(std::size_t x, std::size_t q) noexcept { return (x + q - 1) / q * q; }

  std::size_t alignment_ = 64;
  std::size_t total_ = 0;
  std::vector<segment> segments_;
  std::vector<param_slot> params_;
  std::map<std::string, std::size_t, std::less<>> index_;
};

template <class M>
flat_layout flat_layout::of(M& model, std::size_t alignment_elems) {
  flat_layout l;
  if constexpr (check_model<std::remove_cv_t<M>>()) {
    expects<config_error>(alignment_elems > 0 && alignment_elems % param_alignment == 0,
                          strata::cat("flat_layout: alignment of ", alignment_elems,
                                      " elements; it must be a positive multiple of ", param_alignment));
    l.alignment_ = alignment_elems;
    std::size_t offset = 0;
    for_each_layer(model, [&](auto& layer, std::string_view layer_name, std::size_t layer_index) {
      segment seg{layer_index, std::string(layer_name), offset, 0, 0};
      std::size_t local = 0;
      auto place = [&](auto& p, std::string_view name) {
        p.name.assign(name);
        const std::size_t n = p.numel();
        // An empty param (a linear without bias) takes no room and needs no alignment.
        if (n != 0) local = round_up(local, param_alignment);
        l.params_.push_back({std::string(name), p.shape, layer_index, offset + local, n, p.decay, p.init, p.tied_to});
        local += n;
      };
      detail::for_each_param_under(layer, std::string(layer_name), place);
      seg.used = local;
      seg.size = round_up(local, alignment_elems);
      offset += seg.size;
      l.segments_.push_back(std::move(seg));
    });
    l.total_ = offset;
    for (std::size_t i = 0; i < l.params_.size(); ++i) {
      const bool inserted = l.index_.emplace(l.params_[i].name, i).second;
      expects<config_error>(inserted, strata::cat("flat_layout: two params are named '", l.params_[i].name,
                                                  "'; check the field_names the model's types declare"));
    }
  }
  return l;
}

template <class M, class T>
void flat_layout::bind(M& model, T* data, T* grad) const {
  expects<config_error>(data != nullptr, "flat_layout::bind: the data buffer is null");
  std::size_t i = 0;
  for_each_param(model, [&](auto& p, std::string_view name) {
    using value_type = typename std::remove_cvref_t<decltype(p)>::value_type;
    // Only the assertion is compiled for a mismatch, not a cascade of conversion errors.
    if constexpr (!std::is_same_v<value_type, T>) {
      static_assert(std::is_same_v<value_type, T>,
                    "strata: flat_layout::bind: the buffers' element type must be the params' value type "
                    "(param<T> binds to T* data and grad)");
    } else {
      expects<config_error>(i < params_.size(),
                            strata::cat("flat_layout::bind: the model has more params than the layout's ",
                                        params_.size(), "; '", name, "' has no slot"));
      const param_slot& slot = params_[i];
      expects<config_error>(slot.name == name && slot.numel == p.numel(),
                            strata::cat("flat_layout::bind: param ", i, " of the model is '", name, "' ", p.shape,
                                        " but the layout has '", slot.name, "' ", slot.shape,
                                        "; bind a model of the architecture the layout was made of"));
      p.data_ptr = data + slot.offset;
      p.grad_ptr = grad ? grad + slot.offset : nullptr;
      ++i;
    }
  });
  expects<config_error>(i == params_.size(), strata::cat("flat_layout::bind: the model has ", i,
                                                         " params but the layout has ", params_.size()));
}

}  // namespace strata
