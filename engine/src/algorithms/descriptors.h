// Each algorithm's descriptor (bagua/algorithms/catalog.h), defined in its
// own NAME_descriptor.cpp beside its sources, for every algorithm of
// algorithm_list.h.
#pragma once

#include <bagua/algorithms/catalog.h>

#include "algorithms/algorithm_list.h"

namespace bagua::algorithms {

#define BAGUA_DECLARE_DESCRIPTOR(id) AlgorithmDescriptor id##_descriptor();
BAGUA_ALGORITHMS(BAGUA_DECLARE_DESCRIPTOR)
#undef BAGUA_DECLARE_DESCRIPTOR

}  // namespace bagua::algorithms
