// Pieces of the chat-template engine one at a time: Python number formatting, json.dumps,
// errors that name the line, how OpenAI messages reach the template, extra variables,
// strftime_now, key order, and concurrent renders.
#include <gtest/gtest.h>

#include <ctime>
#include <fstream>
#include <thread>

#include "chat/chat_template.h"
#include "chat/jinja_json.h"
#include "chat/jinja_template.h"
#include "chat/jinja_value.h"
#include "test_util.h"

namespace tf {
namespace {

using json = nlohmann::json;
using test::error_of;

std::string render(const std::string& source, const json& vars = json::object()) {
  jinja::Dict d;
  for (auto it = vars.begin(); it != vars.end(); ++it) d.set(it.key(), jinja::from_json(it.value()));
  return jinja::Template(source).render(d);
}

const json kUserHi = json::parse(R"([{"role": "user", "content": "Hi"}])");

TEST(JinjaValue, FloatReprIsPythons) {
  EXPECT_EQ(jinja::float_repr(1.0), "1.0");
  EXPECT_EQ(jinja::float_repr(0.1), "0.1");
  EXPECT_EQ(jinja::float_repr(100.0), "100.0");
  EXPECT_EQ(jinja::float_repr(1e16), "1e+16");
  EXPECT_EQ(jinja::float_repr(1e15), "1000000000000000.0");
  EXPECT_EQ(jinja::float_repr(1e-5), "1e-05");
  EXPECT_EQ(jinja::float_repr(0.0001), "0.0001");
  EXPECT_EQ(jinja::float_repr(-2.5), "-2.5");
  EXPECT_EQ(jinja::float_repr(5e-324), "5e-324");
  EXPECT_EQ(jinja::float_repr(1.7976931348623157e308), "1.7976931348623157e+308");
  EXPECT_EQ(jinja::float_repr(123456789012345678.0), "1.2345678901234568e+17");
}

// A template must not be able to spin or allocate without bound through one operator:
// repetition is bounded (16 Mi bytes or items), ** takes O(log exponent) steps.
TEST(JinjaOps, RepetitionAndPowerAreBounded) {
  EXPECT_EQ(render("{{ 'ab' * 3 }}|{{ ([1] * 2) | length }}|{{ '' * 1000000000000000000 }}|{{ 3 * 'x' }}"),
            "ababab|2||xxx");
  EXPECT_EQ(render("{{ ([] * 1000000000000000000) | length }}|{{ 'x' * -5 }}"), "0|");
  std::string msg = error_of([] { render("{{ 'ab' * 10000000000 }}"); });
  EXPECT_CONTAINS(msg, "67108864 bytes");
  msg = error_of([] { render("{{ ([1, 2] * 100000000) | length }}"); });
  EXPECT_CONTAINS(msg, "items");
  EXPECT_EQ(render("{{ 1 ** 1000000000000000 }}|{{ (-1) ** 1000000000000001 }}|{{ 2 ** 62 }}|{{ 0 ** 0 }}"),
            "1|-1|4611686018427387904|1");
  EXPECT_EQ(render("{{ 3 ** 39 }}|{{ (-2) ** 63 }}"), "4052555153018976267|-9223372036854775808");
  EXPECT_CONTAINS(error_of([] { render("{{ 2 ** 63 }}"); }), "overflow");
  EXPECT_CONTAINS(error_of([] { render("{{ 10 ** 1000000000000 }}"); }), "overflow");
}

// Found by fuzz_jinja: a float where an int belongs threw std::bad_variant_access out of the
// renderer (a crash); every accessor of the wrong kind is a template error instead.
TEST(JinjaErrors, WrongKindIsAnErrorNotACrash) {
  EXPECT_CONTAINS(error_of([] { render("{{ 'a-b-c'.split('-', 1|float) }}"); }),
                  "'float' object cannot be interpreted as an integer");
  EXPECT_CONTAINS(error_of([] { render("{{ 'abc'.replace('a', 'b', 'x') }}"); }), "cannot be interpreted");
  EXPECT_EQ(render("{{ 'a-b-c'.split('-', 1) }}"), "['a', 'b-c']");
}

// range() near the ends of int64 stops instead of overflowing.
TEST(JinjaBuiltins, RangeNearInt64Limits) {
  EXPECT_EQ(render("{{ range(9223372036854775806, 9223372036854775807, 2) | list }}"), "[9223372036854775806]");
  EXPECT_EQ(render("{{ range(-9223372036854775807, -9223372036854775807 - 1, -5) | list }}"), "[-9223372036854775807]");
}

// Found by fuzz_jinja: a float beyond int64 converted to an integer was undefined behaviour.
// Python's int is unbounded; ours is 64-bit, so those fail naming the conversion.
TEST(JinjaBuiltins, FloatToIntBeyondInt64Fails) {
  EXPECT_EQ(render("{{ 3.9|int }}|{{ -3.9|int }}|{{ '1e18'|int }}|{{ 9.2e18|int }}|{{ '%d' % -2.5 }}"),
            "3|-3|1000000000000000000|9200000000000000000|-2");
  EXPECT_CONTAINS(error_of([] { render("{{ 3.7e69|int }}"); }), "does not fit in a 64-bit integer");
  EXPECT_CONTAINS(error_of([] { render("{{ '1e19'|int }}"); }), "int:");
  EXPECT_CONTAINS(error_of([] { render("{{ 9223372036854775808.0|int }}"); }), "64-bit");
  EXPECT_CONTAINS(error_of([] { render("{{ '%d' % 1e300 }}"); }), "%d format");
}

// Python's % formatting: whole strings however long (a 512-byte buffer used to cut them), widths
// and precisions of strings in characters, and widths beyond 65,536 refused (a width of 2^31 had
// printf count two billion characters, 25 s a render).
TEST(JinjaOps, PercentFormatLikePython) {
  const std::string long_text(600, 'x');
  EXPECT_EQ(render("{{ '<%s>' % t }}", {{"t", long_text}}), "<" + long_text + ">");
  EXPECT_EQ(render("{{ '%-5s|' % 'ab' }}{{ '%5s' % '\u00e9' }}|{{ '%.2s' % 'h\u00e9llo' }}|{{ '%05.1f' % 3.14159 }}"),
            "ab   |    \u00e9|h\u00e9|003.1");
  EXPECT_EQ(render("{{ '%x|%5r' % (255, 'a') }}|{{ '%+d %% %s' % (3, 'xxx') }}"), "ff|  'a'|+3 % xxx");
  EXPECT_EQ(render("{{ ('%600d' % 1) | length }}"), "600");
  EXPECT_CONTAINS(error_of([] { render("{{ '%2147483647d' % 1 }}"); }), "format width is larger than 65536");
  EXPECT_CONTAINS(error_of([] { render("{{ '%.99999999999f' % 1.5 }}"); }), "format precision is larger");
}

// Found by fuzz_jinja: a slice inside a tuple subscript (b[t::x, 1]) left its object null and
// crashed the renderer; it is a syntax error naming the line.
TEST(JinjaErrors, SliceInATupleSubscriptIsASyntaxError) {
  const std::string msg = error_of([] { render("{{ 'x' }}\n{{ b[t::endset, 1] }}"); });
  EXPECT_CONTAINS(msg, "line 2");
  EXPECT_CONTAINS(msg, "slice cannot be part of a tuple");
  EXPECT_CONTAINS(error_of([] { render("{{ [1, 2][1, 0:1] }}"); }), "slice cannot be part of a tuple");
  EXPECT_EQ(render("{{ [1, 2, 3][1:] }}|{{ 'abc'[::-1] }}|{{ [1, 2, 3][:2][1] }}"), "[2, 3]|cba|2");
}

// Values a template builds without bound: a list nested 10^5 (5 * 10^5) deep printed,
// serialised, compared and freed; a namespace assigned into itself (a reference cycle). Each
// is an error or is freed without recursion, never a stack overflow.
TEST(JinjaErrors, DeepAndCyclicValuesAreBounded) {
  // Chains 100,000 and 500,000 deep take more than the 1 M steps a render gets alone: a 3,000-item
  // list passed in raises the bound to 4 M.
  const auto render_long = [](const std::string& source) {
    return render(source, {{"pad", json(std::vector<int>(3000, 0))}});
  };
  const std::string chain =
      "{% set ns = namespace(x=[], y=[]) %}{% for i in range(100000) %}{% set ns.x = [ns.x] %}"
      "{% set ns.y = [ns.y] %}{% endfor %}";
  EXPECT_EQ(render_long(chain + "{{ ns.x | length }}"), "1");  // built and freed
  for (const char* use : {"{{ ns.x }}", "{{ ns.x | tojson }}", "{{ ns.x == ns.y }}", "{{ ns.x < ns.y }}"})
    EXPECT_CONTAINS(error_of([&] { render_long(chain + use); }), "nested more than 512 levels") << use;
  EXPECT_EQ(render_long("{% set ns = namespace(x=[]) %}{% for j in range(5) %}{% for i in range(100000) %}"
                        "{% set ns.x = [ns.x] %}{% endfor %}{% endfor %}{{ ns.x | length }}"),
            "1");
  // A cycle prints as too deep, and is freed when the render ends (the sanitizer build's leak
  // checker sees to that).
  EXPECT_CONTAINS(error_of([] { render("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}"); }),
                  "nested more than 512 levels");
  EXPECT_EQ(render("{% set ns = namespace(a=[]) %}{% set ns.a = [1, {'k': [ns]}] %}{{ ns.a[0] }}"), "1");
  // Nesting within the bound still prints.
  EXPECT_EQ(render("{% set ns = namespace(x=0) %}{% for i in range(3) %}{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x }}"),
            "[[[0]]]");
}

// Strings a template builds are bounded (64 MiB), and so is its work (steps).
TEST(JinjaErrors, StringsAndWorkAreBounded) {
  const std::string doubling = "{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}";
  EXPECT_CONTAINS(error_of([&] { render(doubling); }), "MiB limit");
  EXPECT_CONTAINS(error_of([&] { render("{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}{% endfor %}"); }),
                  "MiB limit");
  EXPECT_CONTAINS(error_of([] { render("{{ ('x' * 1000000).replace('x', 'y' * 1000) }}"); }), "MiB limit");
  EXPECT_CONTAINS(error_of([] { render("{{ (['x' * 1000000] * 1000) | join }}"); }), "MiB limit");
  EXPECT_CONTAINS(error_of([] { render("{{ 'a\nb' | indent(1000000000000) }}"); }), "MiB limit");
  EXPECT_CONTAINS(error_of([] { render("{{ [1] | tojson(indent=1000000000000) }}"); }), "MiB limit");
  EXPECT_CONTAINS(error_of([] { render("{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}"); }), "MiB limit");
  // Sharing makes a value print exponentially long: bounded by the same limit.
  EXPECT_CONTAINS(error_of([] {
                    render("{% set ns = namespace(x='abcdefgh') %}{% for i in range(40) %}{% set ns.x = [ns.x, ns.x] %}"
                           "{% endfor %}{{ ns.x | tojson }}");
                  }),
                  "MiB limit");
  EXPECT_CONTAINS(error_of([] { render("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"); }),
                  "more than 1000000 steps");
}

// The loop object is built only for loops whose body names `loop`; wherever the name appears
// in the body (nested blocks, an inner loop, a macro defined there) it is there, and a macro
// defined outside never sees it (scoping is lexical, as in jinja2).
TEST(JinjaLoop, LoopObjectWhereTheBodyNamesIt) {
  EXPECT_EQ(render("{% for i in 'ab' %}{% if true %}{{ loop.index }}{% endif %}{% endfor %}"), "12");
  EXPECT_EQ(render("{% for i in 'ab' %}{% set l = loop %}{% for j in 'xyz' %}{{ l.index }}{{ loop.length }}{% endfor %}"
                   "{% endfor %}"),
            "131313232323");
  EXPECT_EQ(render("{% for i in 'ab' %}{% macro m() %}{{ loop.last }}{% endmacro %}{{ m() }}{% endfor %}"), "FalseTrue");
  EXPECT_EQ(render("{% macro m() %}{{ loop is defined }}{% endmacro %}{% for i in 'a' %}{{ m() }}{% endfor %}"), "False");
  EXPECT_EQ(render("{% for i in 'ab' if loop is undefined %}{{ i }}{% endfor %}"), "ab");
  EXPECT_EQ(render("{% for i in 'ab' %}{{ i }}{% endfor %}"), "ab");
}

// range() pays for the items it builds: a loop over range(100000) nested in another stops at
// the step bound after a few dozen inner ranges.
TEST(JinjaErrors, RangeItemsAreSteps) {
  EXPECT_CONTAINS(error_of([] { render("{% for i in range(100) %}{% set r = range(100000) %}{% endfor %}"); }),
                  "more than 1000000 steps");
}

// The step bound grows by 1,000 steps for each item of the lists a render is given: 2,000
// messages that each take about 900 steps pass (1.8 M steps, over the 1 M base); the same work over
// a 20-item list fails.
TEST(JinjaErrors, StepBoundGrowsWithTheLists) {
  const std::string source = "{% for m in messages %}{% for i in range(300) %}{% endfor %}{% endfor %}ok";
  EXPECT_EQ(render(source, {{"messages", json(std::vector<int>(2000, 1))}}), "ok");
  EXPECT_CONTAINS(error_of([&] {
                    render("{% for k in range(100) %}" + source.substr(0, source.size() - 2) + "{% endfor %}",
                           {{"messages", json(std::vector<int>(20, 1))}});
                  }),
                  "more than 1020000 steps");
}

TEST(JinjaJson, DumpsLikePython) {
  const jinja::Value v = jinja::from_json(
      nlohmann::ordered_json::parse(R"({"b": [1, 2.0, "x\u00e9\n"], "a": {}, "c": null})"));
  EXPECT_EQ(jinja::dumps(v), "{\"b\": [1, 2.0, \"x\xC3\xA9\\n\"], \"a\": {}, \"c\": null}");
  EXPECT_EQ(jinja::dumps(v, {.indent = " "}),
            "{\n \"b\": [\n  1,\n  2.0,\n  \"x\xC3\xA9\\n\"\n ],\n \"a\": {},\n \"c\": null\n}");
  EXPECT_EQ(jinja::dumps(v, {.ensure_ascii = true, .sort_keys = true}),
            "{\"a\": {}, \"b\": [1, 2.0, \"x\\u00e9\\n\"], \"c\": null}");
}

TEST(JinjaWhitespace, HuggingFaceSettings) {
  // trim_blocks: the newline after a block tag goes; lstrip_blocks: the indentation before it.
  EXPECT_EQ(render("{% for m in [1, 2] %}\n    {% if m %}\n{{ m }}\n    {% endif %}\n{% endfor %}"),
            "1\n2\n");
  EXPECT_EQ(render("a  {{- 'b' -}}  c"), "abc");
  EXPECT_EQ(render("{%- if true -%}\n  x  \n{%- endif -%}\n"), "x");
  EXPECT_EQ(render("{{ 'x' }}\n"), "x");      // the one trailing newline of a template goes
  EXPECT_EQ(render("{{ 'x' }}\n\n"), "x\n");  // only one
}

TEST(JinjaErrors, NameTheLine) {
  EXPECT_CONTAINS(error_of([] { jinja::Template("a\nb\n{% if %}"); }), "line 3");
  EXPECT_CONTAINS(error_of([] { jinja::Template("{% for x in y %}\n{% endif %}"); }), "line 2");
  EXPECT_CONTAINS(error_of([] { render("one\ntwo\n{{ missing.attr }}"); }), "line 3: 'missing' is undefined");
  EXPECT_CONTAINS(error_of([] { render("{{ [1]|join }}\n{{ 'a' ~ 2 }}\n{{ 1 + 'a' }}"); }), "line 3");
  EXPECT_CONTAINS(error_of([] { render("{% include 'x.j2' %}"); }), "'include' tag is not supported");
  EXPECT_CONTAINS(error_of([] { render("{% break %}"); }), "outside of a for loop");
  const std::string deep = error_of([] { render("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"); });
  EXPECT_CONTAINS(deep, "nested deeper than");
}

// Templates come from model files: absurd nesting fails cleanly instead of overflowing the
// stack while parsing, evaluating or freeing the tree.
TEST(JinjaErrors, DeepNestingFailsCleanly) {
  const int n = 20000;
  EXPECT_CONTAINS(error_of([&] { jinja::Template("{{ " + std::string(n, '(') + "1" + std::string(n, ')') + " }}"); }),
                  "nested more than");
  EXPECT_CONTAINS(error_of([&] { jinja::Template("{{ " + std::string(n, '-') + "1 }}"); }), "nested more than");
  std::string sum = "{{ 1";
  for (int i = 0; i < n; ++i) sum += " + 1";
  EXPECT_CONTAINS(error_of([&] { jinja::Template(sum + " }}"); }), "nested more than");
  std::string ifs;
  for (int i = 0; i < n; ++i) ifs += "{% if true %}";
  EXPECT_CONTAINS(error_of([&] { jinja::Template{ifs}; }), "nested more than");
  // Recursion through deeply nested blocks hits the evaluation bound before the stack's.
  std::string blocks;
  for (int i = 0; i < 150; ++i) blocks += "{% if true %}";
  blocks += "{{ f(n + 1) }}";
  for (int i = 0; i < 150; ++i) blocks += "{% endif %}";
  EXPECT_CONTAINS(error_of([&] { render("{% macro f(n) %}" + blocks + "{% endmacro %}{{ f(0) }}"); }),
                  "evaluation nested more than");
  // Nesting that real templates use is fine.
  EXPECT_EQ(render("{{ " + std::string(60, '(') + "1" + std::string(60, ')') + " }}"), "1");
  EXPECT_EQ(render("{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{% else %}done{% endif %}{% endmacro %}{{ f(90) }}"),
            "done");
}

TEST(JinjaErrors, RaiseExceptionKeepsTheMessage) {
  const ChatTemplate t = ChatTemplate::from_source(
      "{% if messages[0].role != 'system' %}{{ raise_exception('First message must be system') }}{% endif %}",
      "", "");
  EXPECT_EQ(error_of([&] { t.render(kUserHi, true); }), "First message must be system");
}

TEST(ChatTemplateRender, SyntaxErrorsNameTheLineAndFile) {
  EXPECT_CONTAINS(error_of([] { ChatTemplate::from_source("ok\n{{ x + }}", "", ""); }), "line 2");
}

class ChatTemplateDirTest : public test::TempDirTest {};

TEST_F(ChatTemplateDirTest, BrokenTemplateNamesFileAndLine) {
  std::ofstream(dir_ / "tokenizer_config.json") << R"({"chat_template": "a\n{% for %}"})";
  const std::string msg = error_of([&] { ChatTemplate::from_model_dir(dir_.string()); });
  EXPECT_CONTAINS(msg, "tokenizer_config.json: chat_template: line 2: ");
}

TEST(ChatTemplateRender, MessageShapesAreChecked) {
  const ChatTemplate t = ChatTemplate::from_source("{% for m in messages %}{{ m.content }}{% endfor %}", "", "");
  EXPECT_CONTAINS(error_of([&] { t.render(json::object(), true); }), "messages: expected an array");
  EXPECT_CONTAINS(error_of([&] { t.render(json::parse(R"([{"content": "x"}])"), true); }), "messages[0].role");
  EXPECT_CONTAINS(error_of([&] { t.render(json::parse(R"([{"role": "user", "content": 5}])"), true); }),
                  "messages[0].content");
  EXPECT_CONTAINS(error_of([&] {
                    t.render(json::parse(R"([{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}])"), true);
                  }),
                  "messages[0].content[0]: only text parts are supported, got type 'image_url'");
  EXPECT_CONTAINS(error_of([&] { t.render(kUserHi, true, json::object()); }), "tools: expected an array");
  EXPECT_CONTAINS(error_of([&] { t.render(kUserHi, true, nullptr, json::parse(R"({"messages": 1})")); }),
                  "'messages' is set by the request");
}

TEST(ChatTemplateRender, ContentPartsAndNullContent) {
  const ChatTemplate t = ChatTemplate::from_source("{% for m in messages %}[{{ m.content }}]{% endfor %}", "", "");
  const json messages = json::parse(R"([
      {"role": "user", "content": [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}]},
      {"role": "assistant", "content": null, "tool_calls": []},
      {"role": "assistant"}])");
  EXPECT_EQ(t.render(messages, false), "[one\ntwo][][]");
}

TEST(ChatTemplateRender, VariablesTheTemplateSees) {
  const ChatTemplate t = ChatTemplate::from_source(
      "{{ bos_token is defined }} {{ eos_token }} {{ tools }} {{ add_generation_prompt }} "
      "{{ enable_thinking }} {{ messages[0].name }}",
      "", "</s>");
  const json messages = json::parse(R"([{"role": "user", "content": "x", "name": "bob"}])");
  EXPECT_EQ(t.render(messages, true, nullptr, json::parse(R"({"enable_thinking": false})")),
            "False </s> None True False bob");
}

TEST(ChatTemplateRender, OrderedJsonKeepsKeyOrder) {
  const ChatTemplate t = ChatTemplate::from_source("{{ tools[0]|tojson }}", "", "");
  const std::string tools = R"([{"name": "f", "description": "d"}])";
  EXPECT_EQ(t.render_ordered(nlohmann::ordered_json::parse(R"([{"role": "user", "content": "x"}])"), false,
                             nlohmann::ordered_json::parse(tools)),
            R"({"name": "f", "description": "d"})");
  EXPECT_EQ(t.render(kUserHi, false, json::parse(tools)), R"({"description": "d", "name": "f"})");
}

TEST(ChatTemplateRender, StrftimeNow) {
  const ChatTemplate t = ChatTemplate::from_source("{{ strftime_now('%Y') }}", "", "");
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  EXPECT_EQ(t.render(kUserHi, false), std::to_string(1900 + local.tm_year));
}

TEST(ChatTemplateRender, ConcurrentRendersAgree) {
  const ChatTemplate t = ChatTemplate::from_model_dir(test::data_path("tokenizers/qwen3-151k")).value();
  const json messages = json::parse(R"([{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
                                        {"role": "assistant", "content": "<think>r</think>a"}])");
  const std::string expected = t.render(messages, true);
  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, 0);
  for (int k = 0; k < 4; ++k)
    threads.emplace_back([&, k] {
      for (int i = 0; i < 200; ++i) mismatches[size_t(k)] += t.render(messages, true) != expected;
    });
  for (auto& th : threads) th.join();
  for (int m : mismatches) EXPECT_EQ(m, 0);
}

}  // namespace
}  // namespace tf
