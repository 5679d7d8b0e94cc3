#include "model/gguf/gguf_file.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <filesystem>
#include <limits>

#include <fmt/ranges.h>

namespace tf {

static_assert(std::endian::native == std::endian::little, "GGUF values are read as host integers");

namespace {

constexpr uint64_t kMaxKeyBytes = 65535;  // the GGUF specification's limit on a key
constexpr uint64_t kMaxNameBytes = 63;    // ggml's GGML_MAX_NAME (64) less the terminating NUL
constexpr uint32_t kMaxDims = 4;          // GGML_MAX_DIMS
// The fewest bytes one metadata entry (u64 key length, a 1-byte key, u32 type, a 1-byte value)
// and one tensor info (u64 name length, a 1-byte name, u32 n_dims, one u64 dim, u32 type,
// u64 offset) can take: counts larger than the bytes left allow are refused up front.
constexpr uint64_t kMinEntryBytes = 8 + 1 + 4 + 1;
constexpr uint64_t kMinTensorInfoBytes = 8 + 1 + 4 + 8 + 4 + 8;

constexpr GgmlTypeInfo kGgmlTypes[] = {
    {0, "F32", 1, 4},        {1, "F16", 1, 2},        {2, "Q4_0", 32, 18},     {3, "Q4_1", 32, 20},
    {6, "Q5_0", 32, 22},     {7, "Q5_1", 32, 24},     {8, "Q8_0", 32, 34},     {9, "Q8_1", 32, 40},
    {10, "Q2_K", 256, 84},   {11, "Q3_K", 256, 110},  {12, "Q4_K", 256, 144},  {13, "Q5_K", 256, 176},
    {14, "Q6_K", 256, 210},  {15, "Q8_K", 256, 292},  {16, "IQ2_XXS", 256, 66}, {17, "IQ2_XS", 256, 74},
    {18, "IQ3_XXS", 256, 98}, {19, "IQ1_S", 256, 50}, {20, "IQ4_NL", 32, 18},  {21, "IQ3_S", 256, 110},
    {22, "IQ2_S", 256, 82},  {23, "IQ4_XS", 256, 136}, {24, "I8", 1, 1},       {25, "I16", 1, 2},
    {26, "I32", 1, 4},       {27, "I64", 1, 8},       {28, "F64", 1, 8},       {29, "IQ1_M", 256, 56},
    {30, "BF16", 1, 2},      {34, "TQ1_0", 256, 54},  {35, "TQ2_0", 256, 66},  {39, "MXFP4", 32, 17},
};

size_t scalar_size(GgufType t) {
  switch (t) {
    case GgufType::U8: case GgufType::I8: case GgufType::Bool: return 1;
    case GgufType::U16: case GgufType::I16: return 2;
    case GgufType::U32: case GgufType::I32: case GgufType::F32: return 4;
    case GgufType::U64: case GgufType::I64: case GgufType::F64: return 8;
    case GgufType::String: case GgufType::Array: return 0;
  }
  return 0;
}

bool is_integer(GgufType t) {
  return t == GgufType::U8 || t == GgufType::I8 || t == GgufType::U16 || t == GgufType::I16 ||
         t == GgufType::U32 || t == GgufType::I32 || t == GgufType::U64 || t == GgufType::I64;
}

template <typename T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// An integer element as a signed 128-bit value, so both u64 and i64 fit.
__int128 load_int(GgufType t, const uint8_t* p) {
  switch (t) {
    case GgufType::U8: return load<uint8_t>(p);
    case GgufType::I8: return load<int8_t>(p);
    case GgufType::U16: return load<uint16_t>(p);
    case GgufType::I16: return load<int16_t>(p);
    case GgufType::U32: return load<uint32_t>(p);
    case GgufType::I32: return load<int32_t>(p);
    case GgufType::U64: return load<uint64_t>(p);
    case GgufType::I64: return load<int64_t>(p);
    default: TF_ASSERT(false, "not an integer type"); return 0;
  }
}

// Names from the file in error messages: control and non-ASCII bytes escaped, cut at 80.
std::string printable(std::string_view s) {
  std::string out;
  size_t i = 0;
  for (; i < s.size() && out.size() < 80; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f) {
      out += char(c);
    } else {
      out += fmt::format("\\x{:02x}", c);
    }
  }
  if (i < s.size()) out += "...";
  return out;
}

bool valid_type(uint32_t t) { return t <= uint32_t(GgufType::F64); }

// Sequential reads from the file, each bounds-checked; `where` names what is being read.
class Reader {
 public:
  Reader(const uint8_t* base, uint64_t size, const std::string& path) : base_(base), size_(size), path_(path) {}

  std::string where = "header";

  template <typename... Args>
  [[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) const {
    tf::fail("{}: {}: {}", path_, where, fmt::format(f, std::forward<Args>(args)...));
  }
  uint64_t pos() const { return pos_; }
  uint64_t left() const { return size_ - pos_; }

  const uint8_t* take(uint64_t n, std::string_view what) {
    if (n > left())
      fail("{} needs {} bytes at offset {}, but the file ends at {} (truncated?)", what, n, pos_, size_);
    const uint8_t* p = base_ + pos_;
    pos_ += n;
    return p;
  }
  template <typename T>
  T read(std::string_view what) { return load<T>(take(sizeof(T), what)); }

  std::string_view string(std::string_view what) {
    const uint64_t n = read<uint64_t>(what);
    if (n > left()) fail("{} of {} bytes runs past the end of the file ({} bytes left)", what, n, left());
    return {reinterpret_cast<const char*>(take(n, what)), size_t(n)};
  }

  GgufValue value(GgufType type) {
    GgufValue v;
    v.type = type;
    if (type == GgufType::String) {
      v.str = string("the string");
    } else if (type == GgufType::Array) {
      array(v);
    } else {
      v.bytes = take(scalar_size(type), "the value");
      if (type == GgufType::Bool) check_bools(v.bytes, 1);
    }
    return v;
  }

 private:
  void array(GgufValue& v) {
    const uint32_t et = read<uint32_t>("the array element type");
    if (!valid_type(et)) fail("unknown array element type {}", et);
    v.elem_type = GgufType(et);
    if (v.elem_type == GgufType::Array) fail("nested arrays are not supported");
    v.count = read<uint64_t>("the array length");
    if (v.elem_type == GgufType::String) {
      if (v.count > left() / 8)
        fail("an array of {} strings cannot fit in the {} bytes left in the file", v.count, left());
      v.strings.reserve(size_t(v.count));
      for (uint64_t i = 0; i < v.count; ++i) v.strings.push_back(string("an array string"));
      return;
    }
    const uint64_t es = scalar_size(v.elem_type);
    if (v.count > left() / es)
      fail("an array of {} {} elements ({} bytes each) runs past the end of the file ({} bytes left)", v.count,
           gguf_type_name(v.elem_type), es, left());
    v.bytes = take(v.count * es, "the array");
    if (v.elem_type == GgufType::Bool) check_bools(v.bytes, v.count);
  }
  void check_bools(const uint8_t* p, uint64_t n) const {
    for (uint64_t i = 0; i < n; ++i)
      if (p[i] > 1) fail("a bool holds {} (expected 0 or 1)", p[i]);
  }

  const uint8_t* base_;
  uint64_t size_;
  uint64_t pos_ = 0;
  const std::string& path_;
};

}  // namespace

std::string_view gguf_type_name(GgufType t) {
  switch (t) {
    case GgufType::U8: return "u8";
    case GgufType::I8: return "i8";
    case GgufType::U16: return "u16";
    case GgufType::I16: return "i16";
    case GgufType::U32: return "u32";
    case GgufType::I32: return "i32";
    case GgufType::F32: return "f32";
    case GgufType::Bool: return "bool";
    case GgufType::String: return "string";
    case GgufType::Array: return "array";
    case GgufType::U64: return "u64";
    case GgufType::I64: return "i64";
    case GgufType::F64: return "f64";
  }
  return "?";
}

const GgmlTypeInfo* ggml_type_info(uint32_t id) {
  for (const GgmlTypeInfo& t : kGgmlTypes)
    if (t.id == id) return &t;
  return nullptr;
}

std::optional<DType> dtype_of_ggml(uint32_t id) {
  switch (id) {
    case 0: return DType::F32;
    case 1: return DType::F16;
    case 30: return DType::BF16;
    case 8: return DType::Q8_0;
    case 2: return DType::Q4_0;
    case 3: return DType::Q4_1;
    case 12: return DType::Q4_K;
    case 13: return DType::Q5_K;
    case 14: return DType::Q6_K;
    default: return std::nullopt;
  }
}

std::vector<int64_t> GgufTensor::shape() const {
  std::vector<int64_t> s;
  for (int d = n_dims - 1; d >= 0; --d) s.push_back(ne[size_t(d)]);
  return s;
}

int64_t GgufTensor::numel() const { return ne[0] * ne[1] * ne[2] * ne[3]; }

std::string_view GgufTensor::type_name() const {
  const GgmlTypeInfo* t = ggml_type_info(ggml_type);
  return t ? t->name : "?";
}

GgufFile::GgufFile(const std::string& path) : file_(std::make_unique<MappedFile>(path)), path_(path) {
  base_ = file_->data();
  size_ = file_->size();
  parse();
}

GgufFile::GgufFile(std::span<const uint8_t> bytes, std::string origin)
    : base_(bytes.data()), size_(bytes.size()), path_(std::move(origin)) {
  parse();
}

// Phases: header; metadata entries; general.alignment; tensor infos (each shape, type and
// byte count checked on its own); the data section's start; each tensor's bytes inside the
// file; no two tensors sharing a byte.
void GgufFile::parse() {
  Reader r(base_, size_, path_);
  if (size_ < 4 || std::memcmp(base_, "GGUF", 4) != 0)
    fail("{}: not a GGUF file (it does not begin with the bytes \"GGUF\")", path_);
  r.take(4, "the magic");
  version_ = r.read<uint32_t>("the version");
  if (version_ == 0x02000000 || version_ == 0x03000000)
    fail("{}: a big-endian GGUF file; only little-endian files are supported", path_);
  if (version_ != 2 && version_ != 3) fail("{}: GGUF version {} is not supported (expected 2 or 3)", path_, version_);
  const uint64_t n_tensors = r.read<uint64_t>("the tensor count");
  const uint64_t n_kv = r.read<uint64_t>("the metadata count");
  if (n_kv > r.left() / kMinEntryBytes)
    fail("{}: header: {} metadata entries cannot fit in the {} bytes that follow", path_, n_kv, r.left());
  if (n_tensors > r.left() / kMinTensorInfoBytes)
    fail("{}: header: {} tensor infos cannot fit in the {} bytes that follow", path_, n_tensors, r.left());

  kv_.reserve(size_t(n_kv));
  for (uint64_t i = 0; i < n_kv; ++i) {
    r.where = fmt::format("metadata entry #{}", i);
    const std::string_view key = r.string("the key");
    if (key.empty()) r.fail("the key is empty");
    if (key.size() > kMaxKeyBytes) r.fail("the key has {} bytes (at most {})", key.size(), kMaxKeyBytes);
    r.where = fmt::format("metadata '{}'", printable(key));
    if (kv_index_.contains(key)) r.fail("the key appears twice");
    const uint32_t type = r.read<uint32_t>("the value type");
    if (!valid_type(type)) r.fail("unknown value type {}", type);
    GgufValue v = r.value(GgufType(type));
    kv_index_.emplace(std::string(key), kv_.size());
    kv_.emplace_back(std::string(key), std::move(v));
  }

  if (const GgufValue* a = find("general.alignment")) {
    if (a->type != GgufType::U32) fail_key("general.alignment", "has type {} (expected u32)", gguf_type_name(a->type));
    alignment_ = load<uint32_t>(a->bytes);
    if (alignment_ == 0 || !std::has_single_bit(alignment_))
      fail_key("general.alignment", "is {} (expected a power of two)", alignment_);
  }

  if (n_tensors > r.left() / kMinTensorInfoBytes)
    fail("{}: {} tensor infos cannot fit in the {} bytes left after the metadata", path_, n_tensors, r.left());
  tensors_.reserve(size_t(n_tensors));
  for (uint64_t i = 0; i < n_tensors; ++i) {
    r.where = fmt::format("tensor #{}", i);
    GgufTensor t;
    const std::string_view name = r.string("the name");
    if (name.empty()) r.fail("the name is empty");
    if (name.size() > kMaxNameBytes) r.fail("the name has {} bytes (ggml allows at most {})", name.size(), kMaxNameBytes);
    t.name = name;
    r.where = fmt::format("tensor '{}'", printable(name));
    if (tensor_index_.contains(name)) r.fail("the name appears twice");
    const uint32_t n_dims = r.read<uint32_t>("the dimension count");
    if (n_dims < 1 || n_dims > kMaxDims) r.fail("{} dimensions (expected 1 to {})", n_dims, kMaxDims);
    t.n_dims = int(n_dims);
    t.ne.fill(1);
    uint64_t numel = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t ne = r.read<uint64_t>("a dimension");
      if (ne > uint64_t(std::numeric_limits<int64_t>::max())) r.fail("dimension {} is {}", d, ne);
      if (__builtin_mul_overflow(numel, ne, &numel) || numel > uint64_t(std::numeric_limits<int64_t>::max()))
        r.fail("the shape has more than 2^63 elements");
      t.ne[d] = int64_t(ne);
    }
    t.ggml_type = r.read<uint32_t>("the type");
    const GgmlTypeInfo* info = ggml_type_info(t.ggml_type);
    if (!info) r.fail("unknown ggml type {}", t.ggml_type);
    if (t.ne[0] % info->block_elems != 0)
      r.fail("rows of {} elements are not whole {} blocks of {} elements", t.ne[0], info->name, info->block_elems);
    if (__builtin_mul_overflow(numel / uint64_t(info->block_elems), uint64_t(info->block_bytes), &t.nbytes))
      r.fail("the byte count overflows");
    t.offset = r.read<uint64_t>("the data offset");  // relative to the data section until below
    tensor_index_.emplace(t.name, tensors_.size());
    tensors_.push_back(std::move(t));
  }

  // The data section starts at the next multiple of the alignment.
  r.where = "data section";
  const uint64_t end_of_infos = r.pos();
  data_offset_ = (end_of_infos + alignment_ - 1) / alignment_ * alignment_;
  if (data_offset_ < end_of_infos || (!tensors_.empty() && data_offset_ > size_))
    r.fail("would start at offset {}, past the end of the file ({} bytes; truncated?)", data_offset_, size_);

  struct Range { uint64_t begin, end; const std::string* name; };
  std::vector<Range> ranges;
  for (GgufTensor& t : tensors_) {
    r.where = fmt::format("tensor '{}'", printable(t.name));
    if (t.offset % alignment_ != 0) r.fail("data offset {} is not a multiple of the alignment {}", t.offset, alignment_);
    uint64_t begin = 0, end = 0;
    if (__builtin_add_overflow(data_offset_, t.offset, &begin) || __builtin_add_overflow(begin, t.nbytes, &end) ||
        end > size_)
      r.fail("its {} bytes ({} {}) at data offset {} run past the end of the file ({} bytes; truncated?)", t.nbytes,
             fmt::join(t.shape(), "x"), t.type_name(), t.offset, size_);
    t.offset = begin;
    t.data = base_ + begin;
    if (end > begin) ranges.push_back({begin, end, &t.name});
  }
  std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) { return a.begin < b.begin; });
  for (size_t i = 1; i < ranges.size(); ++i) {
    const Range& a = ranges[i - 1];
    const Range& b = ranges[i];
    if (b.begin < a.end)
      fail("{}: tensors '{}' (bytes {}..{}) and '{}' (bytes {}..{}) overlap", path_, printable(*a.name), a.begin,
           a.end, printable(*b.name), b.begin, b.end);
  }
}

const GgufValue* GgufFile::find(std::string_view key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

const GgufTensor* GgufFile::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

std::optional<std::string_view> GgufFile::opt_string(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->type != GgufType::String) fail_key(key, "has type {} (expected a string)", gguf_type_name(v->type));
  return v->str;
}

std::string_view GgufFile::get_string(std::string_view key) const {
  if (auto s = opt_string(key)) return *s;
  fail_key(key, "is missing (expected a string)");
}

std::optional<uint64_t> GgufFile::opt_uint(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (!is_integer(v->type))
    fail_key(key, "has type {} (expected a non-negative integer)", gguf_type_name(v->type));
  const __int128 x = load_int(v->type, v->bytes);
  if (x < 0) fail_key(key, "is {} (expected a non-negative integer)", int64_t(x));
  return uint64_t(x);
}

uint64_t GgufFile::get_uint(std::string_view key) const {
  if (auto x = opt_uint(key)) return *x;
  fail_key(key, "is missing (expected a non-negative integer)");
}

std::optional<double> GgufFile::opt_float(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->type == GgufType::F32) return double(load<float>(v->bytes));
  if (v->type == GgufType::F64) return load<double>(v->bytes);
  fail_key(key, "has type {} (expected f32 or f64)", gguf_type_name(v->type));
}

double GgufFile::get_float(std::string_view key) const {
  if (auto x = opt_float(key)) return *x;
  fail_key(key, "is missing (expected a number)");
}

std::optional<bool> GgufFile::opt_bool(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->type != GgufType::Bool) fail_key(key, "has type {} (expected bool)", gguf_type_name(v->type));
  return v->bytes[0] != 0;
}

std::span<const std::string_view> GgufFile::get_strings(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) fail_key(key, "is missing (expected an array of strings)");
  if (v->type != GgufType::Array || v->elem_type != GgufType::String)
    fail_key(key, "has type {} (expected an array of strings)",
             v->type == GgufType::Array ? "array of " + std::string(gguf_type_name(v->elem_type))
                                        : std::string(gguf_type_name(v->type)));
  return v->strings;
}

std::vector<float> GgufFile::get_floats(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) fail_key(key, "is missing (expected an array of numbers)");
  if (v->type != GgufType::Array || (v->elem_type != GgufType::F32 && v->elem_type != GgufType::F64))
    fail_key(key, "is not an array of f32 or f64");
  std::vector<float> out(size_t(v->count));
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = v->elem_type == GgufType::F32 ? load<float>(v->bytes + 4 * i) : float(load<double>(v->bytes + 8 * i));
  return out;
}

std::vector<int64_t> GgufFile::get_ints(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) fail_key(key, "is missing (expected an array of integers)");
  if (v->type != GgufType::Array || !is_integer(v->elem_type)) fail_key(key, "is not an array of integers");
  const size_t es = scalar_size(v->elem_type);
  std::vector<int64_t> out(size_t(v->count));
  for (size_t i = 0; i < out.size(); ++i) {
    const __int128 x = load_int(v->elem_type, v->bytes + es * i);
    if (x > std::numeric_limits<int64_t>::max()) fail_key(key, "element {} does not fit in 64 bits", i);
    out[i] = int64_t(x);
  }
  return out;
}

std::optional<std::string> find_gguf_model(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (ec) return std::nullopt;
  if (fs::is_regular_file(st)) return path;
  if (!fs::is_directory(st)) return std::nullopt;
  std::vector<std::string> ggufs;
  for (const fs::directory_entry& e : fs::directory_iterator(path, ec)) {
    const std::string ext = e.path().extension().string();
    if (ext == ".safetensors") return std::nullopt;
    if (ext == ".gguf" && e.is_regular_file(ec)) ggufs.push_back(e.path().string());
  }
  if (ggufs.empty()) return std::nullopt;
  if (ggufs.size() > 1) {
    std::sort(ggufs.begin(), ggufs.end());
    fail("{}: the folder holds {} .gguf files ({}); name one with -m FILE.gguf", path, ggufs.size(),
         fmt::join(ggufs, ", "));
  }
  return ggufs[0];
}

}  // namespace tf
