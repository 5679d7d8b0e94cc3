#include "model/tokenizer/post_processor.h"

#include "model/tokenizer/json_field.h"

namespace tf::tok {

namespace {

PostProcessor template_processing(const json& j, const JsonAt& at, IdLimit id_limit) {
  PostProcessor pp;
  const json& single = json_need(j, "single", at);
  if (!single.is_array()) (at / "single").fail("expected an array of template pieces");
  const json* specials = json_find(j, "special_tokens");
  bool seen_a = false;
  for (size_t i = 0; i < single.size(); ++i) {
    const JsonAt pi = (at / "single")[i];
    const json& piece = single[i];
    if (const json* seq = json_find(piece, "Sequence")) {
      const std::string id = json_need_string(*seq, "id", pi / "Sequence");
      if (id != "A") (pi / "Sequence" / "id").fail("a single-sequence template can only use \"A\", got {:?}", id);
      if (seen_a) pi.fail("sequence \"A\" appears twice");
      seen_a = true;
    } else if (const json* sp = json_find(piece, "SpecialToken")) {
      const std::string name = json_need_string(*sp, "id", pi / "SpecialToken");
      const json* entry = specials ? json_find(*specials, name) : nullptr;
      if (!entry) (at / "special_tokens").fail("no entry for {:?}, which single[{}] uses", name, i);
      const JsonAt ei = at / "special_tokens" / name;
      const json& ids = json_need(*entry, "ids", ei);
      if (!ids.is_array()) (ei / "ids").fail("expected an array of ids");
      std::vector<int32_t>& dst = seen_a ? pp.suffix : pp.prefix;
      for (size_t k = 0; k < ids.size(); ++k) dst.push_back(json_need_id(ids[k], (ei / "ids")[k], id_limit));
    } else {
      pi.fail("expected {{\"Sequence\": ...}} or {{\"SpecialToken\": ...}}");
    }
  }
  if (!seen_a) (at / "single").fail("the template has no sequence \"A\"");
  return pp;
}

// "cls": ["[CLS]", 101] style entries.
int32_t token_pair_id(const json& j, const char* key, const JsonAt& at, IdLimit ids) {
  const json& v = json_need(j, key, at);
  if (!v.is_array() || v.size() != 2 || !v[0].is_string()) (at / key).fail("expected [token, id]");
  return json_need_id(v[1], (at / key)[1], ids);
}

}  // namespace

PostProcessor PostProcessor::from_json(const json& j, const JsonAt& at, IdLimit ids) {
  if (j.is_null()) return {};
  const std::string type = json_type(j, at);
  if (type == "ByteLevel") return {};  // only adjusts offsets
  if (type == "TemplateProcessing") return template_processing(j, at, ids);
  if (type == "BertProcessing" || type == "RobertaProcessing") {
    return {{token_pair_id(j, "cls", at, ids)}, {token_pair_id(j, "sep", at, ids)}};
  }
  if (type == "Sequence") {
    const json& list = json_need(j, "processors", at);
    if (!list.is_array()) (at / "processors").fail("expected an array");
    PostProcessor all;
    for (size_t i = 0; i < list.size(); ++i) {
      PostProcessor p = from_json(list[i], (at / "processors")[i], ids);
      all.prefix.insert(all.prefix.begin(), p.prefix.begin(), p.prefix.end());
      all.suffix.insert(all.suffix.end(), p.suffix.begin(), p.suffix.end());
    }
    return all;
  }
  (at / "type").fail("post_processor type {:?} is not supported (expected TemplateProcessing, "
                     "BertProcessing, RobertaProcessing, ByteLevel or Sequence)", type);
}

}  // namespace tf::tok
