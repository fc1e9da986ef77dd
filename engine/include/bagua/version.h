// The version of libbagua and of the bagua command.
#pragma once

namespace bagua {

// "MAJOR.MINOR.PATCH", the project version from CMakeLists.txt.
const char* version();

// `git describe --always --dirty` of the sources it was built from
// ("unknown" when built outside a git checkout).
const char* source_revision();

}  // namespace bagua
