tf_add_fuzzer(http_request SOURCES fuzz_http_request.cpp LIBS tf_serve)
tf_add_fuzzer(openai_request SOURCES fuzz_openai_request.cpp LIBS tf_serve)
tf_add_fuzzer(tool_calls SOURCES fuzz_tool_calls.cpp LIBS tf_serve)
