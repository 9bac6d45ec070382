// The strata side of tests/tools/safetensors_interop.py: writes a safetensors file from
// a JSON description of its tensors, or dumps a safetensors file as JSON.
//   safetensors_tool write SPEC.json OUT.safetensors
//     SPEC: {"order": "sorted"|"as_added", "metadata": {...},
//            "tensors": [{"name", "dtype", "shape", "values": [numbers, row-major]}]}
//   safetensors_tool dump IN.safetensors   (prints {"metadata", "names", "tensors": {name: {...}}})
// Exit status 1 with "error: <message>" on stderr when strata rejects the input.
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "strata/io/safetensors.hpp"

namespace {

using json = nlohmann::json;

template <class T>
std::vector<std::byte> encode(const json& values) {
  std::vector<std::byte> out(values.size() * sizeof(T));
  for (std::size_t i = 0; i < values.size(); ++i) {
    T v;
    if constexpr (std::is_same_v<T, strata::bf16> || std::is_same_v<T, strata::fp16>)
      v = T(static_cast<float>(values[i].get<double>()));
    else if constexpr (std::is_floating_point_v<T>)
      v = static_cast<T>(values[i].get<double>());
    else
      v = values[i].get<T>();
    std::memcpy(out.data() + i * sizeof(T), &v, sizeof(T));
  }
  return out;
}

std::vector<std::byte> encode(strata::dtype t, const json& values) {
  using strata::dtype;
  switch (t) {
    case dtype::f64: return encode<double>(values);
    case dtype::f32: return encode<float>(values);
    case dtype::bf16: return encode<strata::bf16>(values);
    case dtype::f16: return encode<strata::fp16>(values);
    case dtype::i64: return encode<std::int64_t>(values);
    case dtype::i32: return encode<std::int32_t>(values);
    case dtype::i16: return encode<std::int16_t>(values);
    case dtype::i8: return encode<std::int8_t>(values);
    case dtype::u64: return encode<std::uint64_t>(values);
    case dtype::u32: return encode<std::uint32_t>(values);
    case dtype::u16: return encode<std::uint16_t>(values);
    case dtype::u8: return encode<std::uint8_t>(values);
  }
  return {};
}

template <class T>
json values_of(const strata::safetensors_file& f, const std::string& name) {
  json a = json::array();
  for (auto v : f.read_all<T>(name)) a.push_back(v);
  return a;
}

json dump_values(const strata::safetensors_file& f, const strata::tensor_info& t) {
  using strata::dtype;
  switch (t.dtype) {
    case dtype::f64:
    case dtype::f32:
    case dtype::bf16:
    case dtype::f16: return values_of<double>(f, t.name);
    case dtype::i64: return values_of<std::int64_t>(f, t.name);
    case dtype::i32: return values_of<std::int32_t>(f, t.name);
    case dtype::i16: return values_of<std::int16_t>(f, t.name);
    case dtype::i8: return values_of<std::int8_t>(f, t.name);
    case dtype::u64: return values_of<std::uint64_t>(f, t.name);
    case dtype::u32: return values_of<std::uint32_t>(f, t.name);
    case dtype::u16: return values_of<std::uint16_t>(f, t.name);
    case dtype::u8: return values_of<std::uint8_t>(f, t.name);
  }
  return {};
}

int write(const char* spec_path, const char* out_path) {
  std::ifstream in(spec_path);
  const json spec = json::parse(in);
  strata::safetensors_writer w;
  if (spec.contains("metadata"))
    for (auto& [k, v] : spec.at("metadata").items()) w.metadata[k] = v.get<std::string>();
  for (const auto& t : spec.at("tensors")) {
    strata::dtype d{};
    if (!strata::parse_dtype(t.at("dtype").get<std::string>(), d)) throw std::runtime_error("bad dtype in spec");
    w.add_owned(t.at("name").get<std::string>(), d, t.at("shape").get<std::vector<std::int64_t>>(),
                encode(d, t.at("values")));
  }
  const bool sorted = spec.value("order", std::string("sorted")) == "sorted";
  w.write(out_path, sorted ? strata::safetensors_writer::order::sorted : strata::safetensors_writer::order::as_added);
  return 0;
}

int dump(const char* path) {
  const auto f = strata::safetensors_file::open(path);
  json out;
  out["metadata"] = f.metadata();
  out["names"] = f.names();
  out["tensors"] = json::object();
  for (const auto& t : f.header().tensors)
    out["tensors"][t.name] = {
        {"dtype", std::string(strata::name_of(t.dtype))}, {"shape", t.shape}, {"values", dump_values(f, t)}};
  // nlohmann writes each double as the shortest decimal that reads back to it: exact in Python.
  std::cout << out.dump() << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc == 4 && std::strcmp(argv[1], "write") == 0) return write(argv[2], argv[3]);
    if (argc == 3 && std::strcmp(argv[1], "dump") == 0) return dump(argv[2]);
    std::cerr << "usage: safetensors_tool write SPEC.json OUT.safetensors | dump IN.safetensors\n";
    return 2;
  } catch (const strata::error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
