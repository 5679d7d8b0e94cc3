# The GGUF reader, config, tokenizer and weight loading (tests/fuzz/fuzz_gguf.cpp).
tf_add_fuzzer(gguf SOURCES fuzz_gguf.cpp LIBS tf_model)
