// npz.hpp: NumPy's .npz archives as a data source ([data] source = "npz"): np.savez and
// np.savez_compressed write a zip file with one .npy entry an array ("x.npy" for x=...).
//
// An entry stored as it is (np.savez) is read in place: its .npy header at its offset in the
// archive, its rows mapped or read from there like a .npy file's (npy.hpp), never read whole.
// An entry compressed with deflate (np.savez_compressed) cannot be read at an offset, so it
// is inflated once, as the data loads, into an anonymous temporary file (O_TMPFILE in the
// system's temporary directory: nothing is left behind, whatever way the process ends), and
// read from there. Zip64 archives (entries or archives past 4 GiB) are read.
//
// Every failure is a data_error naming the archive and what was expected: not a zip file, an
// entry that is not there (with the ones that are), a compression method other than stored
// or deflate, an encrypted entry, data whose size or CRC-32 is not the one the directory
// states, sizes past the input limits.
#pragma once

#include <string>
#include <vector>

#include "runtime/data/npy.hpp"

namespace troupe {

/// The array `name` of the .npz at `path` (the entry "name.npy"). Throws data_error.
npy_array npz_array(const std::string& path, const std::string& name);

/// The arrays an .npz holds, by name (each entry's name without ".npy"), in archive order.
std::vector<std::string> npz_names(const std::string& path);

}  // namespace troupe
