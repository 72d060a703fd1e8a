// The seed kernels' exp / log tables on the current device (made once per device).
#pragma once
#include "seed_math.cuh"

namespace lpdiag::cuda::seed {
Tables tables_for_current_device();
}
