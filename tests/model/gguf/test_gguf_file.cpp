// The GGUF reader against a file written by the `gguf` Python package (make_gguf_cases.py,
// run by the build: every metadata type, arrays, strings, alignment 64, tensors of several
// types and ranks) and against broken variants of it and of hand-made files: every field must
// read back as written, every violation must be a tf::Error naming the file and the key or
// tensor at fault.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "model/gguf/gguf_bytes.h"
#include "model/gguf/gguf_file.h"
#include "test_util.h"

namespace tf {
namespace {

using nlohmann::json;
using test::GgufBytes;

std::string cases_path(const std::string& name) { return std::string(TF_GGUF_CASES_DIR) + "/" + name; }

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

template <typename T>
T raw(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// The value of a fixed-size element as the JSON number Python wrote.
json element(GgufType t, const uint8_t* p) {
  switch (t) {
    case GgufType::U8: return raw<uint8_t>(p);
    case GgufType::I8: return raw<int8_t>(p);
    case GgufType::U16: return raw<uint16_t>(p);
    case GgufType::I16: return raw<int16_t>(p);
    case GgufType::U32: return raw<uint32_t>(p);
    case GgufType::I32: return raw<int32_t>(p);
    case GgufType::U64: return raw<uint64_t>(p);
    case GgufType::I64: return raw<int64_t>(p);
    case GgufType::F32: return raw<float>(p);
    case GgufType::F64: return raw<double>(p);
    case GgufType::Bool: return raw<uint8_t>(p) != 0;
    default: ADD_FAILURE() << "not a fixed-size type"; return nullptr;
  }
}

size_t element_size(GgufType t) {
  switch (t) {
    case GgufType::U8: case GgufType::I8: case GgufType::Bool: return 1;
    case GgufType::U16: case GgufType::I16: return 2;
    case GgufType::U32: case GgufType::I32: case GgufType::F32: return 4;
    default: return 8;
  }
}

std::vector<uint8_t> bytes_of(std::string_view s) { return {s.begin(), s.end()}; }

// f32 values in JSON went through Python floats: compare as float32.
void expect_same_number(const json& got, const json& want, GgufType t, const std::string& what) {
  if (t == GgufType::F32) {
    EXPECT_EQ(got.get<float>(), want.get<float>()) << what;
  } else {
    EXPECT_EQ(got, want) << what;
  }
}

class GgufFields : public ::testing::Test {
 protected:
  void SetUp() override { expect_ = test::load_json(cases_path("fields.json")); }
  json expect_;
};

TEST_F(GgufFields, HeaderAndAlignment) {
  const GgufFile f(cases_path("fields.gguf"));
  EXPECT_EQ(f.version(), expect_["version"].get<uint32_t>());
  EXPECT_EQ(f.alignment(), 64u);
  EXPECT_EQ(f.data_offset(), expect_["data_offset"].get<uint64_t>());
  EXPECT_EQ(f.data_offset() % 64, 0u);
  EXPECT_EQ(f.metadata().size(), expect_["n_kv"].get<size_t>());
  EXPECT_EQ(f.get_string("general.architecture"), "llama");
  EXPECT_EQ(f.get_uint("general.alignment"), 64u);
}

TEST_F(GgufFields, EveryMetadataValue) {
  const GgufFile f(cases_path("fields.gguf"));
  for (const json& m : expect_["metadata"]) {
    const std::string key = m["key"];
    SCOPED_TRACE(key);
    const GgufValue* v = f.find(key);
    ASSERT_NE(v, nullptr);
    ASSERT_EQ(int(v->type), m["type"].get<int>());
    if (v->type == GgufType::String) {
      EXPECT_EQ(bytes_of(v->str), m["value"].get<std::vector<uint8_t>>());
    } else if (v->type == GgufType::Array) {
      ASSERT_EQ(int(v->elem_type), m["elem_type"].get<int>());
      ASSERT_EQ(v->count, m["value"].size());
      for (size_t i = 0; i < v->count; ++i) {
        if (v->elem_type == GgufType::String) {
          EXPECT_EQ(bytes_of(v->strings[i]), m["value"][i].get<std::vector<uint8_t>>()) << i;
        } else {
          expect_same_number(element(v->elem_type, v->bytes + i * element_size(v->elem_type)), m["value"][i],
                             v->elem_type, key + "[" + std::to_string(i) + "]");
        }
      }
    } else {
      expect_same_number(element(v->type, v->bytes), m["value"], v->type, key);
    }
  }
  // The typed accessors, and their errors on the wrong type.
  EXPECT_EQ(f.get_uint("test.u8"), 200u);
  EXPECT_EQ(f.get_uint("test.u64"), 18000000000000000000ull);
  EXPECT_EQ(f.get_float("test.f32"), 0.15625);
  EXPECT_EQ(f.get_float("test.f64"), 2.718281828459045);
  EXPECT_EQ(f.opt_bool("test.bool_true"), true);
  EXPECT_EQ(f.opt_bool("test.bool_false"), false);
  EXPECT_EQ(f.opt_bool("test.absent"), std::nullopt);
  EXPECT_EQ(f.get_strings("test.arr_str").size(), 4u);
  EXPECT_EQ(f.get_strings("test.arr_str")[2], "ünïcødé");
  EXPECT_EQ(f.get_ints("test.arr_i32"), (std::vector<int64_t>{-5, 7, 1 << 30}));
  EXPECT_EQ(f.get_floats("test.arr_f32"), (std::vector<float>{1.5f, -0.25f, 3.0e-3f}));
  const std::string path = cases_path("fields.gguf");
  for (auto [key, fn] : std::vector<std::pair<std::string, std::function<void()>>>{
           {"test.string", [&] { f.get_uint("test.string"); }},
           {"test.i8", [&] { f.get_uint("test.i8"); }},
           {"test.u32", [&] { f.get_string("test.u32"); }},
           {"test.arr_f32", [&] { f.get_ints("test.arr_f32"); }},
           {"test.arr_u64", [&] { f.get_ints("test.arr_u64"); }},
           {"test.missing", [&] { f.get_float("test.missing"); }},
           {"test.i32", [&] { f.get_strings("test.i32"); }}}) {
    const std::string msg = test::error_of(fn);
    EXPECT_CONTAINS(msg, path);
    EXPECT_CONTAINS(msg, "metadata '" + key + "'");
  }
}

TEST_F(GgufFields, EveryTensor) {
  const GgufFile f(cases_path("fields.gguf"));
  ASSERT_EQ(f.tensors().size(), expect_["tensors"].size());
  for (const json& e : expect_["tensors"]) {
    const std::string name = e["name"];
    SCOPED_TRACE(name);
    const GgufTensor* t = f.find_tensor(name);
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->ggml_type, e["type"].get<uint32_t>());
    const std::vector<int64_t> ne = e["ne"];
    ASSERT_EQ(t->n_dims, int(ne.size()));
    for (size_t d = 0; d < ne.size(); ++d) EXPECT_EQ(t->ne[d], ne[d]);
    const std::vector<int64_t> shape(ne.rbegin(), ne.rend());
    EXPECT_EQ(t->shape(), shape);
    EXPECT_EQ(t->offset, e["offset"].get<uint64_t>());
    EXPECT_EQ(t->offset % 64, 0u);
    EXPECT_EQ(t->nbytes, e["nbytes"].get<uint64_t>());
    const std::vector<uint8_t> head = e["bytes"];
    ASSERT_GE(t->nbytes, head.size());
    EXPECT_EQ(std::vector<uint8_t>(t->data, t->data + head.size()), head);
  }
  EXPECT_EQ(f.find_tensor("t.absent"), nullptr);
  EXPECT_EQ(f.find_tensor("t.q8_0")->type_name(), "Q8_0");
  EXPECT_EQ(dtype_of_ggml(f.find_tensor("t.q8_0")->ggml_type), DType::Q8_0);
}

// ---- broken files --------------------------------------------------------------------------

constexpr const char* kOrigin = "mutated.gguf";

std::string parse_error(const std::vector<uint8_t>& bytes) {
  return test::error_of([&] { GgufFile f(std::span<const uint8_t>(bytes.data(), bytes.size()), kOrigin); });
}

class GgufMutations : public GgufFields {
 protected:
  void SetUp() override {
    GgufFields::SetUp();
    good_ = read_bytes(cases_path("fields.gguf"));
    ASSERT_EQ(good_.size(), expect_["size"].get<size_t>());
  }
  template <typename T>
  std::vector<uint8_t> patched(size_t at, T v) const {
    std::vector<uint8_t> b = good_;
    std::memcpy(b.data() + at, &v, sizeof(T));
    return b;
  }
  const json& tensor(const std::string& name) const {
    for (const json& t : expect_["tensors"])
      if (t["name"] == name) return t;
    throw std::runtime_error("no tensor " + name);
  }
  std::vector<uint8_t> good_;
};

TEST_F(GgufMutations, TheUnbrokenFileParses) {
  GgufFile f(std::span<const uint8_t>(good_.data(), good_.size()), kOrigin);
  EXPECT_EQ(f.tensors().size(), expect_["tensors"].size());
}

TEST_F(GgufMutations, EveryTruncationBeforeTheLastTensorEnds) {
  uint64_t last_end = 0;
  for (const json& t : expect_["tensors"])
    last_end = std::max(last_end, t["offset"].get<uint64_t>() + t["nbytes"].get<uint64_t>());
  for (size_t n = 0; n < last_end; ++n) {
    const std::vector<uint8_t> cut(good_.begin(), good_.begin() + long(n));
    const std::string msg = parse_error(cut);
    ASSERT_NE(msg.find(kOrigin), std::string::npos) << n << ": " << msg;
  }
}

TEST_F(GgufMutations, Header) {
  std::vector<uint8_t> b = good_;
  b[0] = 'X';
  EXPECT_CONTAINS(parse_error(b), "not a GGUF file");
  EXPECT_CONTAINS(parse_error(patched<uint32_t>(4, 1)), "GGUF version 1 is not supported");
  EXPECT_CONTAINS(parse_error(patched<uint32_t>(4, 4)), "GGUF version 4 is not supported");
  EXPECT_CONTAINS(parse_error(patched<uint32_t>(4, 0x03000000)), "big-endian");
  EXPECT_CONTAINS(parse_error(patched<uint64_t>(8, uint64_t(1) << 62)), "tensor infos cannot fit");
  EXPECT_CONTAINS(parse_error(patched<uint64_t>(16, ~uint64_t(0))), "metadata entries cannot fit");
  // One entry more than the file holds: the reader runs into the tensor infos and fails there.
  EXPECT_CONTAINS(parse_error(patched<uint64_t>(16, expect_["n_kv"].get<uint64_t>() + 1)), kOrigin);
}

TEST_F(GgufMutations, MetadataEntries) {
  const size_t at = expect_["first_key_at"];  // u64 key length, key, u32 type, value
  const std::string key = "general.architecture";
  EXPECT_CONTAINS(parse_error(patched<uint64_t>(at, uint64_t(1) << 61)), "runs past the end of the file");
  EXPECT_CONTAINS(parse_error(patched<uint64_t>(at, 0)), "the key is empty");
  std::string msg = parse_error(patched<uint32_t>(at + 8 + key.size(), 13));
  EXPECT_CONTAINS(msg, "metadata 'general.architecture': unknown value type 13");
  EXPECT_CONTAINS(parse_error(patched<uint32_t>(at + 8 + key.size(), 0xffffffffu)), "unknown value type 4294967295");
  // The string value's length.
  EXPECT_CONTAINS(parse_error(patched<uint64_t>(at + 8 + key.size() + 4, uint64_t(1) << 62)),
                  "metadata 'general.architecture': the string of 4611686018427387904 bytes runs past the end");
}

TEST_F(GgufMutations, TensorInfos) {
  const json& q8 = tensor("t.q8_0");
  const json& t0 = tensor("t.f32_2d");
  const json& t1 = tensor("t.f16_1d");
  const uint64_t data = expect_["data_offset"];
  std::string msg = parse_error(patched<uint32_t>(q8["at_type"], 4));
  EXPECT_CONTAINS(msg, "tensor 't.q8_0': unknown ggml type 4");
  EXPECT_CONTAINS(parse_error(patched<uint32_t>(q8["at_type"], 1000)), "unknown ggml type 1000");
  EXPECT_CONTAINS(parse_error(patched<uint32_t>(q8["at_n_dims"], 0)), "tensor 't.q8_0': 0 dimensions");
  EXPECT_CONTAINS(parse_error(patched<uint32_t>(q8["at_n_dims"], 5)), "tensor 't.q8_0': 5 dimensions");
  EXPECT_CONTAINS(parse_error(patched<uint64_t>(q8["at_ne"], 33)), "rows of 33 elements are not whole Q8_0 blocks");
  EXPECT_CONTAINS(parse_error(patched<uint64_t>(q8["at_ne"].get<size_t>() + 8, uint64_t(1) << 40)),
                  "tensor 't.q8_0': its");  // far past the end of the file
  EXPECT_CONTAINS(parse_error(patched<uint64_t>(q8["at_ne"], uint64_t(1) << 62)), "tensor 't.q8_0'");
  EXPECT_CONTAINS(parse_error(patched<uint64_t>(t0["at_ne"], ~uint64_t(0))), "tensor 't.f32_2d': dimension 0");
  EXPECT_CONTAINS(parse_error(patched<uint64_t>(t0["at_ne"], uint64_t(1) << 62)), "more than 2^63 elements");
  // Offsets: misaligned, past the end, overlapping another tensor.
  const uint64_t rel1 = t1["offset"].get<uint64_t>() - data;
  EXPECT_CONTAINS(parse_error(patched<uint64_t>(t1["at_offset"], rel1 + 4)),
                  "tensor 't.f16_1d': data offset " + std::to_string(rel1 + 4) + " is not a multiple of the alignment 64");
  EXPECT_CONTAINS(parse_error(patched<uint64_t>(t1["at_offset"], uint64_t(good_.size()))), "run past the end of the file");
  EXPECT_CONTAINS(parse_error(patched<uint64_t>(t1["at_offset"], ~uint64_t(63))), "run past the end of the file");
  msg = parse_error(patched<uint64_t>(t1["at_offset"], t0["offset"].get<uint64_t>() - data));
  EXPECT_CONTAINS(msg, "overlap");
  EXPECT_CONTAINS(msg, "'t.f32_2d'");
  EXPECT_CONTAINS(msg, "'t.f16_1d'");
}

// ---- hand-made files -------------------------------------------------------------------------

std::string error_of_bytes(const GgufBytes& g) { return parse_error(g.bytes()); }

TEST(GgufHandMade, DuplicatesNestingBoolsAlignment) {
  EXPECT_CONTAINS(error_of_bytes(GgufBytes().header(0, 2).kv_u32("a.b", 1).kv_u32("a.b", 2)),
                  "metadata 'a.b': the key appears twice");
  // Nested array: array of arrays.
  EXPECT_CONTAINS(error_of_bytes(GgufBytes().header(0, 1).str("k").u32(9).u32(9).u64(1)),
                  "metadata 'k': nested arrays are not supported");
  EXPECT_CONTAINS(error_of_bytes(GgufBytes().header(0, 1).str("k").u32(9).u32(77).u64(1)),
                  "unknown array element type 77");
  EXPECT_CONTAINS(error_of_bytes(GgufBytes().header(0, 1).str("k").u32(7).raw("\x02")), "a bool holds 2");
  EXPECT_CONTAINS(error_of_bytes(GgufBytes().header(0, 1).str("k").u32(9).u32(7).u64(2).raw("\x01\x05")),
                  "a bool holds 5");
  EXPECT_CONTAINS(error_of_bytes(GgufBytes().header(0, 1).str("k").u32(9).u32(5).u64(uint64_t(1) << 60)),
                  "metadata 'k': an array of 1152921504606846976 i32 elements");
  EXPECT_CONTAINS(error_of_bytes(GgufBytes().header(0, 1).str("k").u32(9).u32(8).u64(uint64_t(1) << 60)),
                  "metadata 'k': an array of 1152921504606846976 strings cannot fit");
  for (uint32_t bad : {0u, 3u, 48u}) {
    EXPECT_CONTAINS(error_of_bytes(GgufBytes().header(0, 1).kv_u32("general.alignment", bad)),
                    "metadata 'general.alignment': is " + std::to_string(bad) + " (expected a power of two)");
  }
  EXPECT_CONTAINS(error_of_bytes(GgufBytes().header(0, 1).kv_str("general.alignment", "32")),
                  "metadata 'general.alignment': has type string (expected u32)");
  EXPECT_CONTAINS(error_of_bytes(GgufBytes().header(0, 1).str(std::string(70000, 'k')).u32(4).u32(1)),
                  "the key has 70000 bytes");
}

TEST(GgufHandMade, TensorNamesAndEmptyValues) {
  // Two tensors of the same name; a name of 64 bytes (ggml keeps 63); an empty name.
  EXPECT_CONTAINS(error_of_bytes(GgufBytes().header(2, 0).tensor("w", {4}, 0, 0).tensor("w", {4}, 0, 32).pad_to(32).zeros(64)),
                  "tensor 'w': the name appears twice");
  EXPECT_CONTAINS(error_of_bytes(GgufBytes().header(1, 0).tensor(std::string(64, 'n'), {4}, 0, 0).pad_to(32).zeros(32)),
                  "the name has 64 bytes (ggml allows at most 63)");
  EXPECT_CONTAINS(error_of_bytes(GgufBytes().header(1, 0).tensor("", {4}, 0, 0).pad_to(32).zeros(32)), "the name is empty");
  // Valid edge cases: an empty array, an empty string, a zero-element tensor, no tensors at all.
  GgufBytes ok;
  ok.header(2, 2).str("empty.arr").u32(9).u32(4).u64(0).kv_str("empty.str", "")
      .tensor("zero", {0, 3}, 0, 0).tensor("w", {8}, 1, 0).pad_to(32).zeros(16);
  const GgufFile f(std::span<const uint8_t>(ok.bytes().data(), ok.bytes().size()), kOrigin);
  EXPECT_EQ(f.find("empty.arr")->count, 0u);
  EXPECT_EQ(f.get_ints("empty.arr").size(), 0u);
  EXPECT_EQ(f.get_string("empty.str"), "");
  EXPECT_EQ(f.find_tensor("zero")->nbytes, 0u);
  EXPECT_EQ(f.find_tensor("w")->nbytes, 16u);
  const GgufBytes none = GgufBytes().header(0, 0);
  EXPECT_EQ(GgufFile(std::span<const uint8_t>(none.bytes().data(), none.bytes().size()), kOrigin).tensors().size(), 0u);
}

class GgufModelPath : public test::TempDirTest {};

TEST_F(GgufModelPath, FileFolderOrNeither) {
  namespace fs = std::filesystem;
  const std::string dir = dir_.string();
  EXPECT_EQ(find_gguf_model(dir), std::nullopt);  // empty folder: not a GGUF model
  EXPECT_EQ(find_gguf_model(dir + "/absent.gguf"), std::nullopt);
  std::ofstream(dir_ / "a.gguf") << "x";
  EXPECT_EQ(find_gguf_model(dir), dir + "/a.gguf");
  EXPECT_EQ(find_gguf_model(dir + "/a.gguf"), dir + "/a.gguf");
  std::ofstream(dir_ / "b.gguf") << "x";
  EXPECT_CONTAINS(test::error_of([&] { find_gguf_model(dir); }), "holds 2 .gguf files");
  std::ofstream(dir_ / "model.safetensors") << "x";
  EXPECT_EQ(find_gguf_model(dir), std::nullopt);  // a Hugging Face folder
  // A file that is not GGUF is refused by the reader, naming it.
  EXPECT_CONTAINS(test::error_of([&] { GgufFile g(dir + "/model.safetensors"); }), "not a GGUF file");
}

}  // namespace
}  // namespace tf
