# Warnings for our own targets, and the SIMD level.
# The default build is portable (x86-64-v2 baseline from the compiler); TF_NATIVE tunes for
# the build machine, which lets the compiler vectorise the CPU kernels with AVX2/AVX-512.
add_library(tf_flags INTERFACE)
target_compile_options(tf_flags INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter -Wno-psabi -Wno-missing-field-initializers>)
if(TF_NATIVE)
  target_compile_options(tf_flags INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-march=native>)
endif()
# Hot loops are written for auto-vectorisation; -O3 turns on the vectoriser fully and
# -fno-math-errno lets sqrt/exp inline. We keep IEEE semantics otherwise (no -ffast-math)
# so results stay comparable to the reference.
target_compile_options(tf_flags INTERFACE
  $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CONFIG:Release>>:-O3 -fno-math-errno>)
