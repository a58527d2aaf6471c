// given.hpp: a data set a program hands over instead of naming files in [data].
//
// The Python module's troupe.data.arrays (NumPy arrays, read in place) and
// troupe.data.iterable (batches from a Python callable) are given sources: the session loads
// them where it would read the config's files (actors/session/prepare.cpp), so the same
// hold-out, standardisation, checks and loader apply. Not here: Python; the module's
// implementations live in python/.
#pragma once

#include "runtime/data/dataset.hpp"
#include "runtime/data/normalisation.hpp"
#include "troupe/loss.hpp"

namespace troupe {

class given_source {
 public:
  virtual ~given_source() = default;
  /// Both splits (a test split may be empty: [data] validation instead), before any
  /// hold-out, normalised with `normalisation`, targets of the kind the loss compares.
  /// Throws data_error naming what is wrong with the data.
  virtual dataset_split load(target_kind targets,
                             const feature_normalisation& normalisation) const = 0;
};

}  // namespace troupe
