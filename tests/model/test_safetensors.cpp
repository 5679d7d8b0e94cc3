// safetensors loading: the bundled models, a sharded checkpoint built from tiny-main, and one
// malformed file per validation rule, each of which must be refused with a tf::Error that
// names the file (and the tensor, where one is at fault).
#include "model/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "model/safetensors_writer.h"
#include "test_util.h"

namespace tf {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// ---- helpers --------------------------------------------------------------------------------

using test::RawTensor;
using test::u64_le;
using test::write_raw;
using test::write_safetensors;

// Pads a header with spaces so that the data section starts 8-aligned.
std::string padded(std::string header) {
  while ((8 + header.size()) % 8) header.push_back(' ');
  return header;
}

RawTensor raw_of(const TensorInfo& t) {
  return {t.name, std::string(dtype_name(t.dtype)), t.shape,
          std::string(reinterpret_cast<const char*>(t.data), t.nbytes)};
}

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

using test::error_of;

class SafetensorsFiles : public test::TempDirTest {
 protected:

  // Opens path and returns the error message, which must name the file.
  std::string open_error(const fs::path& p) {
    std::string msg = error_of([&] { SafetensorsFile f(p.string()); });
    EXPECT_CONTAINS(msg, p.string());
    return msg;
  }
};

// ---- bundled models -------------------------------------------------------------------------

// Reads the 8-byte header length of a file.
uint64_t header_len(const std::string& path) {
  std::string b = read_bytes(path).substr(0, 8);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | uint8_t(b[i]);
  return n;
}

TEST(Safetensors, TinyMain) {
  const std::string path = test::model_dir("tiny-main") + "/model.safetensors";
  SafetensorsFile f(path);
  EXPECT_EQ(f.path(), path);
  ASSERT_EQ(f.tensors().size(), 57u);
  EXPECT_EQ(f.metadata().at("format"), "pt");

  const TensorInfo& emb = f.tensors().at("model.embed_tokens.weight");
  EXPECT_EQ(emb.dtype, DType::BF16);
  EXPECT_EQ(emb.shape, (std::vector<int64_t>{8192, 256}));
  EXPECT_EQ(emb.nbytes, 8192u * 256 * 2);
  EXPECT_EQ(emb.file, path);
  TensorView v = emb.view();
  EXPECT_EQ(v.n_dims, 2);
  EXPECT_EQ(v.dim(0), 8192);
  EXPECT_EQ(v.dim(1), 256);
  EXPECT_EQ(v.nbytes(), emb.nbytes);
  EXPECT_EQ(v.data, emb.data);

  EXPECT_EQ(f.tensors().at("lm_head.weight").shape, (std::vector<int64_t>{8192, 256}));
  EXPECT_EQ(f.tensors().at("model.norm.weight").shape, std::vector<int64_t>{256});
  for (int il = 0; il < 6; ++il) {
    const std::string p = "model.layers." + std::to_string(il) + ".";
    EXPECT_EQ(f.tensors().at(p + "self_attn.q_proj.weight").shape, (std::vector<int64_t>{256, 256}));
    EXPECT_EQ(f.tensors().at(p + "self_attn.k_proj.weight").shape, (std::vector<int64_t>{128, 256}));
    EXPECT_EQ(f.tensors().at(p + "self_attn.v_proj.weight").shape, (std::vector<int64_t>{128, 256}));
    EXPECT_EQ(f.tensors().at(p + "self_attn.o_proj.weight").shape, (std::vector<int64_t>{256, 256}));
    EXPECT_EQ(f.tensors().at(p + "mlp.gate_proj.weight").shape, (std::vector<int64_t>{576, 256}));
    EXPECT_EQ(f.tensors().at(p + "mlp.up_proj.weight").shape, (std::vector<int64_t>{576, 256}));
    EXPECT_EQ(f.tensors().at(p + "mlp.down_proj.weight").shape, (std::vector<int64_t>{256, 576}));
    EXPECT_EQ(f.tensors().at(p + "input_layernorm.weight").shape, std::vector<int64_t>{256});
    EXPECT_EQ(f.tensors().at(p + "post_attention_layernorm.weight").shape, std::vector<int64_t>{256});
  }

  // The tensors tile the data section exactly: the pointers and sizes are the file's bytes.
  const uint64_t data_start = 8 + header_len(path);
  size_t total = 0;
  for (const auto& [name, t] : f.tensors()) total += t.nbytes;
  EXPECT_EQ(data_start + total, fs::file_size(path));
  EXPECT_EQ(fs::file_size(path), 16'069'184u);

  // The pointer reads the right bytes: compare one tensor with a plain file read.
  const std::string all = read_bytes(path);
  const TensorInfo& norm = f.tensors().at("model.norm.weight");
  const uint8_t* first = nullptr;
  for (const auto& [name, t] : f.tensors()) if (!first || t.data < first) first = t.data;
  const size_t off = size_t(norm.data - first) + data_start;
  EXPECT_EQ(std::memcmp(all.data() + off, norm.data, norm.nbytes), 0);
  // Trained RMSNorm gains are finite and not all zero.
  const uint16_t* g = norm.view().as<uint16_t>();
  double sum_abs = 0;
  for (int i = 0; i < 256; ++i) {
    ASSERT_TRUE(std::isfinite(bf16_to_f32(g[i])));
    sum_abs += std::fabs(bf16_to_f32(g[i]));
  }
  EXPECT_GT(sum_abs, 1.0);
}

TEST(Safetensors, AllBundledModelsOpen) {
  struct Case { const char* dir; size_t n_tensors; DType dtype; bool has_lm_head; };
  for (const Case& c : {Case{"tiny-main", 57, DType::BF16, true}, Case{"tiny-draft", 29, DType::BF16, false},
                        Case{"parity/llama-mha", 21, DType::F32, true}, Case{"parity/qwen2", 26, DType::F32, false}}) {
    Checkpoint ck = Checkpoint::open(test::model_dir(c.dir));
    EXPECT_EQ(ck.all().size(), c.n_tensors) << c.dir;
    EXPECT_EQ(ck.origin(), test::model_dir(c.dir));
    for (const auto& [name, t] : ck.all()) EXPECT_EQ(t->dtype, c.dtype) << c.dir << " " << name;
    EXPECT_EQ(ck.find("lm_head.weight") != nullptr, c.has_lm_head) << c.dir;
    EXPECT_EQ(ck.get("model.embed_tokens.weight").shape[0], 8192) << c.dir;
  }
  Checkpoint q = Checkpoint::open(test::model_dir("parity/qwen2"));
  EXPECT_EQ(q.get("model.layers.1.self_attn.q_proj.bias").shape, std::vector<int64_t>{128});
  EXPECT_EQ(q.get("model.layers.1.self_attn.k_proj.bias").shape, std::vector<int64_t>{64});
  // Random N(0, 0.5^2) biases in float32: finite, not all zero.
  TensorView b = q.get("model.layers.1.self_attn.q_proj.bias").view();
  double sum_abs = 0;
  for (int i = 0; i < 128; ++i) sum_abs += std::fabs(b.as<float>()[i]);
  EXPECT_GT(sum_abs, 10.0);
  EXPECT_TRUE(std::isfinite(sum_abs));
}

TEST(Safetensors, GetNamesMissingTensor) {
  Checkpoint ck = Checkpoint::open(test::model_dir("tiny-draft"));
  EXPECT_EQ(ck.find("lm_head.weight"), nullptr);
  std::string msg = error_of([&] { ck.get("lm_head.weight"); });
  EXPECT_CONTAINS(msg, "'lm_head.weight'");
  EXPECT_CONTAINS(msg, test::model_dir("tiny-draft"));
}

// ---- sharded checkpoints --------------------------------------------------------------------

class SafetensorsSharded : public SafetensorsFiles {
 protected:
  // Splits tiny-main over two shard files (alternating tensors) and writes the index.
  void write_split(const SafetensorsFile& src) {
    std::vector<RawTensor> a, b;
    json wm = json::object();
    int i = 0;
    for (const auto& [name, t] : src.tensors()) {
      const bool first = i++ % 2 == 0;
      (first ? a : b).push_back(raw_of(t));
      wm[name] = first ? kShard1 : kShard2;
    }
    write_safetensors(dir_ / kShard1, a);
    write_safetensors(dir_ / kShard2, b);
    write_index(wm);
  }
  void write_index(const json& weight_map) {
    std::ofstream(dir_ / "model.safetensors.index.json")
        << json{{"metadata", {{"total_size", 16063000}}}, {"weight_map", weight_map}}.dump(2);
  }
  static constexpr const char* kShard1 = "model-00001-of-00002.safetensors";
  static constexpr const char* kShard2 = "model-00002-of-00002.safetensors";
};

TEST_F(SafetensorsSharded, LoadsIdenticalBytes) {
  SafetensorsFile src(test::model_dir("tiny-main") + "/model.safetensors");
  write_split(src);
  Checkpoint ck = Checkpoint::open(dir_.string());
  ASSERT_EQ(ck.all().size(), 57u);
  int n_in_shard1 = 0;
  for (const auto& [name, t] : src.tensors()) {
    const TensorInfo& s = ck.get(name);
    EXPECT_EQ(s.dtype, t.dtype) << name;
    EXPECT_EQ(s.shape, t.shape) << name;
    ASSERT_EQ(s.nbytes, t.nbytes) << name;
    EXPECT_EQ(std::memcmp(s.data, t.data, t.nbytes), 0) << name;
    EXPECT_NE(s.data, t.data) << name;  // really read from the shard, not the original
    n_in_shard1 += s.file == (dir_ / kShard1).string();
  }
  EXPECT_EQ(n_in_shard1, 29);  // 57 tensors alternate: 29 + 28
}

TEST_F(SafetensorsSharded, MissingShardFile) {
  SafetensorsFile src(test::model_dir("tiny-main") + "/model.safetensors");
  write_split(src);
  fs::remove(dir_ / kShard2);
  std::string msg = error_of([&] { Checkpoint::open(dir_.string()); });
  EXPECT_CONTAINS(msg, "model.safetensors.index.json");
  EXPECT_CONTAINS(msg, kShard2);
  EXPECT_CONTAINS(msg, "does not exist");
}

TEST_F(SafetensorsSharded, TensorMissingFromItsShard) {
  SafetensorsFile src(test::model_dir("tiny-main") + "/model.safetensors");
  write_split(src);
  // Rewrite shard 1 without its first tensor; the index still lists it there.
  const std::string dropped = src.tensors().begin()->first;
  std::vector<RawTensor> a;
  int i = 0;
  for (const auto& [name, t] : src.tensors()) {
    if (i++ % 2 == 0 && name != dropped) a.push_back(raw_of(t));
  }
  ASSERT_EQ(a.size(), 28u);
  write_safetensors(dir_ / kShard1, a);
  std::string msg = error_of([&] { Checkpoint::open(dir_.string()); });
  EXPECT_CONTAINS(msg, "'" + dropped + "'");
  EXPECT_CONTAINS(msg, kShard1);
}

TEST_F(SafetensorsSharded, BadShardIsValidated) {
  SafetensorsFile src(test::model_dir("tiny-main") + "/model.safetensors");
  write_split(src);
  std::string bytes = read_bytes(dir_ / kShard2);
  std::ofstream(dir_ / kShard2, std::ios::binary) << bytes.substr(0, bytes.size() - 100);
  std::string msg = error_of([&] { Checkpoint::open(dir_.string()); });
  EXPECT_CONTAINS(msg, (dir_ / kShard2).string());
  EXPECT_CONTAINS(msg, "tensor '");
}

TEST_F(SafetensorsSharded, ShardNameOutsideFolder) {
  write_index(json{{"model.norm.weight", "../model.safetensors"}});
  std::string msg = error_of([&] { Checkpoint::open(dir_.string()); });
  EXPECT_CONTAINS(msg, "../model.safetensors");
  EXPECT_CONTAINS(msg, "'model.norm.weight'");
}

TEST_F(SafetensorsSharded, IndexNotJsonOrNoWeightMap) {
  std::ofstream(dir_ / "model.safetensors.index.json") << "{\"weight_map\": ";
  std::string msg = error_of([&] { Checkpoint::open(dir_.string()); });
  EXPECT_CONTAINS(msg, "model.safetensors.index.json");
  std::ofstream(dir_ / "model.safetensors.index.json") << "{\"metadata\": {}}";
  msg = error_of([&] { Checkpoint::open(dir_.string()); });
  EXPECT_CONTAINS(msg, "weight_map");
}

TEST_F(SafetensorsFiles, FolderWithoutWeights) {
  std::string msg = error_of([&] { Checkpoint::open(dir_.string()); });
  EXPECT_CONTAINS(msg, dir_.string());
  EXPECT_CONTAINS(msg, "model.safetensors");
  EXPECT_CONTAINS(msg, "model.safetensors.index.json");
}

// ---- malformed files ------------------------------------------------------------------------

TEST_F(SafetensorsFiles, TruncatedInData) {
  const std::string bytes = read_bytes(test::model_dir("tiny-main") + "/model.safetensors");
  const fs::path p = dir_ / "model.safetensors";
  std::ofstream(p, std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  std::string msg = open_error(p);
  EXPECT_CONTAINS(msg, "tensor '");
  EXPECT_CONTAINS(msg, "truncated");
  // And through the folder API.
  msg = error_of([&] { Checkpoint::open(dir_.string()); });
  EXPECT_CONTAINS(msg, p.string());
}

TEST_F(SafetensorsFiles, TruncatedInHeader) {
  const std::string bytes = read_bytes(test::model_dir("tiny-main") + "/model.safetensors");
  const fs::path p = dir_ / "x.safetensors";
  std::ofstream(p, std::ios::binary) << bytes.substr(0, 1000);
  EXPECT_CONTAINS(open_error(p), "header length");
}

TEST_F(SafetensorsFiles, EmptyFile) {
  const fs::path p = dir_ / "empty.safetensors";
  std::ofstream(p, std::ios::binary).flush();
  ASSERT_EQ(fs::file_size(p), 0u);
  EXPECT_CONTAINS(open_error(p), "0 bytes");
}

TEST_F(SafetensorsFiles, ShorterThanHeaderLength) {
  const fs::path p = dir_ / "short.safetensors";
  std::ofstream(p, std::ios::binary) << "abc";
  EXPECT_CONTAINS(open_error(p), "3 bytes");
}

TEST_F(SafetensorsFiles, HeaderLengthLargerThanFile) {
  const fs::path p = dir_ / "big.safetensors";
  std::ofstream(p, std::ios::binary) << u64_le(1000) << "{}";
  std::string msg = open_error(p);
  EXPECT_CONTAINS(msg, "header length 1000");
  std::ofstream(p, std::ios::binary) << u64_le(~0ull) << "{}";
  open_error(p);
}

TEST_F(SafetensorsFiles, HeaderNotJson) {
  const fs::path p = dir_ / "bad.safetensors";
  write_raw(p, "hello world");
  EXPECT_CONTAINS(open_error(p), "not valid JSON");
  write_raw(p, "[1, 2, 3]");
  EXPECT_CONTAINS(open_error(p), "not a JSON object");
}

TEST_F(SafetensorsFiles, OffsetsPastTheEnd) {
  const fs::path p = dir_ / "past.safetensors";
  write_raw(p, R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})", std::string(8, '\0'));
  std::string msg = open_error(p);
  EXPECT_CONTAINS(msg, "tensor 'w'");
  EXPECT_CONTAINS(msg, "[0, 16]");
}

TEST_F(SafetensorsFiles, OverlappingTensors) {
  const fs::path p = dir_ / "overlap.safetensors";
  std::string h = R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},)"
                  R"( "b": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}})";
  write_raw(p, padded(h), std::string(24, '\0'));
  std::string msg = open_error(p);
  EXPECT_CONTAINS(msg, "'a'");
  EXPECT_CONTAINS(msg, "'b'");
  EXPECT_CONTAINS(msg, "overlap");
}

TEST_F(SafetensorsFiles, AdjacentAndEmptyTensorsAreFine) {
  const fs::path p = dir_ / "ok.safetensors";
  write_safetensors(p, {{"a", "F32", {2}, std::string(8, '\1')},
                        {"b", "F32", {2}, std::string(8, '\2')},
                        {"empty", "F32", {0, 3}, ""},
                        {"ids", "I32", {1}, std::string(4, '\3')},
                        {"scalar", "F32", {}, std::string(4, '\4')}});
  SafetensorsFile f(p.string());
  ASSERT_EQ(f.tensors().size(), 5u);
  EXPECT_EQ(f.tensors().at("a").data[0], 1);
  EXPECT_EQ(f.tensors().at("b").data[0], 2);
  EXPECT_EQ(f.tensors().at("empty").nbytes, 0u);
  EXPECT_EQ(f.tensors().at("empty").view().numel(), 0);
  EXPECT_EQ(f.tensors().at("ids").dtype, DType::I32);  // parsed; weights validation flags it
  EXPECT_EQ(f.tensors().at("scalar").view().numel(), 1);
  EXPECT_EQ(f.tensors().at("scalar").view().n_dims, 0);
}

TEST_F(SafetensorsFiles, WrongByteCountForShape) {
  const fs::path p = dir_ / "count.safetensors";
  write_raw(p, R"({"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 12]}})", std::string(16, '\0'));
  std::string msg = open_error(p);
  EXPECT_CONTAINS(msg, "tensor 'w'");
  EXPECT_CONTAINS(msg, "needs 16");
}

TEST_F(SafetensorsFiles, UnknownDtype) {
  const fs::path p = dir_ / "dtype.safetensors";
  write_raw(p, R"({"w": {"dtype": "F64", "shape": [2], "data_offsets": [0, 16]}})", std::string(16, '\0'));
  std::string msg = open_error(p);
  EXPECT_CONTAINS(msg, "tensor 'w'");
  EXPECT_CONTAINS(msg, "'F64'");
}

TEST_F(SafetensorsFiles, BadEntries) {
  const fs::path p = dir_ / "entries.safetensors";
  const std::string data(16, '\0');
  struct Case { std::string header; std::string expect; };
  const Case cases[] = {
      {R"({"w": {"shape": [4], "data_offsets": [0, 16]}})", "'dtype'"},
      {R"({"w": {"dtype": "F32", "shape": [-4], "data_offsets": [0, 16]}})", "non-negative"},
      {R"({"w": {"dtype": "F32", "shape": [4.5], "data_offsets": [0, 16]}})", "non-negative"},
      {R"({"w": {"dtype": "F32", "shape": "4", "data_offsets": [0, 16]}})", "'shape'"},
      {R"({"w": {"dtype": "F32", "shape": [4]}})", "data_offsets"},
      {R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [16, 0]}})", "data_offsets"},
      {R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16, 32]}})", "data_offsets"},
      {R"({"w": {"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 16]}})", "overflow"},
      {R"({"w": [1, 2]})", "not a JSON object"},
      {R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, "w": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}})", "twice"},
  };
  for (const Case& c : cases) {
    write_raw(p, padded(c.header), data);
    std::string msg = open_error(p);
    EXPECT_CONTAINS(msg, "'w'");
    EXPECT_CONTAINS(msg, c.expect);
  }
}

TEST_F(SafetensorsFiles, MisalignedData) {
  const fs::path p = dir_ / "align.safetensors";
  write_raw(p, padded(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [1, 5]}})"), std::string(8, '\0'));
  std::string msg = open_error(p);
  EXPECT_CONTAINS(msg, "tensor 'w'");
  EXPECT_CONTAINS(msg, "aligned");
}

TEST_F(SafetensorsFiles, BadMetadata) {
  const fs::path p = dir_ / "meta.safetensors";
  write_raw(p, R"({"__metadata__": {"format": 1}})");
  EXPECT_CONTAINS(open_error(p), "__metadata__");
}

TEST_F(SafetensorsFiles, TooManyDimsForAView) {
  const fs::path p = dir_ / "dims.safetensors";
  write_safetensors(p, {{"w", "F32", {1, 1, 1, 1, 2}, std::string(8, '\0')}});
  SafetensorsFile f(p.string());
  std::string msg = error_of([&] { f.tensors().at("w").view(); });
  EXPECT_CONTAINS(msg, "'w'");
  EXPECT_CONTAINS(msg, "5 dimensions");
}

TEST_F(SafetensorsFiles, MissingFile) {
  std::string msg = error_of([&] { SafetensorsFile f((dir_ / "nope.safetensors").string()); });
  EXPECT_CONTAINS(msg, (dir_ / "nope.safetensors").string());
}

}  // namespace
}  // namespace tf
