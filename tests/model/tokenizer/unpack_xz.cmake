# cmake -DIN=file.xz -DOUT=file -DSHA256=hex -P unpack_xz.cmake
# Decompresses IN with xz into OUT and checks OUT's sha256, so a damaged or replaced test
# file fails the build instead of producing puzzling test failures.
execute_process(COMMAND xz -dc "${IN}" OUTPUT_FILE "${OUT}.tmp" RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  file(REMOVE "${OUT}.tmp")
  message(FATAL_ERROR "xz -dc ${IN} failed (${rc})")
endif()
file(SHA256 "${OUT}.tmp" actual)
if(NOT actual STREQUAL SHA256)
  file(REMOVE "${OUT}.tmp")
  message(FATAL_ERROR "${IN}: unpacked sha256 is ${actual}, expected ${SHA256}")
endif()
file(RENAME "${OUT}.tmp" "${OUT}")
