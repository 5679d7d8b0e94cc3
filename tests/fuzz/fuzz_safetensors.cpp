// Fuzz harness: the input is a whole safetensors file (8-byte header length, JSON header, data).
// parse_safetensors must either refuse it with tf::Error or list tensors that lie wholly inside
// the input, whose views agree with their byte counts.
#include <cstddef>
#include <cstdint>

#include "core/error.h"
#include "model/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tf::SafetensorsHeader h;
  try {
    h = tf::parse_safetensors({data, size}, "fuzz.safetensors");
  } catch (const tf::Error&) {
    return 0;
  }
  volatile uint8_t sink = 0;
  for (const auto& [name, t] : h.tensors) {
    TF_ASSERT(t.data >= data && t.nbytes <= size && t.data - data <= ptrdiff_t(size - t.nbytes),
              "tensor '{}' lies outside the input", name);
    if (t.nbytes > 0) sink = sink ^ t.data[0] ^ t.data[t.nbytes - 1];  // ASan checks both ends
    try {
      const tf::TensorView v = t.view();  // asserts nbytes() == t.nbytes
      TF_ASSERT(v.n_dims == int(t.shape.size()));
    } catch (const tf::Error&) {
      // more dimensions than TensorView holds: refused by name, not a bug
    }
  }
  return 0;
}
