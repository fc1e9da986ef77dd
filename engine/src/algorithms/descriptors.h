// Each algorithm's descriptor (bagua/algorithms/catalog.h), defined in its
// own NAME_descriptor.cpp beside NAME.cpp, and listed in catalog.cpp.
#pragma once

#include <bagua/algorithms/catalog.h>

namespace bagua::algorithms {

AlgorithmDescriptor gradient_allreduce_descriptor();
AlgorithmDescriptor bytegrad_descriptor();
AlgorithmDescriptor decentralized_descriptor();
AlgorithmDescriptor low_precision_decentralized_descriptor();
AlgorithmDescriptor qadam_descriptor();
AlgorithmDescriptor async_descriptor();

}  // namespace bagua::algorithms
