#include "model/safetensors.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <set>

#include "core/error.h"
#include "core/json_bounded.h"

namespace tf {

using json = nlohmann::json;

namespace {

// The reference implementation refuses headers above 100 MB; a real header is a few hundred KB.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
constexpr const char* kIndexName = "model.safetensors.index.json";
constexpr const char* kSingleName = "model.safetensors";

// A non-negative JSON integer, or false.
bool get_u64(const json& v, uint64_t* out) {
  if (!v.is_number_integer()) return false;
  if (!v.is_number_unsigned() && v.get<int64_t>() < 0) return false;
  *out = v.get<uint64_t>();
  return true;
}

struct Range {
  uint64_t begin, end;
  const std::string* name;
};

}  // namespace

// Layout: [u64 little-endian N][N bytes of JSON header][data section]. Every entry of the
// header is checked against the bytes actually present before a pointer is formed, in this
// order: header length, JSON, each entry (dtype, shape, offsets, byte count, alignment), then
// overlaps between entries. Offsets are relative to the start of the data section.
SafetensorsHeader parse_safetensors(std::span<const uint8_t> bytes, const std::string& path) {
  SafetensorsHeader out;
  const uint8_t* base = bytes.data();
  const uint64_t size = bytes.size();

  // Phase 1: header length.
  if (size < 8) fail("{}: not a safetensors file: {} bytes, shorter than the 8-byte header length", path, size);
  uint64_t n_header = 0;
  for (int i = 7; i >= 0; --i) n_header = (n_header << 8) | base[i];
  if (n_header > kMaxHeaderBytes || n_header > size - 8)
    fail("{}: header length {} does not fit in the file ({} bytes){}", path, n_header, size,
         n_header > kMaxHeaderBytes ? " or exceeds the 100 MB limit" : "");
  const uint64_t data_start = 8 + n_header;
  const uint64_t data_size = size - data_start;

  // Phase 2: the header is one JSON object. nlohmann keeps the last of duplicate keys
  // silently, so the parser callback records them and we refuse the file instead.
  std::set<std::string> seen;
  std::string duplicate;
  auto on_event = [&](int depth, json::parse_event_t event, json& parsed) {
    if (depth == 1 && event == json::parse_event_t::key && !seen.insert(parsed.get<std::string>()).second &&
        duplicate.empty())
      duplicate = parsed.get<std::string>();
    return true;
  };
  const char* text = reinterpret_cast<const char*>(base + 8);
  json header = parse_json_bounded({text, size_t(n_header)}, fmt::format("{}: the {}-byte header", path, n_header),
                                   {.callback = on_event});
  if (!header.is_object()) fail("{}: the header is not a JSON object", path);
  if (!duplicate.empty()) fail("{}: tensor '{}' appears twice in the header", path, duplicate);

  // Phase 3: each entry.
  std::vector<Range> ranges;
  for (const auto& [name, e] : header.items()) {
    if (name == "__metadata__") {
      if (!e.is_object()) fail("{}: __metadata__ is not a JSON object", path);
      for (const auto& [k, v] : e.items()) {
        if (!v.is_string()) fail("{}: __metadata__ value '{}' is not a string", path, k);
        out.metadata[k] = v.get<std::string>();
      }
      continue;
    }
    if (!e.is_object()) fail("{}: tensor '{}': header entry is not a JSON object", path, name);
    TensorInfo t;
    t.name = name;
    t.file = path;

    auto dt = e.find("dtype");
    if (dt == e.end() || !dt->is_string()) fail("{}: tensor '{}': missing or non-string 'dtype'", path, name);
    if (!dtype_from_safetensors(dt->get<std::string>(), &t.dtype))
      fail("{}: tensor '{}': unsupported dtype '{}' (supported: F32, F16, BF16, I8, I32, I64, U8, F8_E4M3)",
           path, name, dt->get<std::string>());

    auto sh = e.find("shape");
    if (sh == e.end() || !sh->is_array())
      fail("{}: tensor '{}': missing or non-list 'shape'", path, name);
    uint64_t numel = 1;
    for (const json& d : *sh) {
      uint64_t dim = 0;
      if (!get_u64(d, &dim) || dim > uint64_t(INT64_MAX))
        fail("{}: tensor '{}': shape {} holds {}, expected non-negative integers", path, name,
             sh->dump(), d.dump());
      if (__builtin_mul_overflow(numel, dim, &numel))
        fail("{}: tensor '{}': shape {} overflows", path, name, sh->dump());
      t.shape.push_back(int64_t(dim));
    }
    uint64_t expected_bytes = 0;
    if (__builtin_mul_overflow(numel, uint64_t(dtype_size(t.dtype)), &expected_bytes))
      fail("{}: tensor '{}': shape {} overflows", path, name, sh->dump());

    auto off = e.find("data_offsets");
    uint64_t begin = 0, end = 0;
    if (off == e.end() || !off->is_array() || off->size() != 2 || !get_u64((*off)[0], &begin) ||
        !get_u64((*off)[1], &end) || begin > end)
      fail("{}: tensor '{}': 'data_offsets' must be [begin, end] with 0 <= begin <= end", path, name);
    if (end > data_size)
      fail("{}: tensor '{}': data_offsets [{}, {}] run past the end of the data section ({} bytes; "
           "the file may be truncated)", path, name, begin, end, data_size);
    if (end - begin != expected_bytes)
      fail("{}: tensor '{}': data_offsets [{}, {}] span {} bytes, but shape {} of {} needs {}", path,
           name, begin, end, end - begin, shape_str(t.shape), dtype_name(t.dtype), expected_bytes);
    if ((data_start + begin) % dtype_size(t.dtype) != 0)
      fail("{}: tensor '{}': data at file offset {} is not aligned to its {}-byte elements", path,
           name, data_start + begin, dtype_size(t.dtype));

    t.data = base + data_start + begin;
    t.nbytes = size_t(expected_bytes);
    auto [it, inserted] = out.tensors.emplace(name, std::move(t));
    TF_ASSERT(inserted);
    if (end > begin) ranges.push_back({begin, end, &it->first});
  }

  // Phase 4: no two tensors share a byte (empty tensors own none). After sorting by begin,
  // an overlap must show between neighbours.
  std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) { return a.begin < b.begin; });
  for (size_t i = 1; i < ranges.size(); ++i) {
    const Range& a = ranges[i - 1];
    const Range& b = ranges[i];
    if (b.begin < a.end)
      fail("{}: tensors '{}' (bytes {}..{}) and '{}' (bytes {}..{}) overlap", path, *a.name, a.begin,
           a.end, *b.name, b.begin, b.end);
  }
  return out;
}

SafetensorsFile::SafetensorsFile(const std::string& path) : file_(std::make_unique<MappedFile>(path)) {
  SafetensorsHeader h =
      load_guarded(path, [&] { return parse_safetensors({file_->data(), file_->size()}, path); });
  tensors_ = std::move(h.tensors);
  metadata_ = std::move(h.metadata);
}

// A single model.safetensors wins over an index, as in transformers. With an index, the
// weight_map decides which shard each tensor comes from; tensors a shard holds but the index
// does not list are not part of the checkpoint.
Checkpoint Checkpoint::open(const std::string& dir) {
  Checkpoint ck;
  ck.dir_ = dir;
  const std::string single = dir + "/" + kSingleName;
  const std::string index_path = dir + "/" + kIndexName;
  if (file_exists(single)) {
    ck.files_.push_back(std::make_unique<SafetensorsFile>(single));
    for (const auto& [name, t] : ck.files_.back()->tensors()) ck.index_[name] = &t;
    return ck;
  }
  if (!file_exists(index_path))
    fail("{}: no {} or {} found (a model folder needs safetensors weights)", dir, kSingleName, kIndexName);

  json idx = load_guarded(index_path, [&] { return parse_json_bounded(read_text_file(index_path), index_path); });
  if (!idx.is_object()) fail("{}: not a JSON object", index_path);
  auto wm = idx.find("weight_map");
  if (wm == idx.end() || !wm->is_object() || wm->empty())
    fail("{}: field 'weight_map' is missing or empty (expected {{tensor name: shard file}})", index_path);

  // Shard names come from an untrusted file: plain file names inside dir only.
  std::map<std::string, SafetensorsFile*> shards;
  for (const auto& [name, v] : wm->items()) {
    if (!v.is_string()) fail("{}: weight_map entry for tensor '{}' is not a file name", index_path, name);
    const std::string shard = v.get<std::string>();
    if (shard.empty() || shard == "." || shard == ".." || shard.find('/') != std::string::npos)
      fail("{}: weight_map entry for tensor '{}' is '{}', expected a file name inside {}", index_path,
           name, shard, dir);
    auto it = shards.find(shard);
    if (it == shards.end()) {
      const std::string shard_path = dir + "/" + shard;
      if (!file_exists(shard_path))
        fail("{}: tensor '{}' is listed in shard '{}', which does not exist ({})", index_path, name,
             shard, shard_path);
      ck.files_.push_back(std::make_unique<SafetensorsFile>(shard_path));
      it = shards.emplace(shard, ck.files_.back().get()).first;
    }
    auto t = it->second->tensors().find(name);
    if (t == it->second->tensors().end())
      fail("{}: tensor '{}' is listed in shard '{}', but {} does not hold it", index_path, name, shard,
           it->second->path());
    ck.index_[name] = &t->second;
  }
  return ck;
}

}  // namespace tf
