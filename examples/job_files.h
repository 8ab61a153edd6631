// The files a training job names on its command line, checked before any work: a data file is
// read whole or not at all, an output file is known writable before step 1 (issue 22).
#pragma once

#include <string>

namespace fsdp::examples {

// All bytes of the regular file `path`, named by `option` ("--data"). Anything else is refused
// with a ValueError naming the option and the path: a FIFO (its open would wait for a writer),
// a device such as /dev/zero (it never ends), a directory; so is a file this process cannot
// hold, a failed read, or one that ends early. Never a partial read.
std::string read_data_file(const char* option, const std::string& path);

// Throws a ValueError naming `option` and `path` unless `path` can be opened for writing as a
// regular file. Leaves an existing file as it was; a file it had to create, it removes.
void check_writable_file(const char* option, const std::string& path);

}  // namespace fsdp::examples
