// Every algorithm bagua has, once, in catalog order (Bagua's six): adding
// an algorithm adds one line here. BAGUA_ALGORITHMS(X) expands X(id) for
// each; `id` is the algorithm's recipe name, and its sources define
//   algorithms::id_descriptor()  in id_descriptor.cpp (no LibTorch: the
//                                catalog, libbagua_common, expands this
//                                list into algorithm_catalog())
//   algorithms::id_factory()     at the end of its LibTorch source (the
//                                registry, libbagua_core, expands this
//                                list into make_algorithm()'s table)
// Both lists are this one, so a descriptor never lacks a factory and the
// two stay in the same order.
#pragma once

#define BAGUA_ALGORITHMS(X)      \
  X(gradient_allreduce)          \
  X(bytegrad)                    \
  X(decentralized)               \
  X(low_precision_decentralized) \
  X(qadam)                       \
  X(async)
