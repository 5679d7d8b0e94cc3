// The interpreter against jinja2 itself: every case in jinja_cases.json (written by
// make_jinja_cases.py from jinja2's own renders in Hugging Face's environment) must render
// the same text, or fail with a message that contains the expected part.
#include <gtest/gtest.h>

#include <fstream>

#include "chat/jinja_json.h"
#include "chat/jinja_template.h"
#include "test_util.h"

namespace tf::jinja {
namespace {

using ojson = nlohmann::ordered_json;

ojson load_cases() {
  const std::string path = test::source_path("tests/chat/jinja_cases.json");
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path);
  return ojson::parse(in).at("cases");
}

std::string render(const ojson& c) {
  Dict vars;
  for (auto it = c.at("vars").begin(); it != c.at("vars").end(); ++it)
    vars.set(it.key(), from_json(it.value()));
  return Template(c.at("template").get<std::string>()).render(vars);
}

TEST(JinjaCases, RenderLikeJinja2) {
  const ojson cases = load_cases();
  int n_render = 0;
  for (const ojson& c : cases) {
    if (!c.contains("expected")) continue;
    ++n_render;
    const std::string name = c.at("name").get<std::string>();
    try {
      EXPECT_EQ(render(c), c.at("expected").get<std::string>())
          << "case '" << name << "': " << c.at("template").get<std::string>();
    } catch (const Error& e) {
      ADD_FAILURE() << "case '" << name << "' threw: " << e.what();
    }
  }
  EXPECT_GE(n_render, 90);
}

TEST(JinjaCases, FailLikeJinja2WithTheLine) {
  const ojson cases = load_cases();
  int n_error = 0;
  for (const ojson& c : cases) {
    if (!c.contains("error")) continue;
    ++n_error;
    const std::string name = c.at("name").get<std::string>();
    const std::string msg = test::error_of([&] { render(c); });
    EXPECT_NE(msg.find(c.at("error").get<std::string>()), std::string::npos)
        << "case '" << name << "': got \"" << msg << "\", jinja2 said "
        << c.at("python_error").get<std::string>();
  }
  EXPECT_GE(n_error, 20);
}

}  // namespace
}  // namespace tf::jinja
