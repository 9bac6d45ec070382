// safetensors: every dtype round-trips bit-exactly, floating dtypes convert on read,
// partial reads return the right elements, writes are atomic, and each malformed header
// field is a checkpoint_error naming the file, the tensor and the field.
#include "strata/io/safetensors.hpp"

#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

#include "support.hpp"

using io_test::error_of;
using io_test::raw_file;
using io_test::temp_dir;
using io_test::write_bytes;
using strata::checkpoint_error;
using strata::dtype;
using strata::safetensors_file;
using strata::safetensors_writer;

namespace {

template <class T>
std::vector<T> ramp(std::size_t n, double scale) {
  std::vector<T> v(n);
  for (std::size_t i = 0; i < n; ++i) {
    const double x = (static_cast<double>(i) - static_cast<double>(n) / 2) * scale;
    if constexpr (std::is_same_v<T, strata::bf16> || std::is_same_v<T, strata::fp16>)
      v[i] = T(static_cast<float>(x));
    else
      v[i] = static_cast<T>(x);
  }
  return v;
}

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

}  // namespace

TEST_CASE("every dtype round-trips bit-exactly, with shapes, metadata and an empty tensor") {
  temp_dir dir("st_roundtrip");
  const auto path = dir / "all.safetensors";
  const auto f64 = ramp<double>(6, 0.1);
  const auto f32 = ramp<float>(24, 0.37);
  const auto b16 = ramp<strata::bf16>(5, 1.3);
  const auto h16 = ramp<strata::fp16>(7, 0.01);
  const auto i64 = ramp<std::int64_t>(3, 1e12);
  const auto i32 = ramp<std::int32_t>(4, 1000);
  const auto i16 = ramp<std::int16_t>(4, 300);
  const auto i8 = ramp<std::int8_t>(9, 20);
  const auto u64 = ramp<std::uint64_t>(2, 0);
  const auto u32 = std::vector<std::uint32_t>{0, 7, 0xffffffffu};
  const auto u16 = std::vector<std::uint16_t>{65535, 1};
  const auto u8 = std::vector<std::uint8_t>{1, 2, 3, 255, 0};
  const std::vector<float> empty;

  safetensors_writer w;
  w.add<double>("f64", {2, 3}, f64);
  w.add<float>("layer.0.weight", {2, 3, 4}, f32);
  w.add<strata::bf16>("b16", {5}, b16);
  w.add<strata::fp16>("h16", {7, 1}, h16);
  w.add<std::int64_t>("i64", {3}, i64);
  w.add<std::int32_t>("i32", {2, 2}, i32);
  w.add<std::int16_t>("i16", {4}, i16);
  w.add<std::int8_t>("i8", {3, 3}, i8);
  w.add<std::uint64_t>("u64", {2}, u64);
  w.add<std::uint32_t>("u32", {3}, u32);
  w.add<std::uint16_t>("u16", {2}, u16);
  w.add<std::uint8_t>("u8", {5}, u8);
  w.add<float>("empty", {0, 4}, empty);
  w.add<float>("scalar", {}, std::span<const float>(f32.data(), 1));
  w.metadata["format"] = "pt";
  w.metadata["note"] = "strata \"test\" \xc3\xa9";
  w.write(path);

  const auto f = safetensors_file::open(path);
  CHECK(f.size() == 14);
  CHECK(f.metadata().at("format") == "pt");
  CHECK(f.metadata().at("note") == "strata \"test\" \xc3\xa9");
  CHECK(f.data_offset() % 8 == 0);  // the header is padded to 8 bytes
  CHECK(same_bits(f.read_all<double>("f64"), f64));
  CHECK(same_bits(f.read_all<float>("layer.0.weight"), f32));
  CHECK(same_bits(f.read_all<strata::bf16>("b16"), b16));
  CHECK(same_bits(f.read_all<strata::fp16>("h16"), h16));
  CHECK(same_bits(f.read_all<std::int64_t>("i64"), i64));
  CHECK(same_bits(f.read_all<std::int32_t>("i32"), i32));
  CHECK(same_bits(f.read_all<std::int16_t>("i16"), i16));
  CHECK(same_bits(f.read_all<std::int8_t>("i8"), i8));
  CHECK(same_bits(f.read_all<std::uint64_t>("u64"), u64));
  CHECK(same_bits(f.read_all<std::uint32_t>("u32"), u32));
  CHECK(same_bits(f.read_all<std::uint16_t>("u16"), u16));
  CHECK(same_bits(f.read_all<std::uint8_t>("u8"), u8));
  CHECK(f.read_all<float>("empty").empty());
  CHECK(f.read_all<float>("scalar") == std::vector<float>{f32[0]});

  const auto& info = f.info("layer.0.weight");
  CHECK(info.dtype == dtype::f32);
  CHECK(info.shape == std::vector<std::int64_t>{2, 3, 4});
  CHECK(info.bytes() == 96);
  CHECK(f.info("empty").shape == std::vector<std::int64_t>{0, 4});
  CHECK(f.info("scalar").shape.empty());
  CHECK(f.info("scalar").numel() == 1);
}

TEST_CASE("the sorted order is the reference writer's: widest dtype first, then by name") {
  const std::vector<std::uint8_t> a{1};
  const std::vector<float> b{1}, c{2};
  const std::vector<double> d{3};
  const std::vector<strata::bf16> e{strata::bf16(1.0f)};
  safetensors_writer w;
  w.add<std::uint8_t>("a", {1}, a);
  w.add<float>("c", {1}, c);
  w.add<float>("b", {1}, b);
  w.add<strata::bf16>("e", {1}, e);
  w.add<double>("d", {1}, d);
  const auto sorted = safetensors_file::from_bytes(w.to_bytes());
  CHECK(sorted.names() == std::vector<std::string>{"d", "b", "c", "e", "a"});
  const auto added = safetensors_file::from_bytes(w.to_bytes(safetensors_writer::order::as_added));
  CHECK(added.names() == std::vector<std::string>{"a", "c", "b", "e", "d"});
  // The exact bytes of the reference implementation for one tensor (header padded with
  // spaces to a multiple of 8: 54 -> 56).
  safetensors_writer one;
  const std::vector<float> x{1.0f};
  one.add<float>("x", {1}, x);
  const auto bytes = one.to_bytes();
  const std::string head(reinterpret_cast<const char*>(bytes.data()) + 8, 56);
  CHECK(head == "{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}  ");
  CHECK(std::to_integer<int>(bytes[0]) == 56);
}

TEST_CASE("floating dtypes convert on read; integer dtypes must match") {
  const std::vector<float> vals{1.0f, -2.5f, 3.14159265f, 65504.0f, 1e-8f, 0.0f};
  std::vector<strata::bf16> b(vals.size());
  std::vector<strata::fp16> h(vals.size());
  std::vector<double> d(vals.size());
  for (std::size_t i = 0; i < vals.size(); ++i) {
    b[i] = strata::bf16(vals[i]);
    h[i] = strata::fp16(vals[i]);
    d[i] = static_cast<double>(vals[i]) + 1e-12;  // not representable in float
  }
  const std::vector<std::int32_t> ints{1, 2};
  safetensors_writer w;
  w.add<strata::bf16>("b", {6}, b);
  w.add<strata::fp16>("h", {6}, h);
  w.add<double>("d", {6}, d);
  w.add<float>("f", {6}, vals);
  w.add<std::int32_t>("i", {2}, ints);
  const auto f = safetensors_file::from_bytes(w.to_bytes(), "conv.safetensors");
  const auto fb = f.read_all<float>("b");
  const auto fh = f.read_all<float>("h");
  const auto fd = f.read_all<float>("d");
  for (std::size_t i = 0; i < vals.size(); ++i) {
    CHECK(fb[i] == static_cast<float>(b[i]));  // widening is exact
    CHECK(fh[i] == static_cast<float>(h[i]));
    CHECK(fd[i] == static_cast<float>(d[i]));  // one rounding of the double
  }
  const auto back = f.read_all<strata::bf16>("f");  // narrowing rounds to nearest even
  CHECK(same_bits(back, b));
  CHECK(f.read_all<double>("f")[2] == static_cast<double>(vals[2]));
  CHECK(error_of<checkpoint_error>([&] { f.read_all<float>("i"); }) ==
        "conv.safetensors: tensor \"i\": dtype I32 cannot be read as F32 (floating types convert among themselves; "
        "integer types must match)");
  CHECK(error_of<checkpoint_error>([&] { f.read_all<std::int64_t>("i"); }).find("I32 cannot be read as I64") !=
        std::string::npos);
  CHECK(error_of<checkpoint_error>([&] { f.info("nope"); }) == "conv.safetensors: no tensor \"nope\"");
}

TEST_CASE("partial reads return exactly the requested elements, converting in chunks") {
  temp_dir dir("st_partial");
  const std::size_t n = 100'003;  // several conversion chunks, odd tail
  const auto v = ramp<float>(n, 1e-3);
  std::vector<strata::bf16> b(n);
  for (std::size_t i = 0; i < n; ++i) b[i] = strata::bf16(v[i]);
  safetensors_writer w;
  w.add<float>("v", {static_cast<std::int64_t>(n)}, v);
  w.add<strata::bf16>("b", {static_cast<std::int64_t>(n)}, b);
  w.write(dir / "p.safetensors");
  const auto f = safetensors_file::open(dir / "p.safetensors");
  std::vector<float> part(40'000);
  f.read<float>("v", part, 50'000);
  CHECK(std::equal(part.begin(), part.end(), v.begin() + 50'000));
  f.read<float>("b", part, 60'003);
  bool ok = true;
  for (std::size_t i = 0; i < part.size(); ++i) ok = ok && part[i] == static_cast<float>(b[60'003 + i]);
  CHECK(ok);
  std::vector<std::byte> raw(8);
  f.read_bytes("v", raw, 4 * 10);
  float two[2];
  std::memcpy(two, raw.data(), 8);
  CHECK(two[0] == v[10]);
  CHECK(two[1] == v[11]);
  const std::string msg = error_of<checkpoint_error>([&] { f.read<float>("v", part, n - 10); });
  CHECK(msg == (dir / "p.safetensors").string() + ": tensor \"v\": reading elements [99993, 139993) of 100003");
  CHECK(error_of<checkpoint_error>([&] { f.read_bytes("v", raw, 4 * n - 4); }).find("reading bytes") !=
        std::string::npos);
}

TEST_CASE("write is atomic: it replaces the old file whole and leaves no temporary file") {
  temp_dir dir("st_atomic");
  const auto path = dir / "w.safetensors";
  const std::vector<float> one{1, 2}, two{3, 4, 5};
  safetensors_writer a;
  a.add<float>("t", {2}, one);
  a.write(path);
  safetensors_writer b;
  b.add<float>("t", {3}, two);
  b.write(path);
  CHECK(safetensors_file::open(path).read_all<float>("t") == two);
  int entries = 0;
  for ([[maybe_unused]] auto& e : std::filesystem::directory_iterator(dir.path())) ++entries;
  CHECK(entries == 1);
  // A write that cannot happen (no such directory) throws and leaves nothing behind.
  CHECK(error_of<checkpoint_error>([&] {
          b.write(dir / "missing" / "x.safetensors");
        }).find("cannot create temporary file") != std::string::npos);
}

TEST_CASE("writer input is checked") {
  safetensors_writer w;
  const std::vector<float> v{1, 2, 3};
  w.add<float>("a", {3}, v);
  CHECK(error_of<checkpoint_error>([&] { w.add<float>("a", {3}, v); }) ==
        "safetensors writer: tensor \"a\": added twice");
  CHECK(error_of<checkpoint_error>([&] { w.add<float>("b", {2, 2}, v); }) ==
        "safetensors writer: tensor \"b\": 4 elements of F32 are 16 bytes, given 12");
  CHECK(error_of<checkpoint_error>([&] { w.add<float>("__metadata__", {3}, v); }) ==
        "safetensors writer: tensor \"__metadata__\": the name is reserved for the metadata");
  CHECK(error_of<checkpoint_error>([&] { w.add<float>("c", {-3}, v); }) ==
        "safetensors writer: tensor \"c\": negative extent -3");
}

namespace {
// The message open() gives for a file with this content.
std::string open_error(const temp_dir& dir, const std::string& content) {
  const auto path = dir / "bad.safetensors";
  write_bytes(path, content);
  return error_of<checkpoint_error>([&] { safetensors_file::open(path); });
}
}  // namespace

TEST_CASE("every header field is validated against the file before use") {
  temp_dir dir("st_bad");
  const std::string file = (dir / "bad.safetensors").string() + ": ";
  auto hdr = [](const std::string& entries) { return "{" + entries + "}"; };
  const std::string w = R"("w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]})";

  SECTION("the valid base case opens") { CHECK(open_error(dir, raw_file(hdr(w), 24)) == "<no exception>"); }
  SECTION("file shorter than the length prefix") {
    CHECK(open_error(dir, std::string("\x05\0\0", 3)) ==
          file + "file is 3 bytes, shorter than the 8-byte header length of a safetensors file");
  }
  SECTION("header length beyond the end of the file") {
    CHECK(open_error(dir, io_test::le64(1000) + hdr(w)) ==
          file + "header length 1000 is beyond the end of the file (65 bytes; truncated?)");
  }
  SECTION("header length above 100 MB") {
    CHECK(open_error(dir, io_test::le64(100'000'001) + hdr(w)) ==
          file + "header length 100000001 is above the 100 MB limit of the format (file corrupt or not safetensors)");
  }
  SECTION("truncated data") {
    const std::string msg = open_error(dir, raw_file(hdr(w), 20));
    CHECK(msg == file + "tensor \"w\": data_offsets [0, 24] are beyond the data area (20 bytes)");
  }
  SECTION("offsets beyond the data") {
    CHECK(open_error(dir, raw_file(hdr(R"("w":{"dtype":"U8","shape":[8],"data_offsets":[100,108]})"), 24)) ==
          file + "tensor \"w\": data_offsets [100, 108] are beyond the data area (24 bytes)");
  }
  SECTION("overlapping tensors") {
    CHECK(open_error(dir, raw_file(hdr(w + R"(,"v":{"dtype":"F32","shape":[2],"data_offsets":[16,24]})"), 24)) ==
          file + "tensor \"v\": data_offsets [16, 24] overlap tensor \"w\" [0, 24]");
  }
  SECTION("a gap in the data area") {
    CHECK(open_error(dir, raw_file(hdr(R"("v":{"dtype":"F32","shape":[2],"data_offsets":[8,16]})"), 16)) ==
          file + "tensor \"v\": data_offsets [8, 16] leave bytes [0, 8) of the data area unused");
  }
  SECTION("trailing bytes not covered by any tensor") {
    CHECK(open_error(dir, raw_file(hdr(w), 32)) ==
          file +
              "the tensors cover 24 bytes but the data area is 32 bytes (trailing bytes: truncated header or wrong "
              "file?)");
  }
  SECTION("shape and byte count disagree") {
    CHECK(open_error(dir, raw_file(hdr(R"("w":{"dtype":"F16","shape":[2,3],"data_offsets":[0,24]})"), 24)) ==
          file + "tensor \"w\": shape [2,3] of F16 is 12 bytes but data_offsets [0, 24] span 24");
  }
  SECTION("shape whose byte count overflows 64 bits") {
    CHECK(open_error(dir,
                     raw_file(hdr(R"("w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]})"), 0)) ==
          file + "tensor \"w\": shape [4294967296,4294967296] overflows a 64-bit byte count");
  }
  SECTION("unknown dtype") {
    CHECK(open_error(dir, raw_file(hdr(R"("w":{"dtype":"F8_E4M3","shape":[4],"data_offsets":[0,4]})"), 4)) ==
          file +
              "tensor \"w\": dtype \"F8_E4M3\" is not one strata reads (F64, F32, BF16, F16, I64, I32, I16, I8, "
              "U64, U32, U16, U8)");
  }
  SECTION("non-object JSON") {
    CHECK(open_error(dir, raw_file("[1, 2, 3]", 0)) == file + "header is not a JSON object (it must start with '{')");
    CHECK(open_error(dir, raw_file(" {}", 0)) == file + "header is not a JSON object (it must start with '{')");
  }
  SECTION("invalid JSON") {
    CHECK(open_error(dir, raw_file(R"({"w": })", 0)).rfind(file + "header is not valid JSON: parse error", 0) == 0);
    CHECK(open_error(dir, raw_file("{\"\xff\": 1}", 0)).rfind(file + "header is not valid JSON", 0) == 0);
    CHECK(open_error(dir, raw_file("{} x", 0)).rfind(file + "header is not valid JSON", 0) == 0);
  }
  SECTION("entry fields") {
    CHECK(open_error(dir, raw_file(R"({"w": 3})", 0)) ==
          file + "tensor \"w\": entry must be an object {dtype, shape, data_offsets}, got 3");
    CHECK(open_error(dir, raw_file(R"({"w": {"shape":[1],"data_offsets":[0,4]}})", 4)) ==
          file + "tensor \"w\": dtype is missing");
    CHECK(open_error(dir, raw_file(R"({"w": {"dtype":4,"shape":[1],"data_offsets":[0,4]}})", 4)) ==
          file + "tensor \"w\": dtype must be a string, got 4");
    CHECK(open_error(dir, raw_file(R"({"w": {"dtype":"F32","data_offsets":[0,4]}})", 4)) ==
          file + "tensor \"w\": shape is missing");
    CHECK(open_error(dir, raw_file(R"({"w": {"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4)) ==
          file + "tensor \"w\": shape must be an array of integers >= 0, got [-1]");
    CHECK(open_error(dir, raw_file(R"({"w": {"dtype":"F32","shape":[1.0],"data_offsets":[0,4]}})", 4)) ==
          file + "tensor \"w\": shape must be an array of integers >= 0, got [1.0]");
    CHECK(open_error(dir, raw_file(R"({"w": {"dtype":"F32","shape":"1","data_offsets":[0,4]}})", 4)) ==
          file + "tensor \"w\": shape must be an array of integers >= 0, got \"1\"");
    CHECK(open_error(dir, raw_file(R"({"w": {"dtype":"F32","shape":[1]}})", 4)) ==
          file + "tensor \"w\": data_offsets is missing");
    CHECK(open_error(dir, raw_file(R"({"w": {"dtype":"F32","shape":[1],"data_offsets":[0,4,8]}})", 4)) ==
          file + "tensor \"w\": data_offsets must be [begin, end] with integers >= 0, got [0,4,8]");
    CHECK(open_error(dir, raw_file(R"({"w": {"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})", 4)) ==
          file + "tensor \"w\": data_offsets must be [begin, end] with integers >= 0, got [-4,0]");
    CHECK(open_error(dir, raw_file(R"({"w": {"dtype":"F32","shape":[1],"data_offsets":[4,0]}})", 4)) ==
          file + "tensor \"w\": data_offsets [4, 0] end before they begin");
  }
  SECTION("duplicate names and metadata") {
    CHECK(open_error(dir, raw_file(hdr(w + "," + w), 24)) == file + "header names \"w\" twice");
    CHECK(open_error(dir, raw_file(hdr(R"("__metadata__":{"a":1},)" + w), 24)) ==
          file + "__metadata__.\"a\" must be a string, got 1");
    CHECK(open_error(dir, raw_file(hdr(R"("__metadata__":[],)" + w), 24)) ==
          file + "__metadata__ must be an object of strings, got []");
  }
  SECTION("deep nesting is refused cheaply") {
    const std::string deep = R"({"__metadata__":)" + std::string(100, '[') + std::string(100, ']') + "}";
    CHECK(open_error(dir, raw_file(deep, 0)) == file + "header nests deeper than 16 levels");
  }
  SECTION("a missing file") {
    CHECK(error_of<checkpoint_error>([&] { safetensors_file::open(dir / "none.safetensors"); }) ==
          (dir / "none.safetensors").string() + ": cannot open for reading: No such file or directory");
  }
}

TEST_CASE("a file truncated after open is reported at read, not read short") {
  temp_dir dir("st_shrink");
  const auto path = dir / "s.safetensors";
  const auto v = ramp<float>(1000, 1.0);
  safetensors_writer w;
  w.add<float>("v", {1000}, v);
  w.write(path);
  const auto f = safetensors_file::open(path);
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 100);
  const std::string msg = error_of<checkpoint_error>([&] { f.read_all<float>("v"); });
  CHECK(msg.rfind(path.string() + ": unexpected end of file at byte", 0) == 0);
}

TEST_CASE("export_weights / import_weights: f32 exact, bf16 rounded, name map, errors name the tensor") {
  temp_dir dir("st_weights");
  const std::vector<std::string> names{"embed.weight", "blocks.0.fc1.weight", "blocks.0.fc1.bias"};
  const std::vector<strata::shape> shapes{{5, 4}, {4, 3}, {3}};
  std::vector<float> values(20 + 12 + 3);
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = std::sin(static_cast<float>(i)) * 3.0f;

  strata::export_weights(dir / "f32.safetensors", names, shapes, values);
  CHECK(strata::import_weights(dir / "f32.safetensors", names, shapes) == values);
  const auto f = safetensors_file::open(dir / "f32.safetensors");
  CHECK(f.metadata().at("format") == "pt");
  CHECK(f.info("blocks.0.fc1.weight").shape == std::vector<std::int64_t>{4, 3});

  strata::export_weights(dir / "bf16.safetensors", names, shapes, values, dtype::bf16, {{"format", "strata"}});
  const auto g = safetensors_file::open(dir / "bf16.safetensors");
  CHECK(g.metadata().at("format") == "strata");
  CHECK(g.info("embed.weight").dtype == dtype::bf16);
  const auto back = strata::import_weights(dir / "bf16.safetensors", names, shapes);
  for (std::size_t i = 0; i < values.size(); ++i) CHECK(back[i] == static_cast<float>(strata::bf16(values[i])));

  // Foreign names: the hook maps each param name to the file's name.
  const std::vector<std::string> hf{"model.embed_tokens.weight", "model.layers.0.mlp.up_proj.weight",
                                    "model.layers.0.mlp.up_proj.bias"};
  strata::export_weights(dir / "hf.safetensors", hf, shapes, values);
  auto map = [](std::string_view n) -> std::string {
    for (auto [from, to] :
         {std::pair{"embed.", "model.embed_tokens."}, std::pair{"blocks.0.fc1.", "model.layers.0.mlp.up_proj."},
          std::pair{"blocks.0.fc2.", "model.layers.0.mlp.down_proj."}})
      if (n.starts_with(from)) return to + std::string(n.substr(std::string_view(from).size()));
    return std::string(n);
  };
  CHECK(strata::import_weights(dir / "hf.safetensors", names, shapes, map) == values);

  const std::string file = (dir / "f32.safetensors").string();
  const std::vector<strata::shape> wrong{{5, 4}, {3, 4}, {3}};
  CHECK(error_of<checkpoint_error>([&] { strata::import_weights(dir / "f32.safetensors", names, wrong); }) ==
        file + ": tensor \"blocks.0.fc1.weight\" has shape [4, 3] but the param expects [3, 4]");
  const std::vector<std::string> missing{"embed.weight", "blocks.0.fc2.weight", "blocks.0.fc1.bias"};
  CHECK(error_of<checkpoint_error>([&] { strata::import_weights(dir / "f32.safetensors", missing, shapes); }) ==
        file + ": tensor \"blocks.0.fc2.weight\" is missing");
  CHECK(error_of<checkpoint_error>([&] { strata::import_weights(dir / "hf.safetensors", missing, shapes, map); }) ==
        (dir / "hf.safetensors").string() +
            ": tensor \"model.layers.0.mlp.down_proj.weight\" (param \"blocks.0.fc2.weight\") is missing");
  CHECK(error_of<checkpoint_error>([&] {
          strata::export_weights(dir / "x.safetensors", names, shapes, std::span<const float>(values).first(10));
        }) == (dir / "x.safetensors").string() + ": export_weights: the shapes hold 35 values, given 10");
}
