// The autocast switches of common/libtorch_compat.h (item 8 there), here
// because libbagua_common does not link LibTorch.
#include "common/libtorch_compat.h"

#include <ATen/autocast_mode.h>

namespace bagua::compat {

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)

bool autocast_enabled(c10::DeviceType device) { return at::autocast::is_autocast_enabled(device); }

void set_autocast(c10::DeviceType device, bool on, c10::ScalarType dtype) {
  if (on) at::autocast::set_autocast_dtype(device, dtype);
  at::autocast::set_autocast_enabled(device, on);
}

#else

bool autocast_enabled(c10::DeviceType device) {
  return device == c10::DeviceType::CUDA ? at::autocast::is_enabled() : at::autocast::is_cpu_enabled();
}

void set_autocast(c10::DeviceType device, bool on, c10::ScalarType dtype) {
  if (device == c10::DeviceType::CUDA) {
    if (on) at::autocast::set_autocast_gpu_dtype(dtype);
    at::autocast::set_enabled(on);
  } else {
    if (on) at::autocast::set_autocast_cpu_dtype(dtype);
    at::autocast::set_cpu_enabled(on);
  }
}

#endif

}  // namespace bagua::compat
