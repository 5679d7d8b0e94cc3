# Sanitizer and fuzzing builds (README.md, "Testing"). Both instrument every target, the
# libraries included, so they get a build folder of their own.
#
#   -DTF_SANITIZE=address,undefined   ASan + UBSan (gcc or clang); scripts/test_sanitizers.sh asan
#   -DTF_SANITIZE=thread              ThreadSanitizer; scripts/test_sanitizers.sh tsan
#   -DTF_FUZZ=ON                      libFuzzer harnesses (clang only; tests/fuzz, scripts/fuzz.sh):
#                                     everything with ASan + UBSan and coverage for the fuzzer
#
# Any report is fatal (-fno-sanitize-recover): a test that trips a sanitizer fails.
set(TF_SANITIZE "" CACHE STRING "Instrument every target with these -fsanitize= checks (e.g. address,undefined or thread)")
option(TF_FUZZ "Build the libFuzzer harnesses of tests/fuzz (clang)" OFF)

set(tf_sanitize_flags "")
if(TF_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "TF_FUZZ needs clang (libFuzzer): configure with -DCMAKE_CXX_COMPILER=clang++ "
                        "-DCMAKE_C_COMPILER=clang (Debian: clang, libclang-rt-14-dev)")
  endif()
  if(TF_SANITIZE AND NOT TF_SANITIZE STREQUAL "address,undefined")
    message(FATAL_ERROR "TF_FUZZ builds with address,undefined; TF_SANITIZE=${TF_SANITIZE} does not combine with it")
  endif()
  set(TF_SANITIZE "address,undefined")
  # fuzzer-no-link: coverage for libFuzzer in every object; only fuzz_* executables link its main.
  add_compile_options($<$<COMPILE_LANGUAGE:CXX,C>:-fsanitize=fuzzer-no-link>)
endif()

if(TF_SANITIZE)
  add_compile_options($<$<COMPILE_LANGUAGE:CXX,C>:-fsanitize=${TF_SANITIZE}>
                      $<$<COMPILE_LANGUAGE:CXX,C>:-fno-sanitize-recover=all>
                      $<$<COMPILE_LANGUAGE:CXX,C>:-fno-omit-frame-pointer>
                      # line tables only: reports name file and line, at a fraction of -g's
                      # compile and link time
                      $<$<COMPILE_LANGUAGE:CXX,C>:-g1>)
  add_link_options(-fsanitize=${TF_SANITIZE})
endif()
