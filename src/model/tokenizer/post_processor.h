// tokenizer.json "post_processor": what encode(text, add_special=true) puts around the ids.
// For a single sequence every supported processor reduces to fixed ids before and after it:
//   TemplateProcessing  its "single" template: SpecialToken entries (ids from its
//                       special_tokens table) around the one Sequence "A";
//   BertProcessing      [cls] A [sep];   RobertaProcessing  [cls] A [sep];
//   ByteLevel, null     nothing;
//   Sequence            each processor in turn wraps the result of the previous one.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <vector>

#include "model/tokenizer/id_limit.h"

namespace tf::tok {

struct JsonAt;

struct PostProcessor {
  std::vector<int32_t> prefix;
  std::vector<int32_t> suffix;

  // Ids must be below ids.limit().
  static PostProcessor from_json(const nlohmann::json& j, const JsonAt& at, IdLimit ids);
};

}  // namespace tf::tok
