#!/usr/bin/env python3
"""Writes the expected renders the chat-template tests compare against, made by jinja2
itself in the environment Hugging Face's apply_chat_template builds (transformers
utils/chat_template_utils.py: ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks
and loopcontrols; tojson = json.dumps(ensure_ascii=False, ...); raise_exception;
strftime_now).

    python3 tests/chat/make_jinja_cases.py    # jinja2 3.1.x; rewrites the two JSON files

jinja_cases.json: interpreter cases {name, template, vars, expected} or, for templates that
must fail, {name, template, vars, error} where `error` is a part of the message our
interpreter must give (jinja2's own message is kept in `python_error` for reference).

real_template_renders.json: the Llama-3 and Qwen3 templates of tests/data/tokenizers on
conversations beyond the transformers goldens there (tools, tool calls, reasoning,
enable_thinking), rendered with the variables apply_chat_template passes. The messages are
OpenAI-style requests; like vLLM (and tf::ChatTemplate), they are turned into what templates
expect first: text parts joined with "\n", null content "", JSON-object argument strings of
assistant tool calls parsed, empty tool_calls lists dropped (see openai_to_template).
"""

import json
import os
from datetime import datetime

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "data", "tokenizers")


class AssistantTracker(Extension):
    """transformers' {% generation %} tag, which renders its body unchanged (the real one
    also records where the body lands, for assistant-token masks)."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_generation_support"), [], [], body).set_lineno(lineno)

    def _generation_support(self, caller):
        return caller()


def hf_environment():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(format):
        return datetime.now().strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[AssistantTracker, "jinja2.ext.loopcontrols"])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


ENV = hf_environment()

MSGS = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello!"}]

# (name, template, vars) for renders; (name, template, vars, error part) for failures.
CASES = [
    # --- text, comments, whitespace control
    ("plain text", "Hello, world!", {}),
    ("one trailing newline dropped", "a\n\n", {}),
    ("crlf normalized", "a\r\nb\rc", {}),
    ("comment", "a{# note #}b", {}),
    ("comment trim_blocks", "a{# note #}\nb", {}),
    ("comment strip", "a  {#- note -#}  \n b", {}),
    ("trim_blocks after block", "{% if true %}\nyes\n{% endif %}\nend", {}),
    ("no trim after variable", "{{ 'x' }}\ny", {}),
    ("lstrip_blocks", "  {% if true %}\n  yes\n  {% endif %}\n", {}),
    ("lstrip only blank prefix", "a {% if true %}b{% endif %}", {}),
    ("lstrip disabled with plus", "  {%+ if true %}x{% endif %}", {}),
    ("trim disabled with plus", "{% if true +%}\nx{% endif %}", {}),
    ("dash strips newlines", "a\n\n  {{- 'b' -}}  \n\n c", {}),
    ("dash on block", "x  \n {%- if true -%} \n y \n {%- endif -%} \n z", {}),
    ("lstrip after trimmed line", "{% for i in [1,2] %}\n    {% if i %}\n{{ i }}\n    {% endif %}\n{% endfor %}", {}),
    ("variable not lstripped", "  {{ 'v' }}", {}),
    ("raw block", "{% raw %}{{ not parsed }}{% endraw %}", {}),
    ("braces inside output", "{{ {'a': {'b': 1}} }}", {}),
    ("string with newline", "{{ 'a\nb' }}|{{ \"q\\\"\" }}|{{ 'tab\\tx' }}|{{ '\\u00e9\\x41' }}", {}),
    ("adjacent strings", "{{ 'a' 'b' }}", {}),
    # --- expressions
    ("arithmetic", "{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 2 ** 3 ** 2 }} {{ 7 / 2 }} {{ 4 / 2 }}", {}),
    ("float repr", "{{ 0.1 + 0.2 }} {{ 1.0 }} {{ 1e16 }} {{ 1.5e-7 }} {{ 123456789.125 }} {{ 1e15 }} {{ 0.0001 }} {{ -0.0 }} {{ 2.5e+300 }}", {}),
    ("float ops", "{{ 7.5 // 2 }} {{ -7.5 % 2 }} {{ 2 ** -1 }} {{ 1 + 1.5 }} {{ 3 * 1.0 }}", {}),
    ("string ops", "{{ 'ab' + 'cd' }} {{ 'ab' * 3 }} {{ 2 * 'x' }} {{ 'a' ~ 1 ~ none ~ true ~ undefined_var }}", {}),
    ("list ops", "{{ [1] + [2, 3] }} {{ [0] * 3 }}", {}),
    ("comparisons", "{{ 1 < 2 }} {{ 2 <= 1 }} {{ 'b' > 'a' }} {{ 1 == 1.0 }} {{ true == 1 }} {{ 1 != 2 }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 5 }} {{ [1, 2] < [1, 3] }}", {}),
    ("equality of containers", "{{ [1, {'a': 2}] == [1, {'a': 2}] }} {{ {'a': 1, 'b': 2} == {'b': 2, 'a': 1} }} {{ (1, 2) == [1, 2] }} {{ none == none }} {{ x == y }}", {}),
    ("in", "{{ 'b' in 'abc' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 'z' not in 'abc' }} {{ 3 not in [1] }}", {}),
    ("logic returns operands", "{{ 0 or 'x' }} {{ 'a' and 'b' }} {{ '' and 1 }} {{ none or none }}|{{ not 0 }} {{ not 'a' }}", {}),
    ("conditional expression", "{{ 'y' if 1 else 'n' }} {{ 'y' if 0 else 'n' }} [{{ 'y' if 0 }}] {{ 'a' if 0 else 'b' if 1 else 'c' }}", {}),
    ("unary", "{{ -3 }} {{ -(1 + 2) }} {{ +4 }} {{ - 2 ** 2 }}", {}),
    ("literals", "{{ true }} {{ True }} {{ false }} {{ none }} {{ None }} {{ 1_000 }} {{ 0x1f }} {{ 0b101 }} {{ 0o17 }}", {}),
    ("repr of containers", "{{ [1, 'a', none, true, 1.5] }} {{ {'k': \"it's\", 'q': 'say \"hi\"'} }} {{ (1,) }} {{ (1, 2) }} {{ () }} {{ ['a\\nb'] }}", {}),
    ("tuple output", "{{ 1, 'a' }}", {}),
    ("filters bind tighter than math", "{{ 1 + [1, 2]|length }} {{ 10 - 'abc'|length * 2 }}", {}),
    ("attribute and item", "{{ d.a }} {{ d['a'] }} {{ d.b.c }} {{ d['b']['c'] }} {{ l[0] }} {{ l[-1] }} {{ l.1 }}", {"d": {"a": 1, "b": {"c": "x"}}, "l": [10, 20]}),
    ("missing key is undefined", "[{{ d.missing }}] {{ d.missing is defined }} [{{ l[9] }}] [{{ none.x }}] [{{ 'str'.nope }}]", {"d": {}, "l": []}),
    ("method names win for attribute", "{{ d['items'] }} {{ d.items() | list }}", {"d": {"items": 7}}),
    ("slicing", "{{ l[1:] }} {{ l[:2] }} {{ l[::-1] }} {{ l[-2:] }} {{ l[1:-1] }} {{ l[::2] }} {{ l[5:1:-1] }} {{ l[-10:2] }} {{ s[::-1] }} {{ s[1:3] }} {{ s[-1] }}", {"l": [0, 1, 2, 3, 4, 5], "s": "héllo"}),
    ("unicode length and index", "{{ s|length }} {{ s[1] }} {{ s|upper }}", {"s": "héllo wörld ß"}),
    # --- statements
    ("if elif else", "{% for x in [1, 2, 3] %}{% if x == 1 %}one{% elif x == 2 %}two{% else %}many{% endif %},{% endfor %}", {}),
    ("for loop variables", "{% for x in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}|{% endfor %}", {}),
    ("for prev next cycle", "{% for x in [1, 2, 3] %}{{ loop.previtem }}<{{ x }}>{{ loop.nextitem }} {{ loop.cycle('odd', 'even') }};{% endfor %}", {}),
    ("for else", "{% for x in [] %}x{% else %}empty{% endfor %}|{% for x in [1] %}{{ x }}{% else %}empty{% endfor %}", {}),
    ("for filter", "{% for x in range(10) if x is odd %}{{ x }}{{ '/' ~ loop.length if loop.last }},{% endfor %}", {}),
    ("for over dict and items", "{% for k in d %}{{ k }};{% endfor %}{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for k, v in d|items %}{{ k }}{{ v }}{% endfor %}", {"d": {"z": 1, "a": 2}}),
    ("for unpack", "{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }},{% endfor %}", {}),
    ("nested loops", "{% for a in [1, 2] %}{% for b in 'xy' %}{{ loop.index }}{{ b }}{% endfor %}{{ loop.index }};{% endfor %}", {}),
    ("loop scoping", "{% set a = 5 %}{% for i in [1, 2, 3] %}{{ a }}{% set a = i %}{{ a }},{% endfor %}|{{ a }}", {}),
    ("loop set per iteration", "{% for i in [1, 2, 3] %}{% if loop.first %}{% set a = i %}{% endif %}[{{ a }}]{% endfor %}", {}),
    ("if does not scope", "{% if true %}{% set a = 5 %}{% endif %}{{ a }}", {}),
    ("break continue", "{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 5 %}{% break %}{% endif %}{{ x }}{% endfor %}", {}),
    ("namespace", "{% set ns = namespace(n=0, found=false) %}{% for x in [1, 2, 3] %}{% set ns.n = ns.n + x %}{% if x == 2 %}{% set ns.found = true %}{% endif %}{% endfor %}{{ ns.n }} {{ ns.found }} {{ ns.missing is defined }}", {}),
    ("set tuple", "{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set c, d = [3, 4] %}{{ c }}{{ d }}", {}),
    ("block set", "{% set x %}\n  hi {{ 1 + 1 }}\n{% endset %}[{{ x }}]{% set y | upper %}abc{% endset %}{{ y }}", {}),
    ("macro", "{% macro tag(name, value='v') %}<{{ name }}={{ value }}>{% endmacro %}{{ tag('a') }}{{ tag('b', 2) }}{{ tag(value=3, name='c') }}{{ tag('d')|upper }}", {}),
    ("macro sees outer", "{% set g = 'G' %}{% macro m() %}{{ g }}{% endmacro %}{{ m() }}{% for x in [1, 2] %}{% macro n() %}{{ x }}{% endmacro %}{{ n() }}{% endfor %}", {}),
    ("macro recursion", "{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1)|int }}{% endif %}{% endmacro %}{{ fact(5) }}", {}),
    ("with", "{% set a = 1 %}{% with a = 2, b = 3 %}{{ a }}{{ b }}{% endwith %}{{ a }}", {}),
    ("filter block", "{% filter upper %}abc {{ 'def' }}{% endfilter %}", {}),
    ("generation block", "{% generation %}assistant text{% endgeneration %}", {}),
    # --- filters
    ("tojson spacing", "{{ x|tojson }}", {"x": {"a": [1, 2.5, "é\n\"\\", None, True, False], "b": {}, "c": [], "d": {"e": 1}}}),
    ("tojson indent", "{{ x|tojson(indent=2) }}|{{ x|tojson(indent=0) }}|{{ [] | tojson(indent=2) }}", {"x": {"a": [1, {"b": None}], "c": "x"}}),
    ("tojson options", "{{ x|tojson(sort_keys=true) }} {{ x|tojson(ensure_ascii=true) }} {{ x|tojson(separators=(',', ':')) }}", {"x": {"z": "ü😀", "a": [1, 2]}}),
    ("tojson scalars", "{{ 'a'|tojson }} {{ 1|tojson }} {{ 1.0|tojson }} {{ none|tojson }} {{ true|tojson }} {{ '\\x01\\t</script>'|tojson }}", {}),
    ("tojson keeps key order", "{{ x|tojson }}", {"x": {"type": "function", "function": {"name": "f", "description": "d", "parameters": {"type": "object", "properties": {}}}}}),
    ("trim", "[{{ '  a b \n'|trim }}] [{{ 'xxaxx'|trim('x') }}] [{{ undefined_var|trim }}]", {}),
    ("length count", "{{ [1, 2]|length }} {{ 'abc'|count }} {{ {'a': 1}|length }} {{ undefined_var|length }}", {}),
    ("string upper lower", "{{ 3|string }} {{ 'aBc'|upper }} {{ 'AbC'|lower }} {{ none|string }} {{ [1]|string }}", {}),
    ("title capitalize", "{{ 'hello big-world (x)'|title }} {{ 'hELLO wORLD'|capitalize }}", {}),
    ("default", "{{ u|default('d') }} {{ ''|default('d') }} {{ ''|default('d', true) }} {{ 0|d('z', boolean=true) }} {{ none|default('d') }} [{{ u|default }}]", {}),
    ("items", "{{ d|items|list }} {{ u|items|list }}", {"d": {"b": 1, "a": [2]}}),
    ("join", "{{ [1, 2, 3]|join(', ') }} {{ ['a', 'b']|join }} {{ users|join(',', attribute='name') }}", {"users": [{"name": "x"}, {"name": "y"}]}),
    ("first last", "{{ [1, 2, 3]|first }} {{ [1, 2, 3]|last }} {{ 'abc'|first }} [{{ []|first }}]", {}),
    ("list reverse sort", "{{ 'abc'|list }} {{ [1, 2, 3]|reverse|list }} {{ 'abc'|reverse }} {{ [3, 1, 2]|sort }} {{ [3, 1, 2]|sort(reverse=true) }} {{ ['b', 'A', 'a']|sort }} {{ ['b', 'A', 'a']|sort(case_sensitive=true) }} {{ users|sort(attribute='age')|map(attribute='name')|join }}", {"users": [{"name": "x", "age": 3}, {"name": "y", "age": 1}]}),
    ("unique min max sum", "{{ [1, 2, 1, 3]|unique|list }} {{ ['a', 'A', 'b']|unique|list }} {{ [3, 1, 2]|min }} {{ [3, 1, 2]|max }} {{ [1, 2, 3]|sum }} {{ users|sum(attribute='age') }} {{ users|max(attribute='age')|attr('name') }}", {"users": [{"name": "x", "age": 3}, {"name": "y", "age": 1}]}),
    ("selectattr rejectattr map", "{{ msgs|selectattr('role', 'equalto', 'user')|map(attribute='content')|join('/') }} {{ msgs|rejectattr('role', 'eq', 'user')|list|length }} {{ msgs|selectattr('tool_calls')|list|length }} {{ msgs|selectattr('tool_calls', 'defined')|map(attribute='role')|first }} {{ msgs|map(attribute='missing', default='-')|join }}", {"msgs": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b", "tool_calls": [1]}, {"role": "user", "content": "c"}]}),
    ("select reject map filter", "{{ [1, 2, 3, 4]|select('even')|list }} {{ [0, 1, '', 'a', none]|select|list }} {{ [1, 2, 3]|reject('odd')|list }} {{ [1, 2]|map('string')|join('-') }} {{ ['a', 'bb']|map('length')|list }} {{ ['ab', 'cb']|map('replace', 'b', 'x')|list }}", {}),
    ("replace int float abs round", "{{ 'aXbX'|replace('X', '-') }} {{ 'aXbX'|replace('X', '-', 1) }} {{ '42'|int + 1 }} {{ 'x'|int }} {{ 'x'|int(7) }} {{ 3.9|int }} {{ '0x1f'|int(base=16) }} {{ '2.5'|int }} {{ '1.5'|float }} {{ 3|float }} {{ -3|abs }} {{ 2.5|round }} {{ 3.5|round }} {{ 3.14159|round(2) }} {{ 3|round }} {{ 2.1|round(method='ceil') }}", {}),
    ("indent", "[{{ t|indent(2) }}] [{{ t|indent(2, true) }}] [{{ t|indent('>', blank=true) }}]", {"t": "a\n\nb\n"}),
    ("dictsort", "{{ d|dictsort }} {{ d|dictsort(by='value') }} {{ d|dictsort(reverse=true) }}", {"d": {"b": 1, "a": 3, "C": 2}}),
    ("escape safe wordcount", "{{ '<a href=\"x\">&\\'</a>'|escape }} {{ '<b>'|safe }} {{ 'one two  three'|wordcount }}", {}),
    ("format filter and operator", "{{ '%s is %d years'|format('x', 3) }} {{ '%5.2f|%-3d|%r|%%' % (3.14159, 7, 'y') }} {{ 'n=%s' % 5 }}", {}),
    # --- tests
    ("is tests", "{{ x is defined }} {{ u is defined }} {{ u is undefined }} {{ none is none }} {{ x is none }} {{ 'a' is string }} {{ {} is mapping }} {{ [] is mapping }} {{ [] is iterable }} {{ 'a' is iterable }} {{ 1 is iterable }} {{ 1 is number }} {{ 1.5 is float }} {{ 1 is integer }} {{ true is boolean }} {{ true is true }} {{ 0 is false }} {{ false is false }} {{ [] is sequence }} {{ {} is sequence }}", {"x": 1}),
    ("is tests with arguments", "{{ 4 is divisibleby 2 }} {{ 3 is odd }} {{ 3 is even }} {{ 1 is eq 1 }} {{ 1 is ne 1 }} {{ 2 is gt 1 }} {{ 2 is lt(1) }} {{ 1 is in [1, 2] }} {{ x is sameas x }} {{ none is sameas none }} {{ 'ab' is lower }} {{ 'AB' is upper }} {{ 'upper' is filter }} {{ 'odd' is test }}", {"x": [1]}),
    ("is not", "{{ x is not none }} {{ u is not defined }} {{ not x is none }}", {"x": 1}),
    ("callable", "{{ range is callable }} {{ 'a'.upper is callable }} {{ 1 is callable }}", {}),
    # --- methods and globals
    ("string methods", "{{ ' a '.strip() }}|{{ 'xxaxx'.lstrip('x') }}|{{ 'xxaxx'.rstrip('x') }}|{{ 'a b  c'.split() }}|{{ 'a,b,,c'.split(',') }}|{{ 'a-b-c'.split('-', 1) }}|{{ 'a-b-c'.rsplit('-', 1) }}|{{ '  a  b '.split(none, 1) }}|{{ 'l1\\nl2\\r\\nl3'.splitlines() }}", {}),
    ("string methods 2", "{{ 'abc'.startswith('ab') }} {{ 'abc'.startswith(('x', 'a')) }} {{ 'abc'.endswith('bc') }} {{ 'aXbX'.replace('X', '') }} {{ 'aXbX'.replace('X', '-', 1) }} {{ 'ab'.upper() }} {{ 'AB'.lower() }} {{ 'hello world'.title() }} {{ \"they're\".title() }} {{ 'hELLO'.capitalize() }}", {}),
    ("string methods 3", "{{ 'abcb'.find('b') }} {{ 'abcb'.rfind('b') }} {{ 'abc'.find('z') }} {{ 'abcb'.count('b') }} {{ ', '.join(['a', 'b']) }} {{ '12'.isdigit() }} {{ 'ab'.isalpha() }} {{ ' \\n'.isspace() }} {{ 'a1'.isalnum() }} {{ 'ab'.islower() }} {{ 'AB'.isupper() }} {{ 'prefix-x'.removeprefix('prefix-') }} {{ 'x.py'.removesuffix('.py') }}", {}),
    ("split limits", "{{ '  a  b '.split(none, 1) }} {{ '  a  b '.rsplit(none, 1) }} {{ ' a '.split(none, 0) }} {{ 'a b c'.split(' ', 5) }} {{ 'a--b--c'.rsplit('--', 1) }} {{ ''.split() }} {{ ''.split(',') }}", {}),
    ("str format", "{{ 'Hi {}, {}!'.format('a', 2) }} {{ '{1}{0}'.format('a', 'b') }} {{ '{name} {{x}}'.format(name='n') }}", {}),
    ("dict methods", "{{ d.get('a') }} {{ d.get('z') }} {{ d.get('z', 3) }} {{ d.keys()|list }} {{ d.values()|list }} {{ d.items()|list }}", {"d": {"a": 1, "b": [2]}}),
    ("list methods", "{{ l.index(2) }} {{ l.count(1) }}", {"l": [1, 2, 1]}),
    ("range dict", "{{ range(3)|list }} {{ range(1, 7, 2)|list }} {{ range(3, 0, -1)|list }} {{ dict(a=1, b='x') }} {{ namespace(a=1) }}", {}),
    ("undefined behaviour", "[{{ u }}] [{{ u|length }}] [{% for x in u %}x{% endfor %}] {{ u == u }} {{ u is none }} {{ not u }} [{{ u ~ 'a' }}] {{ 'a' in u }}", {}),
    ("messages idioms", "{% if messages[0]['role'] == 'system' %}{% set sys = messages[0]['content'] %}{% set rest = messages[1:] %}{% else %}{% set sys = '' %}{% set rest = messages %}{% endif %}<<{{ sys }}>>{% for m in rest %}[{{ m.role|upper }}: {{ m['content']|trim }}]{% endfor %}{{ messages|length }}{{ (messages|last).content }}", {"messages": MSGS}),
    ("bos eos", "{{ bos_token }}x{{ eos_token }}", {"bos_token": "<s>", "eos_token": "</s>"}),
]

ERROR_CASES = [
    ("syntax error names line", "line one\n{% if x %}\n{{ foo( }}\n{% endif %}", {}, "line 3"),
    ("unclosed block", "a\n{% for x in y %}\nbody", {}, "line 3"),
    ("unknown tag", "\n\n{% frobnicate %}", {}, "line 3: unknown tag 'frobnicate'"),
    ("unknown filter", "{{ x }}\n{{ x|nosuchfilter }}", {}, "line 2: no filter named 'nosuchfilter'"),
    ("unknown test", "{{ x is nosuchtest }}", {}, "line 1: no test named 'nosuchtest'"),
    ("stray endif", "{% endif %}", {}, "line 1"),
    ("unclosed comment", "a {# b", {}, "line 1: missing end of comment tag"),
    ("unterminated string", "{{ 'abc }}", {}, "line 1: unterminated string"),
    ("raise_exception", "{% if true %}\n{{ raise_exception('Conversation roles must alternate!') }}\n{% endif %}", {}, "Conversation roles must alternate!"),
    ("undefined variable attribute", "ok\n{{ nothing.here }}", {}, "line 2: 'nothing' is undefined"),
    ("missing key attribute", "{{ d.a.b }}", {"d": {}}, "'dict object' has no attribute 'a'"),
    ("undefined arithmetic", "{{ nothing + 1 }}", {}, "'nothing' is undefined"),
    ("type error", "\n{{ 'a' + 1 }}", {}, "line 2: unsupported operand type(s) for +: 'str' and 'int'"),
    ("ordering type error", "{{ 1 < 'a' }}", {}, "not supported between instances of 'int' and 'str'"),
    ("division by zero", "{{ 1 / 0 }}", {}, "division by zero"),
    ("set attribute on non-namespace", "{% set x = 1 %}\n{% set x.a = 2 %}", {}, "line 2: cannot assign attribute on non-namespace object"),
    ("calling a non-function", "{{ 'abc'() }}", {}, "not callable"),
    ("list append is unsafe", "{% set l = [] %}{{ l.append(1) }}", {}, "unsafe"),
    ("dict update is unsafe", "{% set d = {} %}{{ d.update({'a': 1}) }}", {}, "unsafe"),
    ("not iterable", "{% for x in 5 %}{% endfor %}", {}, "'int' object is not iterable"),
    ("in needs string", "{{ 1 in 'abc' }}", {}, "requires string as left operand"),
    ("tojson of undefined", "{{ nothing|tojson }}", {}, "not JSON serializable"),
    ("empty separator", "{{ 'abc'.split('') }}", {}, "empty separator"),
]


def render(template, variables):
    return ENV.from_string(template).render(**variables)


def make_jinja_cases():
    out = []
    for name, template, variables in CASES:
        out.append({"name": name, "template": template, "vars": variables,
                    "expected": render(template, variables)})
    for name, template, variables, error in ERROR_CASES:
        try:
            render(template, variables)
        except Exception as e:  # jinja2 must fail too
            python_error = f"{type(e).__name__}: {e} (line {getattr(e, 'lineno', None)})"
        else:
            raise AssertionError(f"jinja2 did not fail on {name!r}")
        out.append({"name": name, "template": template, "vars": variables, "error": error,
                    "python_error": python_error})
    return out


TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather for a city, in °C.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                   "days": {"type": "integer", "minimum": 1}},
                   "required": ["city"]}}}]

CONVERSATIONS = [
    ("system only", [{"role": "system", "content": "You are terse."}], None, {}),
    ("untrimmed content", [{"role": "user", "content": "  padded question \n\n"}], None, {}),
    ("unicode", [{"role": "user", "content": "Grüße, 世界! 😀 \"quoted\" \\ back"}], None, {}),
    ("tools", [{"role": "system", "content": "Use tools."},
               {"role": "user", "content": "Weather in Paris?"}], TOOLS, {}),
    ("tools without system", [{"role": "user", "content": "Weather in Paris?"}], TOOLS, {}),
    ("tool call round trip", [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "",
         "tool_calls": [{"id": "call_1", "type": "function",
                         "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}}]},
        {"role": "tool", "content": "{\"temp\": 21}", "tool_call_id": "call_1"},
        {"role": "tool", "content": "{\"temp\": 19}", "tool_call_id": "call_2"},
        {"role": "assistant", "content": "It is 21 °C."},
        {"role": "user", "content": "Thanks"}], TOOLS, {}),
    ("tool call with string arguments and text", [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": "Let me check.",
         "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}},
                        {"type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Rome\"}"}}]},
        {"role": "tool", "content": "cold"}], TOOLS, {}),
    ("openai style tool call", [
        {"role": "user", "content": [{"type": "text", "text": "Weather in"}, {"type": "text", "text": "Paris and Rome?"}]},
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": "a", "type": "function", "function": {"name": "get_weather", "arguments": "{\"days\":2,\"city\":\"Paris\"}"}},
                        {"id": "b", "type": "function", "function": {"name": "get_weather", "arguments": "not json"}}]},
        {"role": "tool", "content": "sunny", "tool_call_id": "a"}], TOOLS, {}),
    ("empty tool_calls", [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello", "tool_calls": []},
        {"role": "user", "content": "Bye"}], None, {}),
    ("reasoning in content", [
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "<think>\nadd them\n</think>\n\n4"},
        {"role": "user", "content": "3+3?"},
        {"role": "assistant", "content": "<think>\nagain\n</think>\n\n6"}], None, {}),
    ("reasoning_content field", [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello", "reasoning_content": "greet back"}], None, {}),
    ("multi-step tool use", [
        {"role": "user", "content": "Plan"},
        {"role": "assistant", "content": "<think>step</think>calling",
         "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}]},
        {"role": "user", "content": "<tool_response>\nsunny\n</tool_response>"}], TOOLS, {}),
    ("thinking disabled", [{"role": "user", "content": "Quick answer"}], None, {"enable_thinking": False}),
    ("thinking enabled", [{"role": "user", "content": "Quick answer"}], None, {"enable_thinking": True}),
]


def openai_to_template(messages):
    out = []
    for m in messages:
        m = json.loads(json.dumps(m))
        content = m.get("content")
        if content is None:
            m["content"] = ""
        elif isinstance(content, list):
            m["content"] = "\n".join(part["text"] for part in content)
        if m["role"] != "assistant":
            out.append(m)
            continue
        if m.get("tool_calls") == []:
            del m["tool_calls"]
        for call in m.get("tool_calls") or []:
            fn = call.get("function")
            if isinstance(fn, dict) and isinstance(fn.get("arguments"), str):
                try:
                    parsed = json.loads(fn["arguments"])
                except ValueError:
                    continue
                if isinstance(parsed, dict):
                    fn["arguments"] = parsed
        out.append(m)
    return out


def make_real_template_renders():
    out = []
    for model in ("llama3-128k", "qwen3-151k"):
        with open(os.path.join(DATA, model, "tokenizer_config.json"), encoding="utf-8") as f:
            config = json.load(f)
        template = ENV.from_string(config["chat_template"])
        special = {k: config[k] for k in ("bos_token", "eos_token") if isinstance(config.get(k), str)}
        for name, messages, tools, extra in CONVERSATIONS:
            for add_generation_prompt in (True, False):
                text = template.render(messages=openai_to_template(messages), tools=tools, documents=None,
                                       add_generation_prompt=add_generation_prompt,
                                       **special, **extra)
                out.append({"model": model, "name": name, "messages": messages, "tools": tools,
                            "extra": extra, "add_generation_prompt": add_generation_prompt,
                            "text": text})
    return out


def write(name, cases, note):
    path = os.path.join(HERE, name)
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"generator": f"tests/chat/make_jinja_cases.py, jinja2 {jinja2.__version__} in "
                                "Hugging Face's apply_chat_template environment",
                   "note": note, "cases": cases}, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {path}: {len(cases)} cases")


if __name__ == "__main__":
    write("jinja_cases.json", make_jinja_cases(),
          "expected = jinja2's render; error = part of the message our interpreter must give")
    write("real_template_renders.json", make_real_template_renders(),
          "real tokenizer_config.json templates on conversations beyond the transformers goldens")
