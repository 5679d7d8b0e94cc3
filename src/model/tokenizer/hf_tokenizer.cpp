#include "model/tokenizer/hf_tokenizer.h"

#include "core/error.h"
#include "core/json_bounded.h"
#include "core/mapped_file.h"
#include "model/tokenizer/json_field.h"
#include "model/tokenizer/utf8.h"

namespace tf::tok {

namespace {

std::string_view file_text(const MappedFile& file) {
  return {reinterpret_cast<const char*>(file.data()), file.size()};
}

json parse_json_file(const std::string& path) {
  const MappedFile file(path);
  const std::string_view text = file_text(file);
  return parse_json_bounded(text, path);
}

// tokenizer.json as a DOM, except that the entries of model.vocab (100k+ in real files) go to
// `vocab` instead: nlohmann would store them in a std::map, and building, walking and freeing
// that map was most of the load time. Returns whether model.vocab was an object.
json parse_tokenizer_json(const std::string& path, VocabEntries& vocab, bool& vocab_seen) {
  const MappedFile file(path);
  const std::string_view text = file_text(file);
  // The containers from the root to the current one: whether each is an object, and the last
  // key read in it.
  std::vector<char> is_object;
  std::vector<std::string> keys;
  std::string pending_key;
  std::string bad_key;  // a vocab entry whose value is an object or array
  vocab_seen = false;
  auto in_vocab = [&] {
    return is_object.size() == 3 && is_object[2] && keys[0] == "model" && keys[1] == "vocab";
  };
  json::parser_callback_t callback = [&](int /*depth*/, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        if (in_vocab() && bad_key.empty()) bad_key = pending_key;
        is_object.push_back(event == json::parse_event_t::object_start);
        keys.emplace_back();
        if (in_vocab()) vocab_seen = true;
        return true;
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        is_object.pop_back();
        keys.pop_back();
        return true;
      case json::parse_event_t::key:
        if (in_vocab()) {
          pending_key = parsed.get<std::string>();
          return false;  // the entry is kept in `vocab`, not in the DOM
        }
        keys.back() = parsed.get<std::string>();
        return true;
      case json::parse_event_t::value:
        if (in_vocab()) {
          vocab.emplace_back(std::move(pending_key), std::move(parsed));
          return false;
        }
        return true;
    }
    return true;
  };
  json root = parse_json_bounded(text, path, {.callback = callback});
  if (!bad_key.empty()) fail("{}: model.vocab.{}: expected an integer id", path, bad_key);
  return root;
}

}  // namespace

HfTokenizer::HfTokenizer(const std::string& path, const std::string& config_path) {
  VocabEntries vocab;
  bool vocab_seen = false;
  const json root = parse_tokenizer_json(path, vocab, vocab_seen);
  build(root, vocab_seen ? &vocab : nullptr, path);
  if (!config_path.empty() && file_exists(config_path)) load_config(config_path);
}

HfTokenizer::HfTokenizer(const json& tokenizer, VocabEntries vocab, const std::string& origin,
                         SpecialIds special) {
  build(tokenizer, &vocab, origin);
  for (const std::optional<int32_t> id : {special.bos, special.eos}) {
    if (id && (*id < 0 || *id >= n_vocab_)) fail("{}: special token id {} is outside the vocabulary [0, {})", origin, *id, n_vocab_);
  }
  bos_id_ = special.bos;
  eos_id_ = special.eos;
}

// The components in HF's order; `vocab` (may be null) holds model.vocab's entries when they
// were kept out of the DOM. It is consumed.
void HfTokenizer::build(const json& root, VocabEntries* vocab, const std::string& origin) {
  const JsonAt top{origin, ""};
  if (!root.is_object()) top.fail("expected a JSON object");

  const json& model = json_need(root, "model", top);
  const JsonAt at_model = top / "model";
  if (const json* type = json_find(model, "type")) {
    if (!type->is_string()) (at_model / "type").fail("expected a string");
    if (*type != "BPE") {
      (at_model / "type").fail("model type {:?} is not supported (expected BPE)", type->get<std::string>());
    }
  } else if (!json_find(model, "merges")) {
    at_model.fail("no \"type\" and no \"merges\": not a BPE model");
  }

  auto field = [&](const char* key) -> const json& {
    static const json null_json;
    const json* v = json_find(root, key);
    return v ? *v : null_json;
  };
  // The tokens the file defines bound every id in it (see id_limit.h).
  const json* vocab_json = json_find(model, "vocab");
  const json& added_json = field("added_tokens");
  const IdLimit ids{.n_tokens = int64_t(vocab                                      ? vocab->size()
                                        : vocab_json && vocab_json->is_object() ? vocab_json->size()
                                                                                : 0) +
                                int64_t(added_json.is_array() ? added_json.size() : 0)};
  normalizer_ = make_normalizer(field("normalizer"), top / "normalizer");
  pre_tokenizer_ = make_pre_tokenizer(field("pre_tokenizer"), top / "pre_tokenizer");
  model_ = std::make_unique<Bpe>(model, at_model, vocab, ids);
  if (vocab) VocabEntries().swap(*vocab);
  decoder_ = make_decoder(field("decoder"), top / "decoder");
  post_ = PostProcessor::from_json(field("post_processor"), top / "post_processor", ids);
  added_ = AddedVocabulary(added_json, top / "added_tokens", normalizer_.get(), ids);

  n_vocab_ = model_->n_ids();
  for (const AddedToken& t : added_.tokens()) n_vocab_ = std::max(n_vocab_, t.id + 1);
  added_index_.assign(size_t(n_vocab_), -1);
  for (size_t i = 0; i < added_.tokens().size(); ++i) {
    const AddedToken& t = added_.tokens()[i];
    added_index_[t.id] = int32_t(i);
    added_by_content_.insert(t.content, t.id);
  }
  for (int32_t id : post_.prefix) {
    if (id >= n_vocab_) (top / "post_processor").fail("id {} is outside the vocabulary", id);
  }
  for (int32_t id : post_.suffix) {
    if (id >= n_vocab_) (top / "post_processor").fail("id {} is outside the vocabulary", id);
  }
}

// bos_token / eos_token of tokenizer_config.json: a string, {"content": ...} or null.
void HfTokenizer::load_config(const std::string& path) {
  const json cfg = parse_json_file(path);
  const JsonAt top{path, ""};
  if (!cfg.is_object()) top.fail("expected a JSON object");
  auto resolve = [&](const char* key) -> std::optional<int32_t> {
    const json* v = json_find(cfg, key);
    if (!v) return std::nullopt;
    std::string text;
    if (v->is_string()) {
      text = v->get<std::string>();
    } else if (v->is_object()) {
      text = json_need_string(*v, "content", top / key);
    } else {
      (top / key).fail("expected a string, {{\"content\": ...}} or null");
    }
    const auto id = token_id(text);
    if (!id) (top / key).fail("token {:?} is not in the vocabulary", text);
    return id;
  };
  bos_id_ = resolve("bos_token");
  eos_id_ = resolve("eos_token");
}

std::vector<int32_t> HfTokenizer::encode(std::string_view text, bool add_special) const {
  // Rust strings are always valid UTF-8; give ill-formed input the same treatment decode
  // gives ill-formed bytes rather than feeding it to the regex engine.
  std::string repaired;
  if (!utf8_is_valid(text)) {
    repaired = utf8_lossy(text);
    text = repaired;
  }
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 8);
  if (add_special) ids = post_.prefix;

  std::vector<AddedVocabulary::Piece> raw, normalized;
  added_.split(text, /*normalized_set=*/false, raw);
  std::string piece;
  for (const auto& r : raw) {
    if (r.id >= 0) {
      ids.push_back(r.id);
      continue;
    }
    piece.assign(text.substr(r.begin, r.end - r.begin));
    if (normalizer_) normalizer_->normalize(piece);
    normalized.clear();
    added_.split(piece, /*normalized_set=*/true, normalized);
    for (const auto& n : normalized) {
      if (n.id >= 0) {
        ids.push_back(n.id);
      } else {
        encode_piece(std::string_view(piece).substr(n.begin, n.end - n.begin), r.begin == 0 && n.begin == 0, ids);
      }
    }
  }
  if (add_special) ids.insert(ids.end(), post_.suffix.begin(), post_.suffix.end());
  return ids;
}

void HfTokenizer::encode_piece(std::string_view piece, bool at_start, std::vector<int32_t>& ids) const {
  if (!pre_tokenizer_) {
    model_->tokenize(piece, ids);
    return;
  }
  std::vector<PreToken> words{{std::string(piece), at_start}};
  pre_tokenizer_->pre_tokenize(words);
  for (const PreToken& w : words) model_->tokenize(w.text, ids);
}

const AddedToken* HfTokenizer::added_token(int32_t id) const {
  if (id < 0 || id >= n_vocab_ || added_index_[id] < 0) return nullptr;
  return &added_.tokens()[size_t(added_index_[id])];
}

const std::string* HfTokenizer::token_string(int32_t id) const {
  if (const AddedToken* t = added_token(id)) return &t->decode_text;
  return model_->token(id);
}

std::string HfTokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    if (skip_special && is_special(id)) continue;
    if (const std::string* t = token_string(id)) tokens.push_back(*t);  // unknown ids are skipped, as in HF
  }
  std::string out;
  if (decoder_) {
    decoder_->decode_chain(tokens);
    for (const std::string& t : tokens) out += t;
  } else {
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i > 0) out += ' ';
      out += tokens[i];
    }
  }
  return utf8_is_valid(out) ? out : utf8_lossy(out);
}

std::string HfTokenizer::token_bytes(int32_t id) const {
  const std::string* t = token_string(id);
  if (!t) return {};
  std::string bytes = *t;
  if (decoder_) decoder_->token_bytes(bytes);
  return bytes;
}

std::string HfTokenizer::token_text(int32_t id) const {
  const std::string* t = token_string(id);
  return t ? *t : std::string();
}

std::optional<int32_t> HfTokenizer::token_id(std::string_view text) const {
  if (const int32_t id = added_by_content_.find(text); id >= 0) return id;
  return model_->token_id(text);
}

bool HfTokenizer::is_special(int32_t id) const {
  const AddedToken* t = added_token(id);
  return t && t->special;
}

}  // namespace tf::tok
